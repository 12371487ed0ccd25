package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"kvwin/engine"
	"kvwin/window"
	"kvwin/window/memory"
)

// sharedState is what every generation of a server shares: the memory store
// (one SQLite file; opening it twice would contend for its lock), opened by
// the first generation that needs it, and the tracer provider (tracing.go),
// made with the server; both are closed with the server.
type sharedState struct {
	mu     sync.Mutex
	opened bool
	store  window.Store
	err    error        // why the store could not be opened; nil when it is open
	health func() error // why the open store cannot be used now (its database is down)
	closer func()
	hook   expiryHook // deletes the snapshots of conversations the store expires (retention.go)
	// tracer exports the turns' spans; nil: tracing is off.
	tracer *sdktrace.TracerProvider
}

// open returns the memory store under f's data dir, opening it the first
// time; the conversations it expires then (and later) take their snapshots
// in backend with them. A store that cannot be opened is logged once; nil
// then.
func (s *sharedState) open(f Config, log *slog.Logger, backend engine.Backend) window.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened {
		return s.store
	}
	s.opened = true
	s.hook.log = log
	s.hook.use(backend)
	cfg := storeBounds(f, storeConfig(f))
	cfg.TTL, cfg.Now, cfg.Expired = f.MemoryTTL, f.Now, s.hook.expired
	st, err := memory.Open(cfg)
	if err != nil {
		s.err = err
		log.Error("memory store unavailable: serving degraded (named conversations get packets from their own turns only; DELETE of a conversation answers 503; /health says degraded)", "err", err)
		return nil
	}
	if err := st.Health(); err != nil {
		log.Error("memory store unreachable: serving degraded until it answers (retried every second)", "store", st.Path(), "err", err)
	} else {
		log.Info("memory store", "store", st.Path())
	}
	s.store, s.health, s.closer = st, st.Health, func() { st.Close() } // not a typed nil: window.New checks for nil
	return s.store
}

// storeConfig is where f keeps the memory store: --memory-store's
// PostgreSQL URL (with --memory-store-timeout) or SQLite path, or
// memory/memory.db under the data dir.
func storeConfig(f Config) memory.StoreConfig {
	loc := f.MemoryStore
	switch {
	case loc == "":
		return memory.StoreConfig{Dir: filepath.Join(f.DataDir, "memory")}
	case memory.IsPostgres(loc):
		return memory.StoreConfig{URL: loc, Timeout: f.MemoryStoreTimeout}
	default:
		p := strings.TrimPrefix(loc, "sqlite:")
		return memory.StoreConfig{Dir: filepath.Dir(p), File: filepath.Base(p)}
	}
}

// checkMemoryStore refuses a --memory-store that is neither a PostgreSQL
// URL nor a file path (another scheme, a path naming a directory), and a
// negative --memory-store-timeout.
func checkMemoryStore(loc string, timeout time.Duration) error {
	if timeout < 0 {
		return fmt.Errorf("--memory-store-timeout %v: must not be negative", timeout)
	}
	switch {
	case loc == "", memory.IsPostgres(loc):
		return nil
	case strings.Contains(loc, "://"):
		return fmt.Errorf("--memory-store %q: want postgres://…, postgresql://…, a file path or sqlite:PATH", loc)
	case strings.TrimPrefix(loc, "sqlite:") == "" || strings.HasSuffix(loc, "/"):
		return fmt.Errorf("--memory-store %q: want a file path", loc)
	}
	return nil
}

// unavailable is why the memory store cannot be used now: it could not be
// opened, or its database is down (nil: it is usable, or not opened yet).
func (s *sharedState) unavailable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && s.health != nil {
		return s.health()
	}
	return s.err
}

// openErr is why the memory store could not be opened (nil: it is open,
// or not opened yet).
func (s *sharedState) openErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// tracerProvider is what the generations' servers trace with: nil (web's
// no-op tracer) when tracing is off.
func (s *sharedState) tracerProvider() trace.TracerProvider {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracer == nil {
		return nil // not a nil *TracerProvider in a non-nil interface
	}
	return s.tracer
}

