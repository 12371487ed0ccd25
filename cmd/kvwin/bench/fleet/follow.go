package fleet

import (
	"context"
	"sync"

	"kvwin/engine"
	"kvwin/kvcache"
)

// The journal of a simulated kvwin node with snapshot tiers, followed by
// the router as a gateway follows a real node's GET /kvwin/v1/events
// (router/follow.go): the same kvcache.Journal the engine publishes, its
// events handed to the router's follower through a subscription.
//
// In simulated time the journal must reach the router at a known point,
// not whenever a goroutine gets to it: the follower applies events only
// when the simulation asks (sim.flush, after every event of the loop, when
// the router's turns are all parked or returned), and the simulation waits
// until it has. So the router sees a node's slots and snapshots at once,
// as a gateway on the node's network would within milliseconds, and a run
// stays reproducible.

// journaled is a node that publishes its journal: engine.As finds its
// FollowResidency, and the node's other abilities through the embedding.
type journaled struct{ *node }

var _ engine.ResidencyFollower = journaled{}

// follow is the handshake between the simulation and the router's
// follower of one node.
type follow struct {
	flushes chan chan struct{} // a request to apply what is pending; closed when done
	mu      sync.Mutex
	sub     *kvcache.Subscription // the follower's current subscription
}

func newFollow() *follow { return &follow{flushes: make(chan chan struct{})} }

// FollowResidency subscribes to the node's journal from c and applies its
// events with fn when the simulation flushes, until ctx ends or fn fails.
func (n journaled) FollowResidency(ctx context.Context, c kvcache.Cursor, fn func(kvcache.JournalEvent) error) error {
	sub := n.journal.Subscribe(c)
	defer sub.Close()
	for _, ev := range sub.Pending() {
		if err := fn(ev); err != nil {
			return err
		}
	}
	n.follow.mu.Lock()
	n.follow.sub = sub
	n.follow.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case done := <-n.follow.flushes:
			err := drain(sub, fn)
			close(done)
			if err != nil {
				return err
			}
		}
	}
}

// drain applies the events sub holds now.
func drain(sub *kvcache.Subscription, fn func(kvcache.JournalEvent) error) error {
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				return sub.Err()
			}
			if err := fn(ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// pending reports whether the node has published events its follower has
// not applied (or the follower has not subscribed yet).
func (n *node) pending() bool {
	n.follow.mu.Lock()
	defer n.follow.mu.Unlock()
	return n.follow.sub == nil || len(n.follow.sub.C()) > 0
}

// flush waits until the router's follower has applied every event n has
// published. It blocks; the simulation's thread calls it.
func (n *node) flush() {
	done := make(chan struct{})
	n.follow.flushes <- done
	<-done
}
