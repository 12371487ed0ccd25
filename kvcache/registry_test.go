package kvcache

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestLookupLongestPrefixPerLocation(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	base := tokens(10, 160) // 10 blocks
	r := mustRegistry(t, BackendConfig{Name: "a"}, BackendConfig{Name: "b"})
	a0, a1, b0 := Location{"a", 0}, Location{"a", 1}, Location{"b", 0}
	for _, rec := range []struct {
		loc Location
		ts  []int
	}{
		{a0, base},              // all 10 blocks
		{a1, diverge(base, 64)}, // 4 blocks, then another conversation
		{b0, base[:100]},        // 6 blocks
	} {
		if err := r.Record(rec.loc, k.Tokens(rec.ts)); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, r)
	}
	for _, tc := range []struct {
		name  string
		query []int
		want  map[Location]int
	}{
		{"whole prompt", base, map[Location]int{a0: 10, a1: 4, b0: 6}},
		{"longer prompt", append(append([]int(nil), base...), tokens(11, 40)...), map[Location]int{a0: 10, a1: 4, b0: 6}},
		{"diverges at block 5", diverge(base, 80), map[Location]int{a0: 5, a1: 4, b0: 5}},
		{"diverges in block 0", diverge(base, 3), map[Location]int{}},
		{"shorter than a block", base[:15], map[Location]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := r.Lookup(k.Tokens(tc.query))
			if len(res.Matches) != len(tc.want) {
				t.Fatalf("matches %+v, want %v", res.Matches, tc.want)
			}
			for loc, n := range tc.want {
				if got := blocksAt(res, loc, TierSlot); got != n {
					t.Errorf("%v holds %d blocks, want %d", loc, got, n)
				}
			}
			for i := 1; i < len(res.Matches); i++ {
				if res.Matches[i].Blocks > res.Matches[i-1].Blocks {
					t.Fatalf("matches not best first: %+v", res.Matches)
				}
			}
			for _, m := range res.Matches {
				if m.Length != m.Blocks*16 || m.Approximate || m.Tier != TierSlot {
					t.Fatalf("match %+v", m)
				}
			}
		})
	}
}

func TestRecordReplacesSlotChain(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	convA, convB := tokens(20, 128), tokens(21, 64) // 8 and 4 blocks
	for _, tc := range []struct {
		name          string
		second        []int
		wantA, wantB  int
		wantEvictions uint64
	}{
		{"next turn extends the chain", append(append([]int(nil), convA...), tokens(22, 32)...), 8, 0, 0},
		{"another conversation takes the slot", convB, 0, 4, 8},
		{"an edited history keeps the shared head", diverge(convA, 50), 3, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRegistry(t, BackendConfig{Name: "a"})
			loc := Location{"a", 0}
			if err := r.Record(loc, k.Tokens(convA)); err != nil {
				t.Fatal(err)
			}
			if err := r.Record(loc, k.Tokens(tc.second)); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, r)
			if got := blocksAt(r.Lookup(k.Tokens(convA)), loc, TierSlot); got != tc.wantA {
				t.Errorf("conversation A: %d blocks, want %d", got, tc.wantA)
			}
			if got := blocksAt(r.Lookup(k.Tokens(convB)), loc, TierSlot); got != tc.wantB {
				t.Errorf("conversation B: %d blocks, want %d", got, tc.wantB)
			}
			st := r.Snapshot()
			if got := st.Backends[0].Slots[0].Evictions; got != tc.wantEvictions {
				t.Errorf("evictions %d, want %d", got, tc.wantEvictions)
			}
			if got := st.Totals.BlocksHeld; got != len(k.Tokens(tc.second).Keys) {
				t.Errorf("blocks held %d, want %d", got, len(k.Tokens(tc.second).Keys))
			}
		})
	}
}

func TestCorrect(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	prompt := tokens(30, 200) // 12 full blocks, 8-token tail
	for _, tc := range []struct {
		name        string
		believed    int // blocks recorded at the slot before the request
		reused      int
		wantHeld    int
		wantHits    uint64
		wantMisses  uint64
		wantClamped uint64
	}{
		{"reused everything it held", 12, 192, 12, 12, 0, 0},
		{"reused less: drops past floor", 12, 100, 6, 6, 6, 0},
		{"reused just short of a block", 12, 95, 5, 5, 7, 0},
		{"reused exactly a block boundary", 12, 96, 6, 6, 6, 0},
		{"reused nothing", 12, 0, 0, 0, 12, 0},
		{"held more than the registry knew", 3, 160, 10, 10, 2, 0},
		{"reused the tail too", 12, 200, 12, 12, 0, 0},
		{"claims more than it was sent", 12, 5000, 12, 12, 0, 1},
		{"claims a negative count", 12, -7, 0, 0, 12, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			r, err := New(Config{
				Backends: []BackendConfig{{Name: "a"}},
				Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			loc := Location{"a", 0}
			c := k.Tokens(prompt)
			if err := r.Record(loc, c.Prefix(tc.believed)); err != nil {
				t.Fatal(err)
			}
			if err := r.Correct(loc, c, tc.reused); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, r)
			if got := blocksAt(r.Lookup(c), loc, TierSlot); got != tc.wantHeld {
				t.Errorf("holds %d blocks, want %d", got, tc.wantHeld)
			}
			held := r.Held(loc)
			if len(held) != tc.wantHeld || sharedKeys(held, c.Keys) != tc.wantHeld {
				t.Errorf("Held = %d keys, want the first %d of the prompt", len(held), tc.wantHeld)
			}
			b := r.Snapshot().Backends[0]
			if b.Hits != tc.wantHits || b.Misses != tc.wantMisses || b.ReuseClamped != tc.wantClamped {
				t.Errorf("hits %d misses %d clamped %d, want %d %d %d",
					b.Hits, b.Misses, b.ReuseClamped, tc.wantHits, tc.wantMisses, tc.wantClamped)
			}
			if logged := strings.Contains(logs.String(), "clamped"); logged != (tc.wantClamped > 0) {
				t.Errorf("clamp logged %v, want %v: %q", logged, tc.wantClamped > 0, logs.String())
			}
		})
	}
}