// close closes the memory store and flushes the spans not yet exported,
// waiting at most tracerFlushTimeout for the collector. Safe to call more
// than once.
func (s *sharedState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		s.closer()
		s.closer = nil
	}
	if s.tracer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tracerFlushTimeout)
		defer cancel()
		_ = s.tracer.Shutdown(ctx) // the SDK reports a failed export itself
		s.tracer = nil
	}
}

// generations serves each request with the generation current when it
// arrived, counts the requests each generation has in flight, and closes a
// replaced generation once its last request (a stream, say) has ended.
type generations struct {
	mu       sync.Mutex
	cur      *App
	inflight map[*App]int
	retired  map[*App]bool // replaced; closed when their count reaches 0
	drained  chan struct{} // closed and replaced when a retired generation closes (tests)
}

// ServeHTTP serves r with the current generation.
func (g *generations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	a := g.cur
	if g.inflight == nil {
		g.inflight = map[*App]int{}
	}
	g.inflight[a]++
	g.mu.Unlock()
	defer g.done(a)
	a.handler.ServeHTTP(w, r)
}

// done ends one request of a; the last one of a retired generation closes it.
func (g *generations) done(a *App) {
	g.mu.Lock()
	g.inflight[a]--
	last := g.inflight[a] == 0 && g.retired[a]
	if last {
		delete(g.inflight, a)
		delete(g.retired, a)
	}
	g.mu.Unlock()
	if last {
		g.retire(a)
	}
}

// retire closes a replaced generation.
func (g *generations) retire(a *App) {
	a.closeGeneration()
	a.log.Info("previous configuration released")
}

// swap makes n current and retires the old one (closed now if idle).
func (g *generations) swap(n *App) {
	g.mu.Lock()
	old := g.cur
	g.cur = n
	idle := g.inflight[old] == 0
	if idle {
		delete(g.inflight, old)
	} else {
		if g.retired == nil {
			g.retired = map[*App]bool{}
		}
		g.retired[old] = true
	}
	g.mu.Unlock()
	if old.endStreams != nil {
		old.endStreams() // its followers resume on the new one
	}
	if idle {
		g.retire(old)
	}
}

// closeAll closes every generation but the first (the App itself closes
// that one): at shutdown, retired ones still draining and the current one.
func (g *generations) closeAll() {
	g.mu.Lock()
	var all []*App
	if g.cur != nil {
		all = append(all, g.cur)
	}
	for a := range g.retired {
		all = append(all, a)
	}
	g.mu.Unlock()
	for _, a := range all {
		if a.gens == nil { // not the App that owns the server
			a.closeGeneration()
		}
	}
}

// current is the generation serving now.
func (a *App) current() *App {
	if a.gens == nil {
		return a
	}
	a.gens.mu.Lock()
	defer a.gens.mu.Unlock()
	return a.gens.cur
}

// Reload serves f from now on: keys, backends, models and windows are
// rebuilt; requests in flight (streams included) finish on the
// configuration they started with, which is released after them. The
// listen address and the data dir cannot change; a change is refused. If
// f is invalid (or its backends cannot be built) the server keeps its
// configuration and Reload returns why. Reload must not run concurrently
// with itself.
func (a *App) Reload(f Config) error {
	cur := a.current()
	if f.Addr != cur.f.Addr || f.DataDir != cur.f.DataDir {
		return fmt.Errorf("reload: --addr and --data-dir cannot change without a restart (%s %s → %s %s)",
			cur.f.Addr, cur.f.DataDir, f.Addr, f.DataDir)
	}
	if f.MemoryStore != cur.f.MemoryStore {
		return errors.New("reload: --memory-store cannot change without a restart") // its URL may hold a password: not echoed
	}
	if f.OTLPEndpoint != cur.f.OTLPEndpoint || f.OTLPProtocol != cur.f.OTLPProtocol || f.OTLPFromEnv != cur.f.OTLPFromEnv {
		return errors.New("reload: --otlp-endpoint and --otlp-protocol cannot change without a restart")
	}
	n, err := build(f, a.log, a.shared, a.ln)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if n.ln != a.ln {
		n.Close()
		return errors.New("reload: the new configuration did not take the listener")
	}
	a.gens.swap(n)
	a.shared.hook.use(n.backend) // expired conversations' snapshots are in the new backend now
	a.log.Info("configuration reloaded", "models", len(f.Models), "backends", len(f.Backends), "config", f.ConfigPath)
	return nil
}
