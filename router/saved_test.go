package router

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"kvwin/attention"

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

// The share of a node's snapshots lost before their conversation came
// back is learned from its journal once liveness is trusted: a removal
// counts by the chance its conversation was to come back (a chain just
// left by a turn: nearly 1; one the router never saw a turn leave: 0),
// and a displaced chain is priced by it: its restore from RAM, plus its
// recompute times the share; a branch of the turn's own chain is not
// priced as saved.
func TestTheLossShareIsLearnedFromTheJournal(t *testing.T) {
	j, err := kvcache.NewJournal(kvcache.JournalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b := enginetest.New(engine.Info{Name: "a", Model: "m", Slots: 1, ContextSlot: 4096, Tenants: true, Snapshots: true, SharesPrefixes: true})
	a := &savedNode{journalBackend: &journalBackend{Backend: b, j: j}, Prompts: enginetest.Prompts{B: b}}
	var clock atomic.Int64
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	r, err := New(Config{Now: now}, []engine.Backend{a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := r.members[0]
	keyer := r.exact.ForTenant("alice")
	if got := m.saved.lossShare(); got != 1 || r.Status()[0].SnapshotLoss != nil {
		t.Fatalf("before any snapshot the loss share is %v (status %v), want 1 and none reported", got, r.Status()[0].SnapshotLoss)
	}

	loc := kvcache.Location{Backend: "other", Slot: 0}
	trustLiveness(t, r, loc, &clock, now)

	saved := func() int { return m.saved.counts()["ram"] }
	publish := func(id string, tokens []int) {
		j.SetSaved(kvcache.SavedTokens{ID: id, Tenant: "alice", Tier: kvcache.MediumRAM, Bytes: 1 << 20, Tokens: tokens})
	}
	// 40 snapshots of chains no turn left here: removed, nothing is lost.
	for i := range 40 {
		publish(fmt.Sprint("gone", i), tokenRange(10000*(i+1), 512))
	}
	waitChange(t, r, "40 snapshots published", func() bool { return saved() == 40 })
	for i := range 40 {
		j.RemoveSaved(fmt.Sprint("gone", i))
	}
	waitChange(t, r, "40 snapshots removed", func() bool { return saved() == 0 })
	low := m.saved.lossShare()
	if want := 8.0 / 48; math.Abs(low-want) > 0.01 {
		t.Fatalf("after 40 snapshots removed unwanted: loss share %.3f, want about %.3f", low, want)
	}
	// 20 snapshots whose chains a turn has just left: their removal is a
	// loss.
	for i := range 20 {
		tokens := tokenRange(900000+1000*i, 512)
		r.liveness.observe(loc, nil, keyer.Tokens(tokens).Keys, 512, 0, 0, now())
		publish(fmt.Sprint("live", i), tokens)
	}
	waitChange(t, r, "20 live snapshots published", func() bool { return saved() == 20 })
	for i := range 20 {
		j.RemoveSaved(fmt.Sprint("live", i))
	}
	waitChange(t, r, "20 live snapshots removed", func() bool { return saved() == 0 })
	high := m.saved.lossShare()
	if high < low+0.15 {
		t.Fatalf("after 20 snapshots lost while wanted: loss share %.3f (was %.3f)", high, low)
	}
	if st := r.Status()[0].SnapshotLoss; st == nil || math.Abs(*st-high) > 0.005 {
		t.Fatalf("status reports the loss share as %v, want %.2f", st, high)
	}

	cost := attention.Predictor(m.cal)
	p := slotPlan{slot: 0, heldTokens: 1000, evicted: 1000}
	d := 1000
	got := destroyedTime(m, p, d, cost)
	want := restoreFrom(kvcache.MediumRAM, 0, d, cost) + time.Duration(high*float64(cost.Predict(d, 0)))
	if got != want || got >= cost.Predict(d, 0) {
		t.Fatalf("a displaced chain of %d tokens: %v, want %v, less than its recompute %v", d, got, want, cost.Predict(d, 0))
	}
	if got := destroyedTime(m, slotPlan{slot: 0, heldTokens: 1000, evicted: 200, branch: true}, 200, cost); got != cost.Predict(200, 0) {
		t.Fatalf("a branch of the turn's own chain priced as saved: %v, want its recompute %v", got, cost.Predict(200, 0))
	}
}

// pinSavedNode is a savedNode that runs a request on the slot it names, as
// a kvwin node does: the router plans its slots.
type pinSavedNode struct{ *savedNode }

func (pinSavedNode) PinsSlots() bool { return true }

// A newcomer taking the last free slot of a node whose snapshots wait for
// a conversation likely to come back counts what that return will then
// destroy (Claims); on a node whose snapshots nobody is expected back for
// it counts nothing. A returning turn counts no claim at home, and counts
// one on a node it would move to where a return waits.
func TestANewcomerCountsTheReturnsANodesSnapshotsWaitFor(t *testing.T) {
	node := func(name string) (pinSavedNode, *kvcache.Journal) {
		j, err := kvcache.NewJournal(kvcache.JournalConfig{})
		if err != nil {
			t.Fatal(err)
		}
		b := enginetest.New(engine.Info{Name: name, Model: "m", Slots: 2, ContextSlot: 4096, Tenants: true, Snapshots: true, SharesPrefixes: true})
		return pinSavedNode{&savedNode{journalBackend: &journalBackend{Backend: b, j: j}, Prompts: enginetest.Prompts{B: b}}}, j
	}
	a, ja := node("a")
	b, jb := node("b")
	var clock atomic.Int64
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(time.Duration(clock.Load())) }
	r, err := New(Config{Now: now}, []engine.Backend{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other := kvcache.Location{Backend: "other", Slot: 0}
	trustLiveness(t, r, other, &clock, now)
	keyer := r.exact.ForTenant("alice")
	// Each node: slot 0 holds a chain a turn just left, slot 1 nothing.
	for i, name := range []string{"a", "b"} {
		held := keyer.Tokens(tokenRange(100000*(i+1), 1024))
		loc := kvcache.Location{Backend: name, Slot: 0}
		if err := r.reg.Record(loc, held); err != nil {
			t.Fatal(err)
		}
		r.liveness.observe(loc, nil, held.Keys, 1024, 0, 0, now())
	}
	// a holds the snapshot of a conversation a turn just left; b one of a
	// chain no turn of this router left.
	back := tokenRange(500000, 1024)
	r.liveness.observe(other, nil, keyer.Tokens(back).Keys, 1024, 0, 0, now())
	ja.SetSaved(kvcache.SavedTokens{ID: "back", Tenant: "alice", Tier: kvcache.MediumRAM, Bytes: 1 << 20, Tokens: back})
	jb.SetSaved(kvcache.SavedTokens{ID: "gone", Tenant: "alice", Tier: kvcache.MediumRAM, Bytes: 1 << 20, Tokens: tokenRange(700000, 1024)})
	waitChange(t, r, "both snapshots published", func() bool {
		return r.Status()[0].Saved["ram"] == 1 && r.Status()[1].Saved["ram"] == 1
	})
	price := func(prompt []int) (onA, onB candidate) {
		k := key{tenant: "alice", keyer: keyer, tokens: prompt, exact: keyer.Tokens(prompt), length: len(prompt)}
		c := r.estimate(k, r.members)
		return c[0], c[1]
	}

	fresh := tokenRange(900000, 512)
	onA, onB := price(fresh)
	if onA.plan != 1 || onB.plan != 1 || onA.prefill != onB.prefill {
		t.Fatalf("a newcomer: plans %d and %d, prefill %v and %v; want both on the free slot 1, alike", onA.plan, onB.plan, onA.prefill, onB.prefill)
	}
	m := r.members[0]
	plans := r.slotPlans(m, keyer.Tokens(fresh), len(fresh), 0)
	want := destroyedTime(m, plans[0], plans[0].destroyed(true), attention.Predictor(m.cal))
	if w := r.claims(m); w < 0.9 {
		t.Fatalf("a's snapshot of a chain just left counts %.2f returns expected, want nearly 1", w)
	}
	if onA.extra <= 0 || onA.extra > want || onB.extra != 0 {
		t.Fatalf("a newcomer: extra %v on a (its return then displaces slot 0: %v), %v on b; want more than 0 and at most that, and 0", onA.extra, want, onB.extra)
	}
	if got := (prefixScorer{r.cfg}).rank([]candidate{onA, onB}, prompt{root: 1, length: len(fresh)}); got[0].name != "b" {
		t.Fatalf("a newcomer ranked %s first, want b, whose free slot no return waits for", got[0].name)
	}

	// The conversation a's snapshot waits for comes back: no claim on a.
	// On b it would move: once a conversation likely back waits in b's
	// tier too, it counts that one's claim there.
	again := append(append([]int(nil), back...), tokenRange(800000, 64)...)
	if onA, onB := price(again); onA.extra != 0 || onA.cached < 1000 || onB.extra != 0 {
		t.Fatalf("the return: extra %v, cached %d on a, extra %v on b; want no claim, its snapshot restored, and none on b yet", onA.extra, onA.cached, onB.extra)
	}
	wants := tokenRange(600000, 1024)
	r.liveness.observe(other, nil, keyer.Tokens(wants).Keys, 1024, 0, 0, now())
	jb.SetSaved(kvcache.SavedTokens{ID: "wants", Tenant: "alice", Tier: kvcache.MediumRAM, Bytes: 1 << 20, Tokens: wants})
	waitChange(t, r, "b's live snapshot published", func() bool { return r.Status()[1].Saved["ram"] == 2 })
	if onA, onB := price(again); onA.extra != 0 || onB.extra <= 0 {
		t.Fatalf("the return, b holding a snapshot likely back: extra %v on a, %v on b; want none at home and a claim on b", onA.extra, onB.extra)
	}
}

// trustLiveness makes r's liveness trusted by turns observed at loc, its
// clock advanced: conversations of ten turns, gaps of 10–50 s (as
// TestLivenessWeighsAChainByHowLongItHasBeenIdle).
func trustLiveness(t *testing.T, r *Router, loc kvcache.Location, clock *atomic.Int64, now func() time.Time) {
	t.Helper()
	key := kvcache.Key(1)
	for i := range 200 {
		clock.Add(int64(time.Duration(10+i%41) * time.Second))
		if i%10 == 0 {
			key += 1000
			r.liveness.observe(loc, []kvcache.Key{kvcache.Key(1 << 40 * (i + 1))}, []kvcache.Key{key + 1}, 0, 0, 0, now())
			key++
			continue
		}
		r.liveness.observe(loc, []kvcache.Key{key, key + 1}, []kvcache.Key{key + 1, key + 2}, 0, 0, 0, now())
		key++
	}
	if !r.liveness.trusted(now()) {
		t.Fatal("liveness is not trusted: the test proves nothing")
	}
}
