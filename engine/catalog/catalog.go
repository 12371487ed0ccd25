// Package catalog serves several models under their names (kvwin serve
// --config with models:): embedded GGUF models are loaded on first use by
// the factory the catalog is given, and unloaded after their TTL idle or
// to make room under a maximum (least recently used first); remote ones
// are served by a backend each (a router) and always available.
//
// A Catalog is an engine.Backend serving its first model; Select returns
// the entry of a named one, which is an engine.Backend too and unwraps
// (engine.As) to the backend it holds, so every ability of that backend
// is found through it.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/kvcache"
)

// States of a model, as Status reports them.
const (
	Idle    = "idle"    // configured, not loaded: the first request loads it
	Loading = "loading" // requests wait for it
	Loaded  = "loaded"
	Remote  = "remote" // served by remote backends, always available
	Failed  = "failed" // its last load failed; the next request tries again
)

// Status is one model of a Catalog as operators see it.
type Status struct {
	Name      string      `json:"name"`
	State     string      `json:"state"`
	Info      engine.Info `json:"info"`
	Source    string      `json:"source"`               // the GGUF file, or the backends' URLs
	InFlight  int         `json:"in_flight"`            // generations running
	LastUsed  time.Time   `json:"last_used,omitzero"`   // zero: never used
	ExpiresAt time.Time   `json:"expires_at,omitzero"`  // when an idle TTL unloads it; zero: never
	LoadedAt  time.Time   `json:"loaded_at,omitzero"`   // zero: not loaded
	LastError string      `json:"last_error,omitempty"` // of the last failed load
}

// Model is one configured model.
type Model struct {
	// Name is what requests call it (kvwin's name, not the backends').
	// Required and unique; a request's trailing ":latest" is ignored.
	Name string
	// Info is what the model's entry reports before it is loaded (and a
	// remote one's always).
	Info engine.Info
	// Source is an embedded model's GGUF file (Describe stats it without
	// loading), or a remote one's backends as Status shows them.
	Source string
	// Remote serves a remote model; nil for an embedded one, which
	// Config.Open loads. Requests reach it without Model (the entry's
	// name is not the backends').
	Remote engine.Backend
	// TTL unloads an embedded model idle that long; 0 never does.
	TTL time.Duration
	// SnapshotDir is where an embedded model's engine keeps its KV
	// snapshots ("" for none): the catalog forgets and expires them there
	// while the model is not loaded.
	SnapshotDir string
}

// Engine is a loaded embedded model, as Config.Open returns it: Close
// frees it (and whatever Open set up for it, such as its metrics). Calls
// after Close must fail (engine.ErrClosed), not crash: an unwrapped engine
// is not held.
type Engine interface {
	engine.Backend
	io.Closer
}

// Config configures a Catalog.
type Config struct {
	// Models in configuration order; the first serves requests that name
	// none. At least one.
	Models []Model
	// MaxLoaded bounds the embedded models loaded (or loading) at once;
	// 0 is no bound.
	MaxLoaded int
	// Open loads an embedded model; it blocks for the load. Required if
	// a model is embedded.
	Open func(m Model) (Engine, error)
	// SnapshotTTL expires the snapshot files of models not loaded, on the
	// clock SnapshotNow (default time.Now); 0 never does.
	SnapshotTTL time.Duration
	SnapshotNow func() time.Time
	// Now is the clock of TTLs and least-recent use; default time.Now.
	Now func() time.Time
	// Metrics registers kvwin_model_loads_total and
	// kvwin_model_unloads_total; nil does not.
	Metrics prometheus.Registerer
	// Log; default slog.Default().
	Log *slog.Logger
}

// Catalog serves the models of a configuration under their names. Its
// methods and its entries' are safe for concurrent use.
//
// Invariants (under mu): an entry is idle, failed, loading or loaded; only
// a loaded entry has an engine; loaded plus loading entries never exceed
// max (when max > 0); an entry with generations in flight is never
// unloaded. Every change of state or in-flight count closes and replaces
// changed, which is how waiting requests learn of it.
type Catalog struct {
	cfg     Config
	log     *slog.Logger
	entries []*entry
	byName  map[string]*entry
	loads   *prometheus.CounterVec
	unloads *prometheus.CounterVec

	mu      sync.Mutex
	changed chan struct{}
}

var (
	_ engine.Backend               = (*Catalog)(nil)
	_ engine.Readier               = (*Catalog)(nil)
	_ engine.ConversationForgetter = (*Catalog)(nil)
	_ engine.SnapshotExpirer       = (*Catalog)(nil)
)

