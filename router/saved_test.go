package router

import (
	"math"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/kvcache"
)

// savedNode is a fake kvwin node that renders prompt tokens and publishes
// a journal.
type savedNode struct {
	*journalBackend
	enginetest.Prompts
}

func newSavedNode(t *testing.T, name string) (*savedNode, *kvcache.Journal) {
	t.Helper()
	j, err := kvcache.NewJournal(kvcache.JournalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b := enginetest.New(engine.Info{Name: name, Model: "m", Slots: 1, ContextSlot: 4096, Tenants: true, Snapshots: true})
	return &savedNode{journalBackend: &journalBackend{Backend: b, j: j}, Prompts: enginetest.Prompts{B: b}}, j
}

// A snapshot a node publishes is held there for its tenant, in its tier;
// the turn is priced with its restore, cheaper from RAM than from disk,
// and both far cheaper than recomputing on a node that holds nothing; a
// removal forgets it.
func TestPublishedSnapshotsArePricedByTier(t *testing.T) {
	a, ja := newSavedNode(t, "a")
	b, _ := newSavedNode(t, "b")
	r, err := New(Config{}, []engine.Backend{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	saved := func() map[string]int { return r.Status()[0].Saved }
	prompt := tokenRange(0, 2048)
	keyer := r.exact.ForTenant("alice")
	k := key{tenant: "alice", keyer: keyer, tokens: prompt, exact: keyer.Tokens(prompt), length: len(prompt)}
	price := func() (onA, onB candidate) {
		c := r.estimate(k, r.members)
		return c[0], c[1]
	}

	ja.SetSaved(kvcache.SavedTokens{ID: "s1", Tenant: "alice", Tier: kvcache.MediumRAM, Bytes: 1 << 20, Tokens: prompt[:2000]})
	waitChange(t, r, "the snapshot published", func() bool { return saved()["ram"] == 1 })
	ram, cold := price()
	if ram.cached != 2000-2000%16 || ram.predicted >= cold.predicted {
		t.Fatalf("from RAM: cached %d, predicted %v; recomputed on b: %v", ram.cached, ram.predicted, cold.predicted)
	}
	if bob := keyer; r.exact.ForTenant("bob").Tokens(prompt).Keys[0] == bob.Tokens(prompt).Keys[0] {
		t.Fatal("alice's and bob's keys agree: the test proves nothing about tenants")
	}
	if res := r.reg.Lookup(r.exact.ForTenant("bob").Tokens(prompt)); len(res.Matches) != 0 {
		t.Fatalf("bob's lookup matched alice's snapshot: %+v", res.Matches)
	}

	ja.SetSaved(kvcache.SavedTokens{ID: "s1", Tier: kvcache.MediumDisk}) // demoted
	waitChange(t, r, "the snapshot demoted", func() bool { return saved()["disk"] == 1 && saved()["ram"] == 0 })
	disk, _ := price()
	if disk.cached != ram.cached || disk.prefill <= ram.prefill || disk.predicted >= cold.predicted {
		t.Fatalf("from disk: cached %d, prefill %v (RAM %v), predicted %v (recompute %v)", disk.cached, disk.prefill, ram.prefill, disk.predicted, cold.predicted)
	}
	t.Logf("prefill predicted: %v restoring from RAM, %v from disk, %v recomputing", ram.prefill, disk.prefill, cold.prefill)

	// The node's measured restore speed replaces the prior: 2,000 tokens
	// at 1,000 tokens/s from disk is 2 s, slower than recomputing on b.
	ja.SetRestoreSpeed(kvcache.RestoreSpeed{RAM: 100000, Disk: 1000})
	waitChange(t, r, "the restore speed published", func() bool {
		_, sp := r.members[0].saved.restoring(savedPrefix + "s1")
		return sp == 1000
	})
	if slow, cold := price(); slow.predicted <= cold.predicted {
		t.Fatalf("a disk restoring at 1,000 tokens/s: predicted %v, recomputing on b %v", slow.predicted, cold.predicted)
	}
	ja.SetRestoreSpeed(kvcache.RestoreSpeed{})

	// A saturated node's restore loses to a recompute elsewhere: the same
	// score holds both.
	r.members[0].load.Store(8)
	r.members[0].service.Store(math.Float64bits(2))
	busy, idle := price()
	if busy.predicted <= idle.predicted {
		t.Fatalf("a, 8 turns in flight on one slot: predicted %v with its snapshot, b recomputing %v", busy.predicted, idle.predicted)
	}
	r.members[0].load.Store(0)

	ja.RemoveSaved("s1")
	waitChange(t, r, "the snapshot removed", func() bool { return saved() == nil })
	if gone, _ := price(); gone.cached != 0 {
		t.Fatalf("after the removal a still holds %d tokens", gone.cached)
	}
}
