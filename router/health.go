package router

import (
	"context"
	"fmt"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// checkHealth runs the active health checks until ctx ends. Healthy
// backends are checked every HealthInterval; a failing one is retried with
// exponential backoff up to HealthMaxBackoff. Each check runs on its own
// goroutine (owned by this loop, ended by ctx), so a probe waiting on a
// hung backend does not delay the checks of the others. Backends without a
// health check are taken as healthy again after one backoff period: the
// next request tells.
func (r *Router) checkHealth(ctx context.Context) {
	defer r.done.Done()
	tick := time.NewTicker(min(r.cfg.HealthInterval, 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, m := range r.fleet() {
				// checking orders the check's writes of next and backoff
				// before this read.
				if m.checking.Load() || now.Before(m.next) && !(m.wantRead.Load() && m.state.Available()) {
					continue
				}
				m.checking.Store(true)
				r.done.Add(1)
				go func() {
					defer r.done.Done()
					defer m.checking.Store(false)
					r.check(ctx, m)
				}()
			}
		}
	}
}

// check runs one health check of m: a probe generation for a backend that
// timed out, else its health endpoint; then, when it passes, re-reads the
// backend's slots and context.
func (r *Router) check(ctx context.Context, m *member) {
	var err error
	if m.state.Suspect() {
		err = r.probe(ctx, m)
	} else if hc, ok := engine.As[engine.HealthChecker](m.backend); ok {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
		err = hc.Health(cctx)
		cancel()
	}
	rejoin := !m.state.Available()
	if err == nil {
		err = r.refresh(ctx, m, rejoin)
	}
	if ctx.Err() != nil {
		return // the router is closing: the check says nothing
	}
	if err == nil && r.readDue(m, rejoin) {
		r.readSlots(ctx, m)
	}
	if err == nil {
		if m.state.pass() {
			r.log.Info("backend healthy again", "backend", m.name, "slots", m.slots.Load(), "ctx_per_slot", m.ctx.Load())
			r.changed()
		}
		m.backoff = 0
		m.next = time.Now().Add(r.cfg.HealthInterval)
		return
	}
	if m.state.down() {
		r.log.Warn("backend failed its health check", "backend", m.name, "err", err)
		r.changed()
	}
	m.backoff = min(max(2*m.backoff, r.cfg.HealthInterval/2), r.cfg.HealthMaxBackoff)
	m.next = time.Now().Add(m.backoff)
}

// probe asks m for one token. A backend that timed out on a turn must
// generate again before it gets another: answering /health while its
// generations hang is exactly how it failed. The backend's own timeouts
// bound the probe; the router's closing ends it sooner.
func (r *Router) probe(ctx context.Context, m *member) error {
	s := engine.DefaultSampling()
	s.Temperature = 0
	_, err := m.backend.Generate(ctx, engine.Request{Prompt: "ping", MaxTokens: 1, Sampling: s, Slot: -1}, nil)
	if err != nil {
		return fmt.Errorf("probe generation: %w", err)
	}
	return nil
}

// refresh re-reads m's slots and context and makes the registry agree: the
// slots a backend no longer has hold nothing, and a backend that rejoins
// after being down (perhaps restarted, its KV gone) or whose context
// changed holds nothing anywhere. Safe to call concurrently for one member.
func (r *Router) refresh(ctx context.Context, m *member, rejoin bool) error {
	if rf, ok := engine.As[engine.Refresher](m.backend); ok {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
		err := rf.Refresh(cctx)
		cancel()
		if err != nil {
			return err
		}
	}
	info := m.backend.Info()
	oldSlots := int(m.slots.Swap(int64(info.Slots)))
	oldCtx := int(m.ctx.Swap(int64(info.ContextSlot)))
	from := info.Slots
	if rejoin || oldCtx != info.ContextSlot {
		from = 0
	}
	m.resMu.Lock()
	if m.following.Load() && from == 0 && oldCtx == info.ContextSlot {
		from = info.Slots // its journal, followed, already says what it holds after a restart
	}
	for s := from; s < max(oldSlots, info.Slots); s++ {
		_ = r.reg.Release(kvcache.Location{Backend: m.name, Slot: s})
	}
	m.resMu.Unlock()
	m.forgetOwners(from)
	if oldSlots != info.Slots || oldCtx != info.ContextSlot {
		capacity, _ := kvcache.Budget{Context: info.ContextSlot, Slots: max(info.Slots, 1)}.CapacityBlocks(r.cfg.BlockTokens)
		_ = r.reg.SetBackend(kvcache.BackendConfig{Name: m.name, CapacityBlocks: capacity})
		if oldSlots != 0 || oldCtx != 0 {
			r.log.Info("backend changed its slots or context", "backend", m.name,
				"slots", info.Slots, "was_slots", oldSlots, "ctx_per_slot", info.ContextSlot, "was_ctx_per_slot", oldCtx)
		}
		r.changed()
	}
	return nil
}

var _ engine.Readier = (*Router)(nil)

// Ready returns nil while some backend is healthy and the fleet's model is
// known, else an error wrapping engine.ErrUnavailable: what a gateway's
// GET /health reports. It does not block.
func (r *Router) Ready() error {
	for _, m := range r.fleet() {
		if m.state.Available() {
			return nil
		}
	}
	return fmt.Errorf("%w: no healthy backend (%d configured)", engine.ErrUnavailable, len(r.fleet()))
}

// BackendStatus is one backend as the router sees it.
type BackendStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	// Suspect: it timed out and waits for a probe generation to succeed.
	Suspect     bool `json:"suspect"`
	Slots       int  `json:"slots"`
	ContextSlot int  `json:"ctx_per_slot"`
	InFlight    int  `json:"in_flight"`
	// Residency is how the registry knows what the backend holds:
	// ResidencyEvents (its journal, followed, corrected by turns),
	// ResidencyRead (its /slots, corrected by turns), ResidencyLearned
	// (turns alone: it does not serve /slots), or "" (not read yet, or a
	// backend that cannot say).
	Residency string `json:"residency,omitempty"`
	// Saved counts the KV snapshots the backend published (a kvwin node's
	// journal), by tier: "ram", "disk" (saved.go).
	Saved map[string]int `json:"saved,omitempty"`
	// SnapshotLoss is the share of the snapshots the backend published
	// that the router counts lost before their conversation came back
	// (saved.go): what a chain displaced there is priced by. Absent for a
	// backend that publishes none.
	SnapshotLoss *float64 `json:"snapshot_loss_share,omitempty"`
	// Draining: it left the fleet (its address is gone from DNS) and
	// finishes its turns in flight; no new turn goes there.
	Draining bool `json:"draining,omitempty"`
}

