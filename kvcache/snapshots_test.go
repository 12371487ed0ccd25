package kvcache

import "testing"

func TestSnapshotTier(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	conv := tokens(80, 320) // 20 blocks
	r := mustRegistry(t, BackendConfig{Name: "a"}, BackendConfig{Name: "b"})
	steps := []struct {
		do   func() error
		name string
	}{
		{func() error { return r.Record(Location{"a", 0}, k.Tokens(conv[:96])) }, "slot a/0 holds 6 blocks"},
		{func() error { return r.AddSnapshot("a", "s-old", k.Tokens(conv[:160]), 1000) }, "a saved 10 blocks"},
		{func() error { return r.AddSnapshot("a", "s-new", k.Tokens(conv[:288]), 3000) }, "a saved 18 blocks"},
		{func() error { return r.AddSnapshot("a", "other", k.Tokens(tokens(81, 200)), 500) }, "a saved another conversation"},
		{func() error { return r.AddSnapshot("b", "s-b", k.Tokens(conv[:64]), 700) }, "b saved 4 blocks"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		mustCheck(t, r)
	}

	res := r.Lookup(k.Tokens(conv))
	want := []Match{
		{Location: Location{"a", -1}, Tier: TierSnapshot, Blocks: 18, Length: 288, Snapshot: "s-new"},
		{Location: Location{"a", 0}, Tier: TierSlot, Blocks: 6, Length: 96},
		{Location: Location{"b", -1}, Tier: TierSnapshot, Blocks: 4, Length: 64, Snapshot: "s-b"},
	}
	if len(res.Matches) != len(want) {
		t.Fatalf("matches %+v, want %+v", res.Matches, want)
	}
	for i := range want {
		if res.Matches[i] != want[i] {
			t.Errorf("match %d = %+v, want %+v", i, res.Matches[i], want[i])
		}
	}

	b := r.Snapshot().Backends[0]
	if b.SnapshotBytes != 4500 || b.Snapshots != 3 || b.SnapshotBlocks != 10+18+12 || b.BlocksHeld != 6 {
		t.Fatalf("backend a: %+v", b)
	}

	for _, tc := range []struct {
		name     string
		do       func() error
		wantSnap string
		blocks   int
		bytes    int64
	}{
		{"replacing an id updates it", func() error { return r.AddSnapshot("a", "s-new", k.Tokens(conv[:32]), 100) }, "s-old", 10, 1600},
		{"removing the best falls back", func() error { return r.RemoveSnapshot("a", "s-old") }, "s-new", 2, 600},
		{"removing the last leaves none", func() error { return r.RemoveSnapshot("a", "s-new") }, "", 0, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, r)
			var got Match
			for _, m := range r.Lookup(k.Tokens(conv)).Matches {
				if m.Backend == "a" && m.Tier == TierSnapshot {
					got = m
				}
			}
			if got.Snapshot != tc.wantSnap || got.Blocks != tc.blocks {
				t.Errorf("best snapshot %q with %d blocks, want %q with %d", got.Snapshot, got.Blocks, tc.wantSnap, tc.blocks)
			}
			if b := r.Snapshot().Backends[0]; b.SnapshotBytes != tc.bytes {
				t.Errorf("snapshot bytes %d, want %d", b.SnapshotBytes, tc.bytes)
			}
		})
	}
}

func TestSnapshotTieGoesToSmallerID(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{})
	c := k.Tokens(tokens(82, 64))
	r := mustRegistry(t, BackendConfig{Name: "a"})
	for _, id := range []string{"m", "c", "x", "a2", "q"} {
		if err := r.AddSnapshot("a", id, c, 1); err != nil {
			t.Fatal(err)
		}
	}
	res := r.Lookup(c)
	if len(res.Matches) != 1 || res.Matches[0].Snapshot != "a2" {
		t.Fatalf("matches %+v, want one: a2", res.Matches)
	}
}

func TestSnapshotCounters(t *testing.T) {
	r := mustRegistry(t, BackendConfig{Name: "a"}, BackendConfig{Name: "b"})
	for _, step := range []struct {
		name string
		err  error
	}{
		{"save a", r.CountSnapshotSave("a")},
		{"save a", r.CountSnapshotSave("a")},
		{"save b", r.CountSnapshotSave("b")},
		{"restore a", r.CountSnapshotRestore("a")},
	} {
		if step.err != nil {
			t.Fatalf("%s: %v", step.name, step.err)
		}
	}
	st := r.Snapshot()
	if st.Totals.SnapshotSaves != 3 || st.Totals.SnapshotRestores != 1 ||
		st.Backends[0].SnapshotSaves != 2 || st.Backends[1].SnapshotRestores != 0 {
		t.Fatalf("counters %+v", st)
	}
}

// Keeps is the snapshot a prompt cache would load: the one keeping the
// largest share of itself, never one keeping under a quarter.
func TestLookupKeeps(t *testing.T) {
	k := mustKeyer(t, testNS, KeyerConfig{BlockTokens: 16})
	system := tokens(1, 64) // 4 blocks shared by every conversation
	conv := func(first uint64, blocks int) []int {
		return append(append([]int(nil), system...), tokens(first, 16*blocks)...)
	}
	r := mustRegistry(t, BackendConfig{Name: "a"}, BackendConfig{Name: "b"})
	for _, s := range []struct {
		backend, id string
		tokens      []int
	}{
		{"a", "long", conv(1000, 16)},  // keeps 4 of 20 blocks: under a quarter
		{"a", "short", conv(2000, 4)},  // keeps 4 of 8
		{"a", "longer", conv(3000, 8)}, // keeps 4 of 12
		{"b", "long", conv(4000, 16)},
	} {
		if err := r.AddSnapshot(s.backend, s.id, k.Tokens(s.tokens), 0); err != nil {
			t.Fatal(err)
		}
	}
	res := r.Lookup(k.Tokens(conv(9000, 1)))
	if len(res.Keeps) != 1 || res.Keeps[0].Snapshot != "short" || res.Keeps[0].Blocks != 4 || res.Keeps[0].Held != 8 {
		t.Fatalf("keeps %+v, want a's short (4 of 8 blocks) alone", res.Keeps)
	}
	// A conversation's own saved chain, a prefix of its next prompt,
	// keeps all of itself.
	own := conv(5000, 10)
	if err := r.AddSnapshot("a", "own", k.Tokens(own), 0); err != nil {
		t.Fatal(err)
	}
	res = r.Lookup(k.Tokens(append(own, tokens(6000, 32)...)))
	if len(res.Keeps) != 1 || res.Keeps[0].Snapshot != "own" || res.Keeps[0].Blocks != 14 || res.Keeps[0].Held != 14 {
		t.Fatalf("keeps %+v, want a's own (14 of 14 blocks)", res.Keeps)
	}
}
