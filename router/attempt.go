package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Attempts: the turn tried on the ranked candidates, in order, until one
// answers. What a failed attempt means is decided once, by classify: go on
// to the next candidate or give up, and whether the backend leaves the
// fleet (see docs/routing.md, Failures).

// failure is what a failed attempt means for the turn and the backend.
type failure int

const (
	// fatal: returned as it is. Something reached the client, the
	// client went away, or no other backend would do better.
	fatal failure = iota
	// shrank: the prompt was refused as too long by a backend the router
	// believed holds it (its context shrank: a node restarted with a
	// smaller one). The router's mistake: the backend is re-read and the
	// next tried; only when none holds it is it the client's answer.
	shrank
	// noLogprobs: the backend cannot report log-probabilities (Ollama)
	// and refused before any call. Not a failure of the backend: the next
	// that can serves; only when none can is it the client's answer.
	noLogprobs
	// timedOut: no first token in time. It cost the client the whole
	// wait: retried once, on the next candidate; the backend is
	// distrusted until a probe generation succeeds.
	timedOut
	// busy: its queue is full. Busy, not broken: it stays in the fleet.
	busy
	// down: it failed before answering; it leaves the fleet until a
	// health check passes.
	down
)

// classify says what err, from an attempt at a prompt of length tokens on a
// backend believed to hold believed tokens a slot (0 unknown), means.
// started: something reached the client; cancelled: the turn's context
// ended.
func classify(err error, started, cancelled bool, believed, length int) failure {
	var tooLong *engine.ContextLengthError
	switch {
	case !started && !cancelled && errors.As(err, &tooLong) && (believed == 0 || length < believed):
		return shrank
	case !started && !cancelled && errors.Is(err, engine.ErrNoLogprobs):
		return noLogprobs
	case started || cancelled || !retryable(err):
		return fatal
	case errors.Is(err, engine.ErrTimeout):
		return timedOut
	case errors.Is(err, engine.ErrQueueFull):
		return busy
	}
	return down
}

// retryable says whether another backend may succeed where this one failed
// before answering.
func retryable(err error) bool {
	return errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrTimeout) ||
		errors.Is(err, engine.ErrQueueFull) || errors.Is(err, engine.ErrClosed)
}

// tally is what the failed attempts of one turn came to.
type tally struct {
	failed   []string // backends tried that failed, in order (Observe)
	failures []string // of them, those the walk went on from, with their errors
	count    [down + 1]int
	last     [down + 1]error
}

// note records a failure the walk goes on from.
func (t *tally) note(name string, f failure, err error) {
	t.failures = append(t.failures, fmt.Sprintf("%s: %v", name, err))
	t.count[f]++
	t.last[f] = err
}

// err is the turn's error once every candidate tried failed.
func (t *tally) err() error {
	n := len(t.failures)
	switch {
	case t.count[shrank] == n:
		return t.last[shrank]
	case t.count[noLogprobs] == n:
		return t.last[noLogprobs]
	case t.count[busy]+t.count[noLogprobs] == n:
		return fmt.Errorf("%w: every backend is busy: %s", engine.ErrQueueFull, strings.Join(t.failures, "; "))
	case t.count[timedOut] > 0:
		return fmt.Errorf("%w: no backend sent a first token in time: %s", engine.ErrTimeout, strings.Join(t.failures, "; "))
	}
	return fmt.Errorf("%w: every backend failed: %s", engine.ErrUnavailable, strings.Join(t.failures, "; "))
}

// attempt tries the turn on the ranked candidates in order (see classify)
// and returns the first answer, or what the failures came to. releasePlan
// releases generate's plan lock: before a tenant pin, which may wait, or
// once run has claimed the slot.
func (r *Router) attempt(ctx context.Context, req engine.Request, k key, stream engine.StreamFunc, ranked []candidate, t *tally, releasePlan func()) (string, engine.Result, error) {
	for _, c := range ranked {
		m := c.m
		if c.isolated {
			releasePlan() // the tenant pin may wait for a slot (tenancy.go)
		}
		pl, err := r.place(ctx, m, c, req, k.length)
		if err != nil {
			return "", engine.Result{}, err
		}
		believed := m.backend.Info().ContextSlot
		res, started, err := r.run(ctx, m, c, k, req, stream, &pl, releasePlan)
		if err == nil {
			return m.name, res, nil
		}
		t.failed = append(t.failed, m.name)
		f := classify(err, started, ctx.Err() != nil, believed, k.length)
		if f == fatal {
			return "", res, err
		}
		t.note(m.name, f, err)
		r.exclude(ctx, m, f, err)
		if f == timedOut && t.count[timedOut] > 1 {
			break // a second timeout ends the walk
		}
	}
	return "", engine.Result{}, t.err()
}

// exclude does to m what failure f says: re-read it, distrust it, or take
// it out of the fleet.
func (r *Router) exclude(ctx context.Context, m *member, f failure, err error) {
	switch f {
	case shrank:
		if rerr := r.refresh(ctx, m, false); rerr != nil {
			r.log.WarnContext(ctx, "re-reading the backend's context failed", "backend", m.name, "err", rerr)
		}
	case timedOut:
		if m.distrust(ctx, err, r.log) {
			r.changed()
		}
	case down:
		if m.down(ctx, err, r.log) {
			r.changed()
		}
	}
}

