package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/cmd/kvwin/config"
	"kvwin/engine"
	"kvwin/engine/llamacpp"
	"kvwin/kvcache"
	"kvwin/web"
	"kvwin/window"
)

// catalog serves the models of a configuration file under their names:
// embedded GGUF models are loaded on first use and unloaded after their
// TTL idle or to make room under max_loaded_models (least recently used
// first); remote ones are served by a router each and always available.
//
// Invariants (under mu): an entry is idle, failed, loading or loaded; only
// a loaded entry has an engine; loaded plus loading entries never exceed
// max (when max > 0); an entry with generations in flight is never
// unloaded. Every change of state or in-flight count closes and replaces
// changed, which is how waiting requests learn of it.
type catalog struct {
	log     *slog.Logger
	max     int
	entries []*entry
	byName  map[string]*entry
	// open loads an embedded entry's engine; it blocks for the load.
	open func(e *entry) (*llamacpp.Engine, error)
	// onUnload runs after an entry's engine was closed (metrics, registry).
	onUnload func(e *entry, eng *llamacpp.Engine)
	loads    *prometheus.CounterVec
	unloads  *prometheus.CounterVec
	now      func() time.Time
	// snapshotDir is an embedded entry's snapshot directory ("": snapshots
	// off); snapshotTTL expires them, on the clock snapshotNow, loaded or
	// not (retention.go).
	snapshotDir func(e *entry) string
	snapshotTTL time.Duration
	snapshotNow func() time.Time

	mu      sync.Mutex
	changed chan struct{}
}

var (
	_ web.Catalog                  = (*catalog)(nil)
	_ engine.ConversationForgetter = (*catalog)(nil)
	_ engine.Backend               = (*entry)(nil)
	_ engine.MessageCounter        = (*entry)(nil)
	_ engine.ModelDescriber        = (*entry)(nil)
	_ engine.Embedder              = (*entry)(nil)
	_ engine.ToolTemplater         = (*entry)(nil)
)

// entry is one configured model.
type entry struct {
	cat    *catalog
	spec   config.Model
	info   engine.Info
	reg    *kvcache.Registry // its own namespace, kept across loads
	win    *window.Window
	remote engine.Backend // a router over spec.Backends; nil for an embedded model

	// Guarded by cat.mu.
	state    string
	eng      *llamacpp.Engine
	inflight int
	lastUsed time.Time
	loadedAt time.Time
	lastErr  error
}

// signalLocked wakes everyone waiting for a change. Call with mu held.
func (c *catalog) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Info is the first model's: what a request that names no model gets.
func (c *catalog) Info() engine.Info { return c.entries[0].info }

// Generate serves the model req names ("" is the first).
func (c *catalog) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	b, err := c.Select(req.Model)
	if err != nil {
		return engine.Result{}, err
	}
	return b.Generate(ctx, req, fn)
}

// Select returns the entry named model; a trailing ":latest" (Ollama's
// default tag) is ignored.
func (c *catalog) Select(model string) (engine.Backend, error) {
	if model == "" {
		return c.entries[0], nil
	}
	if e, ok := c.byName[model]; ok {
		return e, nil
	}
	if e, ok := c.byName[strings.TrimSuffix(model, ":latest")]; ok {
		return e, nil
	}
	names := make([]string, len(c.entries))
	for i, e := range c.entries {
		names[i] = e.spec.Name
	}
	return nil, fmt.Errorf("the model %q does not exist (this server serves %s): %w", model, strings.Join(names, ", "), engine.ErrUnknownModel)
}

// Models lists every configured model with its state.
func (c *catalog) Models() []web.ModelStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]web.ModelStatus, len(c.entries))
	for i, e := range c.entries {
		st := web.ModelStatus{Name: e.spec.Name, State: e.state, Info: e.info, InFlight: e.inflight,
			LastUsed: e.lastUsed, LoadedAt: e.loadedAt, Source: e.spec.Model}
		if e.remote != nil {
			st.State, st.Source = web.ModelRemote, strings.Join(e.spec.Backends, " ")
		}
		if e.state == web.ModelLoaded && e.spec.TTL > 0 {
			st.ExpiresAt = e.lastUsed.Add(time.Duration(e.spec.TTL))
		}
		if e.lastErr != nil {
			st.LastError = e.lastErr.Error()
		}
		out[i] = st
	}
	return out
}

// Ready is nil while at least one model can be served: a remote one whose
// router is ready, or an embedded one (loaded or not; a failed load is
// retried by the next request, so it counts too).
func (c *catalog) Ready() error {
	var errs []error
	for _, e := range c.entries {
		if e.remote == nil {
			return nil
		}
		r, ok := e.remote.(interface{ Ready() error })
		if !ok {
			return nil
		}
		err := r.Ready()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", e.spec.Name, err))
	}
	return fmt.Errorf("%w: no configured model can be served: %w", engine.ErrUnavailable, errors.Join(errs...))
}

