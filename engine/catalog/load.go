package catalog

import (
	"context"
	"fmt"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// acquire returns e's backend, loading it if needed, and the function that
// releases it. It blocks while the model loads, or while no other model can
// be unloaded to make room, until ctx ends.
func (c *Catalog) acquire(ctx context.Context, e *entry) (engine.Backend, func(), error) {
	if e.remote != nil {
		return e.remote, func() {}, nil
	}
	c.mu.Lock()
	for {
		switch e.state {
		case Loaded:
			e.inflight++
			e.lastUsed = c.cfg.Now()
			c.signalLocked()
			c.mu.Unlock()
			return e.eng, func() { c.release(e) }, nil
		case Loading:
			// wait below
		default:
			if victim, ok := c.roomLocked(e); ok {
				if err := c.loadLocked(e, victim); err != nil {
					c.mu.Unlock()
					return nil, nil, err
				}
				continue
			}
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("waiting for model %q: %w", e.m.Name, ctx.Err())
		}
		c.mu.Lock()
	}
}

// roomLocked reports whether e may load now, and which idle loaded model
// must be unloaded first (nil: none).
func (c *Catalog) roomLocked(e *entry) (*entry, bool) {
	if c.cfg.MaxLoaded <= 0 {
		return nil, true
	}
	used := 0
	var lru *entry
	for _, o := range c.entries {
		if o == e || (o.state != Loaded && o.state != Loading) {
			continue
		}
		used++
		if o.state == Loaded && o.inflight == 0 && (lru == nil || o.lastUsed.Before(lru.lastUsed)) {
			lru = o
		}
	}
	switch {
	case used < c.cfg.MaxLoaded:
		return nil, true
	case lru != nil:
		return lru, true
	}
	return nil, false
}

// loadLocked unloads victim (if any) and loads e; it is called and
// returns with mu held, but releases it while engines close and load.
func (c *Catalog) loadLocked(e, victim *entry) error {
	e.state = Loading
	var old Engine
	if victim != nil {
		old = c.takeLocked(victim)
	}
	c.signalLocked()
	c.mu.Unlock()
	if old != nil {
		c.closeEngine(victim, old, "make room (max_loaded_models)")
	}
	start := c.cfg.Now()
	eng, err := c.cfg.Open(e.m)
	c.mu.Lock()
	if err != nil {
		e.state, e.lastErr = Failed, err
		c.signalLocked()
		c.log.Error("model load failed", "model", e.m.Name, "err", err)
		return fmt.Errorf("load model %q: %w: %w", e.m.Name, engine.ErrUnavailable, err)
	}
	e.state, e.eng, e.loadedAt, e.lastUsed, e.lastErr = Loaded, eng, c.cfg.Now(), c.cfg.Now(), nil
	c.loads.WithLabelValues(e.m.Name).Inc()
	c.log.Info("model loaded", "model", e.m.Name, "seconds", c.cfg.Now().Sub(start).Seconds())
	c.signalLocked()
	return nil
}

// takeLocked marks a loaded entry idle and returns its engine to close.
func (c *Catalog) takeLocked(e *entry) Engine {
	eng := e.eng
	e.state, e.eng, e.loadedAt = Idle, nil, time.Time{}
	return eng
}

// closeEngine frees an unloaded entry's engine. It blocks until it is.
func (c *Catalog) closeEngine(e *entry, eng Engine, why string) {
	if err := eng.Close(); err != nil {
		c.log.Warn("model engine closed with an error", "model", e.m.Name, "err", err)
	}
	c.unloads.WithLabelValues(e.m.Name).Inc()
	c.log.Info("model unloaded", "model", e.m.Name, "why", why)
}

// release ends one generation on e.
func (c *Catalog) release(e *entry) {
	c.mu.Lock()
	e.inflight--
	e.lastUsed = c.cfg.Now()
	c.signalLocked()
	c.mu.Unlock()
}

// victim is a model being unloaded, with the engine to close.
type victim struct {
	e   *entry
	eng Engine
}

// expire unloads every embedded model idle past its TTL.
func (c *Catalog) expire() {
	var out []victim
	c.mu.Lock()
	now := c.cfg.Now()
	for _, e := range c.entries {
		if e.state == Loaded && e.inflight == 0 && e.m.TTL > 0 && now.Sub(e.lastUsed) >= e.m.TTL {
			out = append(out, victim{e, c.takeLocked(e)})
		}
	}
	if len(out) > 0 {
		c.signalLocked()
	}
	c.mu.Unlock()
	for _, v := range out {
		c.closeEngine(v.e, v.eng, "ttl")
	}
}

// Run unloads models past their TTL, and sweeps the snapshot files of the
// models not loaded past SnapshotTTL, until ctx ends; it blocks until
// then. The TTL check runs every quarter of the shortest TTL (at most each
// second), so a model is unloaded within a quarter TTL of its expiry.
func (c *Catalog) Run(ctx context.Context) {
	tick := time.Second
	for _, e := range c.entries {
		if t := e.m.TTL / 4; e.m.TTL > 0 && t < tick {
			tick = max(t, 10*time.Millisecond)
		}
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	// Models not loaded have no snapshot store sweeping their files: sweep
	// them here, now and on the stores' cadence.
	var sweep <-chan time.Time
	if c.cfg.SnapshotTTL > 0 {
		c.expireUnloaded()
		st := time.NewTicker(kvcache.ExpireInterval(c.cfg.SnapshotTTL))
		defer st.Stop()
		sweep = st.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.expire()
		case <-sweep:
			c.expireUnloaded()
		}
	}
}

// Close unloads every model; it blocks until their engines are closed.
// Generations still running are cancelled by their engine's Close. Call
// it after Run has returned.
func (c *Catalog) Close() {
	c.mu.Lock()
	var out []victim
	for _, e := range c.entries {
		if e.state == Loaded {
			out = append(out, victim{e, c.takeLocked(e)})
		}
	}
	c.signalLocked()
	c.mu.Unlock()
	for _, v := range out {
		c.closeEngine(v.e, v.eng, "shutdown")
	}
}

// ExpireSnapshots expires the snapshots of every model: a loaded one's
// engine sweeps its store, a model not loaded has its directory swept. It
// blocks on disk.
func (c *Catalog) ExpireSnapshots() int {
	n := 0
	for _, e := range c.entries {
		b, release := e.peek()
		if b == nil {
			continue
		}
		if x, ok := engine.As[engine.SnapshotExpirer](b); ok {
			n += x.ExpireSnapshots()
		}
		release()
	}
	return n + c.expireUnloaded()
}

// expireUnloaded deletes the snapshot files idle past the TTL of the
// embedded models not loaded (no store is open on their directories; a
// loaded model's engine expires its own). The lock is held so no model
// loads meanwhile and indexes a file being removed.
func (c *Catalog) expireUnloaded() int {
	if c.cfg.SnapshotTTL <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cutoff := c.cfg.SnapshotNow().Add(-c.cfg.SnapshotTTL)
	n := 0
	for _, e := range c.entries {
		dir := e.m.SnapshotDir
		if dir == "" || e.state == Loaded || e.state == Loading {
			continue
		}
		k, err := kvcache.ExpireDir(dir, cutoff)
		if err != nil {
			c.log.Warn("expired snapshots of a model not loaded not all deleted", "model", e.m.Name, "err", err)
		}
		n += k
	}
	return n
}