// New checks cfg and builds its catalog; nothing is loaded yet. Run its
// TTL loop with Run and unload everything with Close.
func New(cfg Config) (*Catalog, error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("catalog: no model")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SnapshotNow == nil {
		cfg.SnapshotNow = time.Now
	}
	c := &Catalog{cfg: cfg, log: cfg.Log, byName: map[string]*entry{}, changed: make(chan struct{}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_model_loads_total",
			Help: "Embedded models loaded, by model."}, []string{"model"}),
		unloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_model_unloads_total",
			Help: "Embedded models unloaded (idle TTL, room for another under max_loaded_models, shutdown), by model."}, []string{"model"}),
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	for i, m := range cfg.Models {
		if _, dup := c.byName[m.Name]; dup || m.Name == "" {
			return nil, fmt.Errorf("models[%d]: name %q is empty or used twice", i, m.Name)
		}
		if m.Remote == nil && cfg.Open == nil {
			return nil, fmt.Errorf("models[%d] (%s): an embedded model and no Open", i, m.Name)
		}
		e := &entry{cat: c, m: m, state: Idle}
		if m.Remote != nil {
			e.remote = remote{m.Remote}
		}
		c.entries = append(c.entries, e)
		c.byName[m.Name] = e
	}
	if cfg.Metrics != nil {
		for _, col := range []prometheus.Collector{c.loads, c.unloads} {
			if err := cfg.Metrics.Register(col); err != nil {
				return nil, fmt.Errorf("catalog metrics: %w", err)
			}
		}
	}
	return c, nil
}

// signalLocked wakes everyone waiting for a change. Call with mu held.
func (c *Catalog) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Info is the first model's: what a request that names no model gets.
func (c *Catalog) Info() engine.Info { return c.entries[0].m.Info }

// Generate serves the model req names ("" is the first).
func (c *Catalog) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	b, err := c.Select(req.Model)
	if err != nil {
		return engine.Result{}, err
	}
	return b.Generate(ctx, req, fn)
}

// Select returns the entry named model ("" is the first); a trailing
// ":latest" (Ollama's default tag) is ignored. It does not load: the
// entry loads on use. Safe for concurrent use.
func (c *Catalog) Select(model string) (engine.Backend, error) {
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
		names[i] = e.m.Name
	}
	return nil, fmt.Errorf("the model %q does not exist (this server serves %s): %w", model, strings.Join(names, ", "), engine.ErrUnknownModel)
}

// Models lists every configured model with its state, in configuration
// order. It does not block on a load.
func (c *Catalog) Models() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, len(c.entries))
	for i, e := range c.entries {
		st := Status{Name: e.m.Name, State: e.state, Info: e.m.Info, InFlight: e.inflight,
			LastUsed: e.lastUsed, LoadedAt: e.loadedAt, Source: e.m.Source}
		if e.remote != nil {
			st.State = Remote
		}
		if e.state == Loaded && e.m.TTL > 0 {
			st.ExpiresAt = e.lastUsed.Add(e.m.TTL)
		}
		if e.lastErr != nil {
			st.LastError = e.lastErr.Error()
		}
		out[i] = st
	}
	return out
}

// Peek returns the backend serving model if it is loaded (or remote),
// held (never unloaded) until release is called; false if it is not
// loaded or not configured. It never loads.
func (c *Catalog) Peek(model string) (b engine.Backend, release func(), ok bool) {
	e, found := c.byName[model]
	if !found {
		return nil, nil, false
	}
	b, release = e.peek()
	return b, release, b != nil
}

// Ready is nil while at least one model can be served: a remote one whose
// backend is ready, or an embedded one (loaded or not; a failed load is
// retried by the next request, so it counts too).
func (c *Catalog) Ready() error {
	var errs []error
	for _, e := range c.entries {
		if e.remote == nil {
			return nil
		}
		r, ok := engine.As[engine.Readier](e.remote)
		if !ok {
			return nil
		}
		err := r.Ready()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", e.m.Name, err))
	}
	return fmt.Errorf("%w: no configured model can be served: %w", engine.ErrUnavailable, errors.Join(errs...))
}

// ForgetConversation deletes a tenant's conversation from every model: a
// loaded engine (or remote backend) forgets it, and the snapshot files of
// a model not loaded are deleted from its directory. A model loading now
// is waited for, then forgets it like a loaded one. It blocks on disk and
// on the loads, until ctx ends.
func (c *Catalog) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	n := 0
	var errs []error
	for _, e := range c.entries {
		for {
			b, release := e.peek()
			if b != nil {
				if f, ok := engine.As[engine.ConversationForgetter](b); ok {
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
				return n, fmt.Errorf("forget conversation: waiting for model %q: %w", e.m.Name, ctx.Err())
			}
		}
	}
	return n, errors.Join(errs...)
}

// forgetUnloaded deletes owner's snapshot files of e, an embedded model
// not loaded, under mu so that no load starts meanwhile. If e is loading
// (or was loaded meanwhile) it deletes nothing and returns the channel to
// wait on before trying again.
func (c *Catalog) forgetUnloaded(e *entry, owner kvcache.Owner) (int, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.state {
	case Loading:
		return 0, c.changed, nil
	case Loaded: // since peek: try it again now
		now := make(chan struct{})
		close(now)
		return 0, now, nil
	}
	if e.m.SnapshotDir == "" {
		return 0, nil, nil
	}
	n, err := kvcache.DeleteOwnedDir(e.m.SnapshotDir, owner)
	return n, nil, err
}