// ForgetConversation deletes a tenant's conversation from every model: a
// loaded engine (or remote backend) forgets it, and the snapshot files of
// a model not loaded are deleted from its directory. A model loading now
// is waited for, then forgets it like a loaded one. It blocks on disk and
// on the loads, until ctx ends.
func (c *catalog) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	n := 0
	var errs []error
	for _, e := range c.entries {
		for {
			b, release, err := e.peek()
			if err == nil && b != nil {
				if f, ok := b.(engine.ConversationForgetter); ok {
					k, err := f.ForgetConversation(ctx, tenant, conversation)
					n += k
					errs = append(errs, err)
				}
				release()
				break
			}
			k, wait, err := c.forgetUnloaded(e, kvcache.Owner{Tenant: tenant, Conversation: conversation})
			if wait == nil {
				n += k
				errs = append(errs, err)
				break
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return n, fmt.Errorf("forget conversation: waiting for model %q: %w", e.spec.Name, ctx.Err())
			}
		}
	}
	return n, errors.Join(errs...)
}

// forgetUnloaded deletes owner's snapshot files of e, an embedded model
// not loaded, under mu so that no load starts meanwhile. If e is loading
// (or was loaded meanwhile) it deletes nothing and returns the channel to
// wait on before trying again.
func (c *catalog) forgetUnloaded(e *entry, owner kvcache.Owner) (int, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.state {
	case web.ModelLoading:
		return 0, c.changed, nil
	case web.ModelLoaded: // since peek: try it again now
		now := make(chan struct{})
		close(now)
		return 0, now, nil
	}
	dir := ""
	if c.snapshotDir != nil {
		dir = c.snapshotDir(e)
	}
	if dir == "" {
		return 0, nil, nil
	}
	n, err := kvcache.DeleteOwnedDir(dir, owner)
	return n, nil, err
}

// acquire returns e's backend, loading it if needed, and the function that
// releases it. It blocks while the model loads, or while no other model can
// be unloaded to make room, until ctx ends.
func (c *catalog) acquire(ctx context.Context, e *entry) (engine.Backend, func(), error) {
	if e.remote != nil {
		return e.remote, func() {}, nil
	}
	c.mu.Lock()
	for {
		switch e.state {
		case web.ModelLoaded:
			e.inflight++
			e.lastUsed = c.now()
			c.signalLocked()
			c.mu.Unlock()
			return e.eng, func() { c.release(e) }, nil
		case web.ModelLoading:
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
			return nil, nil, fmt.Errorf("waiting for model %q: %w", e.spec.Name, ctx.Err())
		}
		c.mu.Lock()
	}
}

// roomLocked reports whether e may load now, and which idle loaded model
// must be unloaded first (nil: none).
func (c *catalog) roomLocked(e *entry) (*entry, bool) {
	if c.max <= 0 {
		return nil, true
	}
	used := 0
	var lru *entry
	for _, o := range c.entries {
		if o == e || (o.state != web.ModelLoaded && o.state != web.ModelLoading) {
			continue
		}
		used++
		if o.state == web.ModelLoaded && o.inflight == 0 && (lru == nil || o.lastUsed.Before(lru.lastUsed)) {
			lru = o
		}
	}
	switch {
	case used < c.max:
		return nil, true
	case lru != nil:
		return lru, true
	}
	return nil, false
}

// loadLocked unloads victim (if any) and loads e; it is called and
// returns with mu held, but releases it while engines close and load.
func (c *catalog) loadLocked(e, victim *entry) error {
	e.state = web.ModelLoading
	var old *llamacpp.Engine
	if victim != nil {
		old = c.takeLocked(victim)
	}
	c.signalLocked()
	c.mu.Unlock()
	if old != nil {
		c.closeEngine(victim, old, "make room (max_loaded_models)")
	}
	start := c.now()
	eng, err := c.open(e)
	c.mu.Lock()
	if err != nil {
		e.state, e.lastErr = web.ModelFailed, err
		c.signalLocked()
		c.log.Error("model load failed", "model", e.spec.Name, "err", err)
		return fmt.Errorf("load model %q: %w: %w", e.spec.Name, engine.ErrUnavailable, err)
	}
	e.state, e.eng, e.loadedAt, e.lastUsed, e.lastErr = web.ModelLoaded, eng, c.now(), c.now(), nil
	c.loads.WithLabelValues(e.spec.Name).Inc()
	c.log.Info("model loaded", "model", e.spec.Name, "seconds", c.now().Sub(start).Seconds())
	c.signalLocked()
	return nil
}

// takeLocked marks a loaded entry idle and returns its engine to close.
func (c *catalog) takeLocked(e *entry) *llamacpp.Engine {
	eng := e.eng
	e.state, e.eng, e.loadedAt = web.ModelIdle, nil, time.Time{}
	return eng
}

// closeEngine frees an unloaded entry's engine. It blocks until it is.
func (c *catalog) closeEngine(e *entry, eng *llamacpp.Engine, why string) {
	eng.Close()
	if c.onUnload != nil {
		c.onUnload(e, eng)
	}
	c.unloads.WithLabelValues(e.spec.Name).Inc()
	c.log.Info("model unloaded", "model", e.spec.Name, "why", why)
}

