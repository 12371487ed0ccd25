package llamacpp

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"kvwin/engine"
	"kvwin/kvcache"
)

func TestRegistryFollowsTheSlots(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 2, Ctx: 1024, SnapshotDir: t.TempDir(), SnapshotMinTokens: 64})
	a := []engine.Message{{Role: "user", Content: text(1, 500)}}
	b := []engine.Message{{Role: "user", Content: text(2, 500)}}
	c := []engine.Message{{Role: "user", Content: text(3, 500)}}
	ra := chat(t, e, a, 4)
	chat(t, e, b, 4)
	reg := e.Registry()
	promptA, _ := e.prompt(engine.Request{Messages: a})
	chainA := e.kv.keyer.Tokens(promptA)
	slotA := kvcache.Location{Backend: "embedded", Slot: ra.Slot}
	if held := reg.Held(slotA); len(held) < len(chainA.Keys) || held[len(chainA.Keys)-1] != chainA.Keys[len(chainA.Keys)-1] {
		t.Fatalf("slot %d holds %d keys, want A's %d-block prompt", ra.Slot, len(held), len(chainA.Keys))
	}
	// C takes A's slot (least recently used): the slot's keys become C's, and
	// A is found only in the snapshot tier.
	rc := chat(t, e, c, 4)
	if rc.Slot != ra.Slot {
		t.Fatalf("C went to slot %d, want A's slot %d (LRU)", rc.Slot, ra.Slot)
	}
	promptC, _ := e.prompt(engine.Request{Messages: c})
	chainC := e.kv.keyer.Tokens(promptC)
	if held := reg.Held(slotA); len(held) < len(chainC.Keys) || held[0] != chainC.Keys[0] {
		t.Fatal("the reused slot does not hold C's keys")
	}
	// The registry learns of A's snapshot when it is queued, not written.
	for _, m := range reg.Lookup(chainA).Matches {
		if m.Tier == kvcache.TierSlot {
			t.Fatalf("A still matched in a live slot: %+v", m)
		}
		if m.Tier == kvcache.TierSnapshot && m.Blocks != len(chainA.Keys) {
			t.Fatalf("A's snapshot holds %d of %d blocks", m.Blocks, len(chainA.Keys))
		}
	}
}

// Many short conversations come and go over all slots, leaving the shared
// KV cache full of holes; long conversations must still be placed and
// restored, or fall back to a prefill, and answer as a cold engine does.
func TestFragmentedCacheStillPlacesAndRestoresLongConversations(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 4, Ctx: 1024, SnapshotDir: t.TempDir(), SnapshotMinTokens: 64})
	long := func(i int) []engine.Message {
		return []engine.Message{{Role: "system", Content: text(100+i, 300)}, {Role: "user", Content: text(200+i, 550)}}
	}
	first := map[int]string{}
	for round := range 3 {
		for i := range 30 {
			short := []engine.Message{{Role: "user", Content: text(1000+round*100+i, 20+(i*37)%200)}}
			chat(t, e, short, 2)
		}
		for i := range 3 {
			r := chat(t, e, long(i), 6)
			if round == 0 {
				first[i] = r.Text
			} else if r.Text != first[i] {
				t.Fatalf("round %d: long conversation %d answered %q, first time %q", round, i, r.Text, first[i])
			}
		}
	}
	if e.kv.restores.Load()+e.kv.restoreFailures.Load() == 0 {
		t.Fatal("no restore was even attempted")
	}
	cold := newTestEngine(t, Config{Slots: 1, Ctx: 1024})
	for i := range 3 {
		if r := chat(t, cold, long(i), 6); r.Text != first[i] {
			t.Fatalf("cold engine answered %q, fragmented engine %q", r.Text, first[i])
		}
	}
	t.Logf("restores %d, restore fallbacks %d, snapshot saves %d", e.kv.restores.Load(), e.kv.restoreFailures.Load(), e.kv.saves.Load())
}

func TestUnusableSnapshotDirLeavesTheEngineServing(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Config{Slots: 1, Ctx: 512, SnapshotDir: filepath.Join(blocker, "snapshots"), SnapshotMinTokens: 16})
	if e.kv.store != nil {
		t.Fatal("snapshot store open under a file")
	}
	for i := range 3 { // each turn evicts the previous conversation
		r := chat(t, e, []engine.Message{{Role: "user", Content: text(i, 200)}}, 2)
		if r.Timings.PromptTokens == 0 {
			t.Fatal("no answer")
		}
	}
}

// BenchmarkRestoreVersusPrefill measures, side by side, the time to first
// token of a returning conversation restored from a snapshot and of the same
// prompt prefilled cold, and the zstd ratio on the real KV state.
func BenchmarkRestoreVersusPrefill(b *testing.B) {
	dir := b.TempDir()
	e, err := New(Config{ModelPath: tinyPath, Slots: 1, Ctx: 4096, Threads: testThreads(), SnapshotDir: dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	conv := []engine.Message{{Role: "system", Content: text(1, 1500)}, {Role: "user", Content: text(2, 1500)}}
	other := []engine.Message{{Role: "user", Content: text(3, 300)}}
	run := func(msgs []engine.Message, cold bool) engine.Timings {
		req := greedy(1)
		req.Messages, req.NoCache = msgs, cold
		res, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			b.Fatal(err)
		}
		return res.Timings
	}
	var restored, prefilled time.Duration
	for range b.N {
		run(conv, false)
		run(other, false) // takes the only slot: conv is saved (restoring waits for the write)
		r := run(conv, false)
		if r.CachedTokens < r.PromptTokens/2 {
			b.Fatalf("not restored: cached %d of %d", r.CachedTokens, r.PromptTokens)
		}
		restored += r.FirstToken
		prefilled += run(conv, true).FirstToken
	}
	b.ReportMetric(float64(restored.Microseconds())/float64(b.N)/1000, "restored-ttft-ms")
	b.ReportMetric(float64(prefilled.Microseconds())/float64(b.N)/1000, "cold-ttft-ms")
	b.ReportMetric(float64(prefilled)/float64(restored), "cold/restored")

	state := seqState(e.lctx, 0)
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	comp := enc.EncodeAll(state, nil)
	b.ReportMetric(float64(len(state))/float64(len(comp)), "zstd-ratio")
}

// A restore that fails (no room in the cache) leaves the slot empty; the
// request must then prefill from nothing, not trust the slot's old tokens.
func TestFailedRestoreFallsBackToAFullPrefill(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048, SnapshotDir: t.TempDir(), SnapshotMinTokens: 64})
	a := []engine.Message{{Role: "system", Content: text(5, 500)}, {Role: "user", Content: text(6, 400)}}
	b := []engine.Message{{Role: "system", Content: text(5, 500)}, {Role: "user", Content: text(7, 400)}}
	first := chat(t, e, a, 8)
	chat(t, e, b, 8) // takes the only slot; a is saved
	failRestores = true
	defer func() { failRestores = false }()
	again := chat(t, e, a, 8)
	if e.kv.restoreFailures.Load() != 1 {
		t.Fatalf("%d restore failures, want 1", e.kv.restoreFailures.Load())
	}
	if again.Text != first.Text || again.Timings.CachedTokens != 0 {
		t.Fatalf("after a failed restore: cached %d, answer %q; first answer %q", again.Timings.CachedTokens, again.Text, first.Text)
	}
}