// Status returns every backend's state, in configuration order (joined
// ones last), then the backends removed that still drain their turns. It
// does not block.
func (r *Router) Status() []BackendStatus {
	r.fleetMu.RLock()
	members, draining := r.members, r.draining
	r.fleetMu.RUnlock()
	out := make([]BackendStatus, 0, len(members)+len(draining))
	for _, m := range members {
		out = append(out, m.status())
	}
	for _, m := range draining {
		st := m.status()
		st.Draining = true
		out = append(out, st)
	}
	return out
}

func (m *member) status() BackendStatus {
	return BackendStatus{Name: m.name, Healthy: m.state.Available(), Suspect: m.state.Suspect(),
		Slots: int(m.slots.Load()), ContextSlot: int(m.ctx.Load()), InFlight: int(m.load.Load()), Residency: m.residency(),
		Saved: m.saved.counts(), SnapshotLoss: m.saved.loss()}
}

// Changed returns a channel closed at the next change of any backend's
// health, slots or context: tests and operators' tools wait on it instead
// of polling.
func (r *Router) Changed() <-chan struct{} {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	return r.watch
}

// changed wakes the waiters of Changed.
func (r *Router) changed() {
	r.watchMu.Lock()
	close(r.watch)
	r.watch = make(chan struct{})
	r.watchMu.Unlock()
}
