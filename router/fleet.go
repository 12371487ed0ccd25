package router

import (
	"context"
	"fmt"
	"slices"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Backends joining and leaving (Config.Dynamic; backends found by DNS).
//
// The fleet is a slice replaced whole under fleetMu, never changed in
// place, so a turn that read it keeps a consistent list however the fleet
// changes meanwhile.
//
//   - A backend that joins (Add) is not routed to before a health check
//     passes (backendState.FailsFast): it is probed, then routed to.
//   - A backend that leaves (Remove) is taken out of the fleet at once, so
//     no new turn goes there, and drains: the turns already on it finish;
//     a turn that had chosen it but not started is refused before its
//     first byte and goes to the next candidate. Once the last turn ended,
//     its residency is forgotten and the caller may close it.

// fleet returns the backends turns may go to now. The slice is never
// written again: callers may keep it.
func (r *Router) fleet() []*member {
	r.fleetMu.RLock()
	defer r.fleetMu.RUnlock()
	return r.members
}

// Add brings b into the fleet: it is routed to once a health check passes.
// It fails on a name already in the fleet. Safe for concurrent use; it
// does not block on b.
func (r *Router) Add(b engine.Backend) error {
	info := b.Info()
	r.fleetMu.Lock()
	defer r.fleetMu.Unlock()
	if slices.ContainsFunc(r.members, func(m *member) bool { return m.name == info.Name }) {
		return fmt.Errorf("router: backend %q is already in the fleet", info.Name)
	}
	m, err := r.join(r.next, b, false)
	if err != nil {
		return err
	}
	r.next++
	r.members = append(slices.Clone(r.members), m)
	r.log.Info("backend joins the fleet; routed to once a health check passes", "backend", m.name)
	r.changed()
	return nil
}

// join makes the member of backend b, registers it and, if it publishes a
// journal of its slots, starts following it. fleetMu is held (or the
// router is being built).
func (r *Router) join(i int, b engine.Backend, healthy bool) (*member, error) {
	info := b.Info()
	capacity, _ := kvcache.Budget{Context: info.ContextSlot, Slots: max(info.Slots, 1)}.CapacityBlocks(r.cfg.BlockTokens)
	if err := r.reg.SetBackend(kvcache.BackendConfig{Name: info.Name, CapacityBlocks: capacity}); err != nil {
		return nil, err
	}
	m, err := newMember(i, b, r.cfg)
	if err != nil {
		return nil, err
	}
	m.state.start(healthy)
	if m.follower != nil {
		ctx, cancel := context.WithCancel(r.ctx)
		m.unfollow = cancel
		r.done.Add(1)
		go r.follow(ctx, m)
	}
	return m, nil
}

// Remove takes the backend named name out of the fleet and drains it (see
// above). The channel it returns is closed once the backend's last turn
// ended and its residency is forgotten (or the router closed): the caller
// may then close the backend. A name not in the fleet gives a closed
// channel. Safe for concurrent use; it does not block.
func (r *Router) Remove(name string) <-chan struct{} {
	out := make(chan struct{})
	r.fleetMu.Lock()
	i := slices.IndexFunc(r.members, func(m *member) bool { return m.name == name })
	if i < 0 {
		r.fleetMu.Unlock()
		close(out)
		return out
	}
	m := r.members[i]
	r.members = slices.Delete(slices.Clone(r.members), i, i+1)
	r.draining = append(slices.Clone(r.draining), m)
	r.fleetMu.Unlock()
	drained := m.retire()
	r.log.Info("backend leaves the fleet; draining its turns", "backend", name, "in_flight", m.load.Load())
	r.changed()
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		defer close(out)
		select {
		case <-drained:
		case <-r.ctx.Done():
		}
		if m.unfollow != nil {
			m.unfollow()
		}
		r.fleetMu.Lock()
		r.draining = slices.DeleteFunc(slices.Clone(r.draining), func(d *member) bool { return d == m })
		r.fleetMu.Unlock()
		r.reg.RemoveBackend(name)
		r.log.Info("backend drained and removed", "backend", name)
		r.changed()
	}()
	return out
}

// enter counts a turn on m; false once m was removed (retire).
func (m *member) enter() bool {
	m.turnMu.Lock()
	defer m.turnMu.Unlock()
	if m.drained != nil {
		return false
	}
	m.turns++
	return true
}

// leave ends a turn counted by enter; the last one on a removed member
// closes its drained channel.
func (m *member) leave() {
	m.turnMu.Lock()
	defer m.turnMu.Unlock()
	m.turns--
	if m.turns == 0 && m.drained != nil {
		close(m.drained)
	}
}

// retire refuses m's next turns and returns a channel closed once its
// turns in flight have ended. Called once per member.
func (m *member) retire() <-chan struct{} {
	m.turnMu.Lock()
	defer m.turnMu.Unlock()
	m.drained = make(chan struct{})
	if m.turns == 0 {
		close(m.drained)
	}
	return m.drained
}
