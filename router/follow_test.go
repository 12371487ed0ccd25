package router

import (
	"context"
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
