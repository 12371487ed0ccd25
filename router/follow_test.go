package router

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/kvcache"
)

// journalBackend is a fake node whose slots' journal the router follows
// in process; once, it slips an out-of-sequence event into the stream.
type journalBackend struct {
	*enginetest.Backend
	j *kvcache.Journal

	mu      sync.Mutex
	cursors []kvcache.Cursor // where each subscription started
	gapOnce bool             // send one out-of-sequence event
}

var _ engine.ResidencyFollower = (*journalBackend)(nil)

func (b *journalBackend) FollowResidency(ctx context.Context, c kvcache.Cursor, fn func(kvcache.JournalEvent) error) error {
	b.mu.Lock()
	b.cursors = append(b.cursors, c)
	b.mu.Unlock()
	sub := b.j.Subscribe(c)
	defer sub.Close()
	for _, ev := range sub.Pending() {
		if err := fn(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sub.C():
			if !ok {
				return sub.Err()
			}
			b.mu.Lock()
			gap := b.gapOnce
			b.gapOnce = false
			b.mu.Unlock()
			if gap {
				ev.Seq += 5 // as if events were lost on the way
			}
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
}

func (b *journalBackend) subscriptions() []kvcache.Cursor {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.cursors)
}

func tokenRange(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// TestResidencyFollowsTheNodesJournal: the registry holds what the node's
// journal says, keyed by the gateway as the node's tenant; a gap makes
// the router resubscribe from the last event it applied; /slots is not
// the source meanwhile.
func TestResidencyFollowsTheNodesJournal(t *testing.T) {
	j, err := kvcache.NewJournal(kvcache.JournalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	node := &journalBackend{Backend: enginetest.New(engine.Info{Name: "n", Model: "m", Slots: 2, ContextSlot: 512, Tenants: true}), j: j}
	j.SetSlot(1, "bob", tokenRange(500, 32)) // before the router: its snapshot
	r, err := New(Config{}, []engine.Backend{node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	keys := func(tenant string, tokens []int) []kvcache.Key { return r.exact.ForTenant(tenant).Tokens(tokens).Keys }
	held := func(slot int) []kvcache.Key { return r.reg.Held(kvcache.Location{Backend: "n", Slot: slot}) }
	waitChange(t, r, "the snapshot applied", func() bool { return slices.Equal(held(1), keys("bob", tokenRange(500, 32))) })
	if got := r.Status()[0].Residency; got != ResidencyEvents {
		t.Errorf("residency %q, want %q", got, ResidencyEvents)
	}

	alice := tokenRange(0, 64)
	j.SetSlot(0, "alice", alice)
	waitChange(t, r, "a stored event", func() bool { return slices.Equal(held(0), keys("alice", alice)) })
	j.SetSlot(0, "alice", alice[:20]) // cut back to one full block
	waitChange(t, r, "a removed event", func() bool { return slices.Equal(held(0), keys("alice", alice[:16])) })

	// An event lost on the way: the router resubscribes after the last
	// one it applied and the node replays the rest.
	node.mu.Lock()
	node.gapOnce = true
	node.mu.Unlock()
	j.SetSlot(1, "", nil)
	j.SetSlot(0, "carol", tokenRange(900, 48))
	waitChange(t, r, "resynced after the gap", func() bool {
		return len(held(1)) == 0 && slices.Equal(held(0), keys("carol", tokenRange(900, 48)))
	})
	subs := node.subscriptions()
	if len(subs) != 2 || subs[0] != (kvcache.Cursor{}) || subs[1].Epoch != j.Epoch() || subs[1].After != 3 {
		t.Errorf("subscriptions from %+v, want the start, then after event 3 of %s", subs, j.Epoch())
	}
	// Another tenant's blocks are never found by a lookup of alice's.
	if res := r.reg.Lookup(r.exact.ForTenant("alice").Tokens(tokenRange(900, 48))); len(res.Matches) != 0 {
		t.Errorf("alice's lookup of carol's tokens matched %+v", res.Matches)
	}
}

// scriptedNode is a node whose journal is the test's events, sent as
// they come (no history: a gap fails the test).
type scriptedNode struct {
	*enginetest.Backend
	events chan kvcache.JournalEvent
}

func (b *scriptedNode) FollowResidency(ctx context.Context, _ kvcache.Cursor, fn func(kvcache.JournalEvent) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-b.events:
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
}

// A followed slot is keyed from where the event changed it on, with the
// keys of what it kept from the last event: over events that extend a
// slot, overwrite its tail (a stored event from an earlier block, with or
// without a removal before it), hand it to another tenant or empty it, on
// a node whose blocks are not the router's, the registry holds after
// every event what keying the slot's whole tokens gives.
func TestFollowedSlotsKeyOnlyWhatChanged(t *testing.T) {
	const bt = 8 // the node's block; the router's is 16
	node := &scriptedNode{Backend: enginetest.New(engine.Info{Name: "n", Model: "m", Slots: 3, ContextSlot: 4096, Tenants: true}),
		events: make(chan kvcache.JournalEvent)}
	r, err := New(Config{}, []engine.Backend{node}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	seq := uint64(1)
	node.events <- kvcache.JournalEvent{Seq: seq, Epoch: "e", Type: kvcache.EventSnapshot, BlockTokens: bt, Load: &kvcache.Load{}}
	type held struct {
		tenant string
		tokens []int
	}
	slots := make([]held, 3)
	rng := rand.New(rand.NewPCG(7, 7))
	next := 100_000
	fresh := func(blocks int) []int { next += blocks * bt; return tokenRange(next, blocks*bt) }
	for step := range 400 {
		s := rng.IntN(3)
		h := slots[s]
		ev := kvcache.JournalEvent{Epoch: "e", Type: kvcache.EventStored, Slot: s, Tenant: h.tenant}
		switch k := rng.IntN(10); {
		case k < 5 || len(h.tokens) == 0: // a turn goes on
			if h.tenant == "" {
				ev.Tenant = []string{"alice", "bob"}[rng.IntN(2)]
			}
			ev.FromBlock, ev.Tokens = len(h.tokens)/bt, fresh(1+rng.IntN(8))
		case k < 7: // a retry or an edit: a new tail from an earlier block
			ev.FromBlock, ev.Tokens = rng.IntN(len(h.tokens)/bt), fresh(rng.IntN(6))
		case k < 8: // cut back
			ev.Type, ev.FromBlock = kvcache.EventRemoved, rng.IntN(len(h.tokens)/bt)
		case k < 9: // another tenant's conversation takes the slot
			ev.Tenant, ev.FromBlock, ev.Tokens = []string{"alice", "bob", "carol"}[rng.IntN(3)], 0, fresh(1+rng.IntN(40))
		default: // cleared
			ev.Type, ev.FromBlock = kvcache.EventRemoved, 0
		}
		h.tokens = append(slices.Clip(h.tokens[:ev.FromBlock*bt]), ev.Tokens...)
		if ev.Type == kvcache.EventStored {
			h.tenant = ev.Tenant
		}
		slots[s] = h
		seq++
		ev.Seq = seq
		node.events <- ev
		want := r.exact.ForTenant(h.tenant).Tokens(h.tokens).Keys
		waitChange(t, r, fmt.Sprintf("step %d: slot %d keyed", step, s), func() bool {
			return slices.Equal(r.reg.Held(kvcache.Location{Backend: "n", Slot: s}), want)
		})
	}
}