func TestCorrectDropsChainBeyondThePrompt(t *testing.T) {
	// The slot held the previous turn's prompt and answer (10 blocks); the
	// new prompt shares 8 of them, and the backend reused only 4 blocks' worth.
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	prev := tokens(31, 160)
	next := append(diverge(prev, 128)[:128:128], tokens(32, 64)...)
	r := mustRegistry(t, BackendConfig{Name: "a"})
	loc := Location{"a", 3}
	if err := r.Record(loc, k.Tokens(prev)); err != nil {
		t.Fatal(err)
	}
	if err := r.Correct(loc, k.Tokens(next), 70); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, r)
	if got := blocksAt(r.Lookup(k.Tokens(prev)), loc, TierSlot); got != 4 {
		t.Fatalf("previous chain: %d blocks held, want 4", got)
	}
	if got := r.Snapshot().Backends[0].Corrected; got != 6 {
		t.Fatalf("corrected %d blocks, want 6", got)
	}
}

func TestRegistryErrors(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{})
	good := k.Tokens(tokens(40, 40))
	bad := good
	bad.Length = 100 // claims 6 blocks, carries 2 keys
	r := mustRegistry(t, BackendConfig{Name: "a", CapacityBlocks: 10})
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"record unknown backend", r.Record(Location{"zz", 0}, good), ErrUnknownBackend},
		{"record negative slot", r.Record(Location{"a", -1}, good), ErrInvalidSlot},
		{"record inconsistent chain", r.Record(Location{"a", 0}, bad), ErrInvalidChain},
		{"correct zero block size", r.Correct(Location{"a", 0}, Chain{}, 0), ErrInvalidChain},
		{"correct unknown backend", r.Correct(Location{"zz", 0}, good, 3), ErrUnknownBackend},
		{"release unknown backend", r.Release(Location{"zz", 0}), ErrUnknownBackend},
		{"negative capacity", r.SetBackend(BackendConfig{Name: "b", CapacityBlocks: -1}), ErrInvalidConfig},
		{"empty name", r.SetBackend(BackendConfig{}), ErrInvalidConfig},
		{"snapshot without id", r.AddSnapshot("a", "", good, 1), ErrInvalidSnapshot},
		{"remove unknown snapshot", r.RemoveSnapshot("a", "nope"), ErrUnknownSnapshot},
		{"count for unknown backend", r.CountSnapshotSave("zz"), ErrUnknownBackend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.want) {
				t.Fatalf("err = %v, want %v", tc.err, tc.want)
			}
		})
	}
	mustCheck(t, r)
	if _, err := New(Config{Backends: []BackendConfig{{Name: "a"}, {Name: "a"}}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("duplicate backend: err = %v", err)
	}
}

func TestReleaseAndRemoveBackend(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{})
	c := k.Tokens(tokens(50, 64))
	r := mustRegistry(t, BackendConfig{Name: "a"}, BackendConfig{Name: "b"})
	for _, loc := range []Location{{"a", 0}, {"a", 1}, {"b", 0}} {
		if err := r.Record(loc, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.AddSnapshot("b", "s1", c, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(Location{"a", 1}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, r)
	r.RemoveBackend("b")
	r.RemoveBackend("never-added")
	mustCheck(t, r)
	res := r.Lookup(c)
	if len(res.Matches) != 1 || res.Matches[0].Location != (Location{"a", 0}) {
		t.Fatalf("after release and removal: %+v", res.Matches)
	}
}

func TestCommonPrefix(t *testing.T) {
	a := []Key{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, tc := range []struct {
		name string
		b    []Key
		want int
	}{
		{"empty", nil, 0},
		{"first differs", []Key{9, 2, 3}, 0},
		{"one equal", []Key{1}, 1},
		{"second differs", []Key{1, 0, 0, 0}, 1},
		{"equal", a, 9},
		{"longer", append(append([]Key(nil), a...), 10, 11), 9},
		{"differs at the last", []Key{1, 2, 3, 4, 5, 6, 7, 8, 0}, 8},
		{"differs in the middle", []Key{1, 2, 3, 4, 0, 0, 0, 0, 0, 0}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := commonPrefix(a, tc.b); got != tc.want {
				t.Fatalf("commonPrefix = %d, want %d", got, tc.want)
			}
			if got := commonPrefix(tc.b, a); got != tc.want {
				t.Fatalf("commonPrefix reversed = %d, want %d", got, tc.want)
			}
		})
	}
}