// release ends one generation on e.
func (c *catalog) release(e *entry) {
	c.mu.Lock()
	e.inflight--
	e.lastUsed = c.now()
	c.signalLocked()
	c.mu.Unlock()
}

// peek returns e's backend if it is loaded (or remote), held until
// release; nil if it is not loaded. It never loads.
func (e *entry) peek() (engine.Backend, func(), error) {
	if e.remote != nil {
		return e.remote, func() {}, nil
	}
	c := e.cat
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.state != web.ModelLoaded {
		return nil, nil, nil
	}
	e.inflight++
	c.signalLocked()
	return e.eng, func() { c.release(e) }, nil
}

// expire unloads every embedded model idle past its TTL.
func (c *catalog) expire() {
	type victim struct {
		e   *entry
		eng *llamacpp.Engine
	}
	var out []victim
	c.mu.Lock()
	now := c.now()
	for _, e := range c.entries {
		if e.state == web.ModelLoaded && e.inflight == 0 && e.spec.TTL > 0 && now.Sub(e.lastUsed) >= time.Duration(e.spec.TTL) {
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

// run unloads models past their TTL until ctx ends. The check runs every
// quarter of the shortest TTL (at most each second), so a model is
// unloaded within a quarter TTL of its expiry.
func (c *catalog) run(ctx context.Context) {
	tick := time.Second
	for _, e := range c.entries {
		if t := time.Duration(e.spec.TTL) / 4; e.spec.TTL > 0 && t < tick {
			tick = max(t, 10*time.Millisecond)
		}
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	// Models not loaded have no snapshot store sweeping their files: sweep
	// them here, now and on the stores' cadence.
	var sweep <-chan time.Time
	if c.snapshotTTL > 0 {
		c.expireUnloaded()
		st := time.NewTicker(kvcache.ExpireInterval(c.snapshotTTL))
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

// close unloads every model. Generations still running are cancelled by
// their engine's Close.
func (c *catalog) close() {
	c.mu.Lock()
	type victim struct {
		e   *entry
		eng *llamacpp.Engine
	}
	var out []victim
	for _, e := range c.entries {
		if e.state == web.ModelLoaded {
			out = append(out, victim{e, c.takeLocked(e)})
		}
	}
	c.signalLocked()
	c.mu.Unlock()
	for _, v := range out {
		c.closeEngine(v.e, v.eng, "shutdown")
	}
}

// Info is the model's as configured: its name, slots and context.
func (e *entry) Info() engine.Info { return e.info }

// Generate loads the model if needed, then generates.
func (e *entry) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	b, release, err := e.cat.acquire(ctx, e)
	if err != nil {
		return engine.Result{}, err
	}
	defer release()
	return b.Generate(ctx, req, fn)
}

// CountMessage counts in the model's tokens, loading it (the window plans
// right before the generation that needs it loaded anyway); if it cannot
// be loaded, the window's estimate.
func (e *entry) CountMessage(m engine.Message) int {
	b, release, err := e.cat.acquire(context.Background(), e)
	if err != nil {
		return window.ApproxCount(m)
	}
	defer release()
	if rm, ok := b.(remoteModel); ok {
		b = rm.Backend // the router counts with a backend's tokenizer
	}
	if mc, ok := b.(engine.MessageCounter); ok {
		return mc.CountMessage(m)
	}
	return window.ApproxCount(m)
}

// Describe describes the model's file without loading it.
func (e *entry) Describe() (engine.ModelCard, error) {
	if e.remote != nil {
		if d, ok := e.remote.(engine.ModelDescriber); ok {
			return d.Describe()
		}
		return engine.ModelCard{}, errors.New("remote model: no card")
	}
	st, err := os.Stat(e.spec.Model)
	if err != nil {
		return engine.ModelCard{}, fmt.Errorf("describe model %q: %w", e.spec.Name, err)
	}
	return engine.ModelCard{Format: "gguf", Size: st.Size(), ModifiedAt: st.ModTime()}, nil
}

// Embed loads the model if needed, then embeds with it (a remote entry:
// with its router, under the backends' own model name).
func (e *entry) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	b, release, err := e.cat.acquire(ctx, e)
	if err != nil {
		return engine.Embeddings{}, err
	}
	defer release()
	if rm, ok := b.(remoteModel); ok {
		b, req.Model = rm.Backend, ""
	}
	emb, ok := b.(engine.Embedder)
	if !ok {
		return engine.Embeddings{}, fmt.Errorf("model %q cannot compute embeddings: %w", e.spec.Name, engine.ErrNotSupported)
	}
	return emb.Embed(ctx, req)
}

// TemplateTools reports whether the model's own chat template renders
// tools; it loads the model (the chat that asks is about to need it).
func (e *entry) TemplateTools() bool {
	b, release, err := e.cat.acquire(context.Background(), e)
	if err != nil {
		return false
	}
	defer release()
	if rm, ok := b.(remoteModel); ok {
		b = rm.Backend
	}
	tt, ok := b.(engine.ToolTemplater)
	return ok && tt.TemplateTools()
}
