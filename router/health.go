package router

import (
	"context"
	"time"

	"kvwin/engine"
)

// checkHealth runs the active health checks until ctx ends. Healthy
// backends are checked every HealthInterval; a failing one is retried with
// exponential backoff up to HealthMaxBackoff. Backends without a health
// check are taken as healthy again after one backoff period: the next
// request tells.
func (r *Router) checkHealth(ctx context.Context) {
	defer r.done.Done()
	tick := time.NewTicker(min(r.cfg.HealthInterval, 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, m := range r.members {
				if now.Before(m.next) {
					continue
				}
				r.check(ctx, m, now)
			}
		}
	}
}

func (r *Router) check(ctx context.Context, m *member, now time.Time) {
	var err error
	if hc, ok := m.backend.(engine.HealthChecker); ok {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
		err = hc.Health(cctx)
		cancel()
	}
	if err == nil {
		if !m.healthy.Swap(true) {
			r.log.Info("backend healthy again", "backend", m.name)
		}
		m.backoff = 0
		m.next = now.Add(r.cfg.HealthInterval)
		return
	}
	if m.healthy.Swap(false) {
		r.log.Warn("backend failed its health check", "backend", m.name, "err", err)
	}
	m.backoff = min(max(2*m.backoff, r.cfg.HealthInterval/2), r.cfg.HealthMaxBackoff)
	m.next = now.Add(m.backoff)
}