// placement is where one attempt runs: the chosen slot (-1: the backend
// chooses) and how. claimed: slot is a tenant pin, settled when the
// attempt ends (tenancy.go).
type placement struct {
	pin
	noCache, slotOnly bool
	claimed           bool
	prefill           time.Duration // the turn's predicted prefill there (member.prefills)
}

// place chooses the slot of a turn on candidate c (member m): the client's
// own pin, else the scorer's preference; on a backend the router isolates
// tenants on, the slot the tenant pin claims (tenancy.go), which blocks
// while no slot may take the turn. Never a slot the backend no longer has
// (a node restarted with fewer).
func (r *Router) place(ctx context.Context, m *member, c candidate, req engine.Request, length int) (placement, error) {
	if c.isolated {
		p, err := m.claim(ctx, req.Tenant, req.Slot, c.prefer, c.cached, length)
		if err != nil {
			return placement{}, err
		}
		return placement{pin: p, noCache: req.NoCache || !p.reuse, slotOnly: true, claimed: true}, nil
	}
	pl := placement{pin: pin{tenant: req.Tenant, slot: req.Slot}, noCache: req.NoCache, slotOnly: req.SlotOnly}
	if req.Slot < 0 && c.prefer >= 0 && c.prefer < m.slotCount() {
		pl.slot = c.prefer
	}
	return pl, nil
}

// run is one attempt: req as placed by pl, on m. releasePlan is called once
// the planned slot is claimed, before the turn is sent (generate). The
// registry and the cost model learn what really happened; the tenant is
// told only what usage lets it know.
func (r *Router) run(ctx context.Context, m *member, c candidate, k key, req engine.Request, stream engine.StreamFunc, pl *placement, releasePlan func()) (engine.Result, bool, error) {
	u := r.usageOf(m, c, k, req)
	pl.prefill = c.prefill
	endRun := func() {}
	if !pl.claimed && pl.slot >= 0 && (c.hasPlan || r.plansSlots(m)) {
		endRun = m.startRun(pl.slot)
	}
	releasePlan() // the slot is claimed: other turns may plan now
	res, started, err := r.generateOn(ctx, m, u, req, u.stream(stream), pl)
	if pl.claimed {
		m.settle(pl.pin, res.Slot, err == nil)
	}
	if err == nil {
		r.learn(m, k, res)
	}
	endRun() // after learn: the slot is planned for again as it now is
	res.Timings = u.forTenant(res.Timings)
	return res, started, err
}

// generateOn runs req on m as pl places it. A slot pin of the router's own
// that m refuses (a node restarted with fewer slots refuses the slot it no
// longer has) is the router's mistake, never the client's: m's slots are
// re-read, the pin forgotten and the turn run again unpinned, or, when
// the router isolates tenants on m (pl.claimed), pinned to a slot claimed
// anew, reusing nothing.
func (r *Router) generateOn(ctx context.Context, m *member, u usage, req engine.Request, stream engine.StreamFunc, pl *placement) (engine.Result, bool, error) {
	sub := req
	if u.k.tokens != nil && m.exact {
		sub.Messages, sub.Prompt, sub.Tokens = nil, "", u.k.tokens
	}
	sub.Slot, sub.NoCache, sub.SlotOnly = pl.slot, pl.noCache, pl.slotOnly
	res, started, err := m.generate(ctx, sub, stream, pl.prefill)
	if err == nil || started || pl.slot < 0 || req.Slot >= 0 || !errors.Is(err, engine.ErrInvalidRequest) {
		if err == nil {
			res.Timings = u.checked(res.Timings, res.Tokens)
		}
		return res, started, err
	}
	r.log.WarnContext(ctx, "backend refused the router's slot pin; re-reading its slots and retrying unpinned",
		"backend", m.name, "slot", pl.slot, "err", err)
	if rerr := r.refresh(ctx, m, false); rerr != nil {
		r.log.WarnContext(ctx, "re-reading the backend's slots failed", "backend", m.name, "err", rerr)
	}
	_ = r.reg.Release(kvcache.Location{Backend: m.name, Slot: pl.slot})
	pl.slot = -1
	if pl.claimed {
		// Unpinned, the backend would choose a slot another tenant's turn
		// may be on its way to reuse (tenancy.go): claim one anew.
		m.settle(pl.pin, -1, false)
		p, err := m.claim(ctx, pl.tenant, -1, -1, 0, u.k.length)
		if err != nil {
			pl.pin = pin{slot: -1}
			return engine.Result{}, false, err
		}
		pl.pin, pl.noCache = p, true
	}
	sub.Slot, sub.NoCache = pl.slot, pl.noCache
	res, started, err = m.generate(ctx, sub, stream, pl.prefill)
	if err == nil {
		res.Timings = u.checked(res.Timings, res.Tokens)
	}
	return res, started, err
}
