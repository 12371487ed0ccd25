// Package app assembles what kvwin serve runs: the embedded engine or a
// router over --backend servers (a table of backend kinds, gateway.go), the
// registry, the window and its memory store, keys (auth.go), metrics and the
// HTTP server, and runs it until its context ends. cmd/kvwin keeps the
// flags and subcommands; tests start an App exactly as kvwin serve does.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"kvwin/cmd/kvwin/config"
	"kvwin/engine"
	"kvwin/engine/catalog"
	"kvwin/engine/llamacpp"
	"kvwin/engine/queue"
	"kvwin/engine/wire"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
	"kvwin/web/openai"
	"kvwin/window"
)

// Config is what kvwin serve assembles, one field per flag of kvwin serve
// (docs/architecture.md, "Flags", names them; cmd/kvwin binds them). The
// zero value of a field is not always its flag's default: New serves exactly
// what it is given.
type Config struct {
	Addr    string
	DataDir string
	Model   string
	Slots   int
	Ctx     int
	Threads int
	Batch   int   // most tokens per llama_decode; 0: the engine's default
	Seed    int64 // sampler seed of requests naming none; ≤ 0: random per request
	Queue   int
	// QueueOrder is how waiting requests are ordered (QueueFair, QueueFIFO): "fair" (class, then
	// fair share; the default, "" too) or "fifo" (arrival order).
	QueueOrder string
	// InteractiveSlots: the engine's slots batch requests leave idle
	// (llamacpp.Config.InteractiveSlots; 0 its default, -1 none).
	InteractiveSlots int
	Window           string
	MaxBody          int64
	MaxItems         int // messages or input items in one request (0: web.DefaultMaxItems)
	// MemoryMaxBytes bounds the conversation state held in memory between
	// turns (bounds.go); 0: DefaultMemoryMaxBytes.
	MemoryMaxBytes  int64
	ShutdownTimeout time.Duration
	Verbose         bool
	NoSnapshots     bool
	// SnapshotBytes is the snapshots' disk tier budget in bytes
	// (kvdisk.go): negative the default rule, 0 the engine's own default.
	SnapshotBytes int64
	// KVRAM is the snapshots' RAM tier budget in bytes (kvram.go): 0 none,
	// negative the default rule. KVRAMTenantPercent is the most of it one
	// tenant may hold, in percent (0: kvcache.DefaultTenantShare).
	KVRAM              int64
	KVRAMTenantPercent int
	Backends           []string
	Route              string
	WindowBudget       int
	Shift              bool
	LogLevel           slog.Level // the server's log level (benchmarks quiet it); --verbose lowers it to debug
	LogFormat          string     // LogText (default) or LogJSON
	// LogOutput receives the server's log lines; nil: standard error, and
	// the process-wide default logger (llama.cpp's messages) follows
	// LogFormat too. Tests capture a server's lines here.
	LogOutput io.Writer
	// Logger, if set, is the server's logger, and LogOutput, LogFormat and
	// LogLevel are not read: kvwin serve builds one logger over the
	// standard error it took over (Stdio) and logs llama.cpp through it.
	Logger *slog.Logger

	// Who may call (auth.go).
	APIKeys             []string // TENANT=KEY
	APIKeyFile          string
	AdminKey            string
	NoAuth              bool
	CORSOrigins         []string
	AllowedHosts        []string
	BackendKey          string
	TenantMaxConcurrent int
	TenantMaxQueued     int
	// MemoryStore is where named conversations' evicted turns are kept:
	// a PostgreSQL URL (postgres://…, postgresql://…) that gateway replicas
	// share, a SQLite file's path or sqlite:PATH; "" is memory/memory.db
	// under DataDir.
	MemoryStore string
	// MemoryStoreTimeout is how long a PostgreSQL memory store's database
	// may leave a statement unanswered before the store counts as down
	// (memory.StoreConfig.Timeout); 0 is memory.DefaultTimeout.
	MemoryStoreTimeout time.Duration
	// MemoryTTL deletes a named conversation's stored turns, and any KV
	// snapshot, not used for that long (retention.go); 0 keeps them.
	MemoryTTL time.Duration
	// Now is the clock of MemoryTTL (uses and expiry of turns and
	// snapshots); nil: time.Now. Tests inject one.
	Now func() time.Time
	// StreamKeepAlive is the time between keep-alives of an accepted
	// stream before its first token (web.Config.KeepAlive); 0: none.
	StreamKeepAlive time.Duration
	// Timeouts toward --backend servers.
	BackendConnect    time.Duration
	BackendFirstToken time.Duration
	BackendIdle       time.Duration
	// BackendResolveInterval is how often a --backend KIND=dns://NAME:PORT
	// is resolved again (dns.go); 0: DefaultResolveInterval.
	BackendResolveInterval time.Duration
	// Resolver resolves those names; nil: the system's (net.DefaultResolver).
	// Tests inject one.
	Resolver Resolver
	// Traces (tracing.go): OTLPEndpoint is the collector turns' spans are
	// exported to (--otlp-endpoint, OTEL_EXPORTER_OTLP_ENDPOINT's form);
	// OTLPFromEnv says the OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variable names one, which the
	// exporter reads itself; OTLPProtocol is grpc or http/protobuf (""). With
	// neither endpoint nothing is traced.
	OTLPEndpoint string
	OTLPProtocol string
	OTLPFromEnv  bool

	// From the configuration file only (--config).
	ConfigPath      string         // the file, reread on SIGHUP
	Models          []config.Model // several models side by side (models.go)
	MaxLoadedModels int            // embedded models loaded at once (0: no bound)
}

// App is a running kvwin server: its backend (the embedded engine, or a
// router over remote backends), the HTTP server and its listener. Tests
// start it exactly as kvwin serve does.
type App struct {
	f         Config
	log       *slog.Logger
	eng       *llamacpp.Engine // nil in gateway mode
	router    *router.Router   // nil with the embedded engine
	catalog   *catalog.Catalog // with models: in the config file; then eng and router are nil
	models    []modelRegistry  // with models:, each one's registry
	store     window.Store     // the memory store, nil if it could not be opened
	decisions *decisionLog     // every router's decisions (the dashboard, /metrics)
	// tenants: keys are configured, so requests may come from several
	// tenants, and routers keep them apart on backends that do not.
	tenants   bool
	backend   engine.Backend
	reg       *kvcache.Registry
	metrics   *prometheus.Registry
	closers   []func()
	closeOnce sync.Once
	hs        *http.Server
	ln        net.Listener

	// What a reload keeps (reload.go): the memory store, shared by every
	// generation and closed with the process, and the generation serving
	// now. The first generation is the App itself; each Reload builds a new
	// one and drains the old.
	shared  *sharedState
	handler http.Handler // this generation's routes
	// endStreams ends this generation's event streams (GET
	// /kvwin/v1/events), which would hold a shutdown or a reload's
	// retirement of it forever.
	endStreams func()
	gens       *generations
}

// New builds the backend and binds the listen address; Run serves. On
// error nothing is left running.
func New(f Config) (*App, error) {
	log := f.Logger
	if log == nil {
		var err error
		if log, err = newProcessLogger(f); err != nil {
			return nil, err
		}
	}
	tracer, err := newTracerProvider(f)
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		log.Info("exporting traces over OTLP", "endpoint", otlpEndpointForLog(f), "protocol", cmp.Or(f.OTLPProtocol, OTLPHTTP))
	}
	shared := &sharedState{tracer: tracer}
	a, err := build(f, log, shared, nil)
	if err != nil {
		shared.close()
		return nil, err
	}
	a.gens = &generations{cur: a}
	shared.hook.use(a.backend) // with models, the catalog exists only now
	a.hs = &http.Server{
		Handler: a.gens,
		// Headers must arrive promptly; a body is bounded by web's own read
		// deadline. No ReadTimeout or WriteTimeout: net/http applies them to
		// the whole exchange, so they would cut long streams.
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	return a, nil
}

// newProcessLogger builds the logger of f's LogOutput, LogFormat and
// LogLevel. Without a LogOutput (standard error), llama.cpp's messages go
// there too: at warnings and above, or all of them with --verbose.
func newProcessLogger(f Config) (*slog.Logger, error) {
	level := f.LogLevel
	if f.Verbose {
		level = slog.LevelDebug
	}
	out := f.LogOutput
	if out == nil {
		out = os.Stderr
	}
	log, err := NewLoggerTo(out, f.LogFormat, level)
	if err != nil {
		return nil, err
	}
	if f.LogOutput == nil {
		slog.SetDefault(log)
		llamacpp.SetLogger(log, LlamaLogLevel(f.Verbose))
	}
	return log, nil
}

// LlamaLogLevel is the lowest level of llama.cpp's messages a server logs:
// warnings, or everything with --verbose.
func LlamaLogLevel(verbose bool) slog.Level {
	if verbose {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// build assembles one generation: the backend, windows and routes of f.
// With ln nil it binds f.Addr; a reload passes the listener it keeps.
func build(f Config, log *slog.Logger, shared *sharedState, ln net.Listener) (*App, error) {
	a := &App{f: f, log: log, metrics: prometheus.NewRegistry(), decisions: newDecisionLog(), shared: shared, ln: ln}
	if f.QueueOrder != "" && f.QueueOrder != QueueFair && f.QueueOrder != QueueFIFO {
		return nil, fmt.Errorf("--queue-order %q: want %s or %s", f.QueueOrder, QueueFair, QueueFIFO)
	}
	if f.MemoryTTL < 0 { // before the backend: its snapshots expire on it too
		return nil, fmt.Errorf("--memory-ttl %v: must not be negative", f.MemoryTTL)
	}
	if f.KVRAMTenantPercent < 0 || f.KVRAMTenantPercent > 100 {
		return nil, fmt.Errorf("--kv-ram-tenant-percent %d: must be 1 to 100", f.KVRAMTenantPercent)
	}
	a.f.SnapshotBytes = kvDiskBytes(f.SnapshotBytes, f.DataDir) // kvdisk.go
	if err := checkMemoryStore(f.MemoryStore, f.MemoryStoreTimeout); err != nil {
		return nil, err
	}
	keys, policies, err := loadKeys(f)
	if err != nil {
		return nil, err
	}
	a.tenants = len(keys) > 0 || f.AdminKey != ""
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		a.decisions.decisions, a.decisions.failovers)
	var win web.Windower
	var forgetWin *window.Window
	switch {
	case len(f.Models) > 0:
		win, forgetWin, err = a.startCatalog()
	case len(f.Backends) > 0:
		err = a.startGateway()
	default:
		err = a.startEmbedded()
	}
	if err == nil && a.catalog == nil {
		a.metrics.MustRegister(kvcache.NewCollector(a.reg))
		forgetWin, err = a.startWindow()
		win = forgetWin
		if err == nil && a.router != nil && f.WindowBudget == 0 {
			win = a.followWindow(forgetWin, f.Window, func() int { return fleetContext(a.router.Backends()) })
		}
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	// Listen first: the Host check needs the address actually bound.
	if a.ln == nil {
		if a.ln, err = net.Listen("tcp", f.Addr); err != nil {
			a.Close()
			return nil, fmt.Errorf("listen on %s: %w", f.Addr, err)
		}
	}
	// The embedded engine's slots and queue bound the requests the server
	// works on, from before their body is read (web.Config.MaxWorking).
	working := 0
	if a.eng != nil {
		working = f.Slots + max(f.Queue, 0)
	}
	srv, err := web.New(web.Config{
		MaxWorking: working, MaxItems: f.MaxItems,
		MaxBodyBytes: f.MaxBody, Registry: a.reg, Metrics: a.metrics, Registerer: a.metrics, Window: win, Shift: f.Shift,
		Status:  func(ctx context.Context) any { return a.status(ctx) },
		APIKeys: keys, KeyPolicies: policies, AdminKey: f.AdminKey, ListenAddr: a.ln.Addr().String(), AllowedHosts: f.AllowedHosts,
		CORSOrigins: f.CORSOrigins, TenantMaxConcurrent: f.TenantMaxConcurrent, TenantMaxQueued: f.TenantMaxQueued,
		Forget: a.forgetter(forgetWin), MemoryUnavailable: a.shared.openErr(), MemoryHealth: a.shared.unavailable,
		Responses: a.responseStore(), KeepAlive: keepAlive(f.StreamKeepAlive), Tracer: a.shared.tracerProvider(),
	}, a.backend, a.log)
	if err != nil {
		if ln == nil {
			a.ln.Close()
		}
		a.Close()
		return nil, err
	}
	a.handler, a.endStreams = srv.Handler(), srv.EndStreams
	return a, nil
}

// Close releases the backend, newest first. Safe to call more than once
// and from several goroutines (shutdown and tests both do).
func (a *App) Close() {
	if a.gens != nil {
		a.gens.closeAll() // generations a reload built
	}
	a.closeGeneration()
	if a.gens != nil {
		a.shared.close()
	}
}

// closeGeneration releases this generation's backend, newest first.
func (a *App) closeGeneration() {
	a.closeOnce.Do(func() {
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
	})
}

// outputReserve is the part of a slot's context the window leaves for the
// answer when --window-budget is not given.
func OutputReserve(ctx int) int { return min(ctx/4, 1024) }

// startWindow opens the memory store under the data dir and builds the
// window. A store that cannot be opened (locked, read-only, corrupt) is
// logged and the server keeps serving: packets then come from each
// request's own turns.
func (a *App) startWindow() (*window.Window, error) {
	budget := a.f.WindowBudget
	if budget == 0 {
		ctx := a.backend.Info().ContextSlot
		if a.router != nil {
			ctx = fleetContext(a.router.Backends())
		}
		if ctx == 0 {
			ctx = unknownContext // no backend reached yet; the window follows them when they join (followWindow)
		}
		budget = defaultBudget(ctx)
	}
	if err := a.openStore(); err != nil {
		return nil, err
	}
	w, err := a.newWindow(a.f.Window, budget)
	if err != nil {
		return nil, err
	}
	if a.router != nil {
		for _, b := range a.router.Backends() {
			if c := b.Info().ContextSlot; c > 0 && c < budget {
				a.log.Warn("a backend's slots are smaller than the window budget: prompts that do not fit go to the others, or get context_length_exceeded",
					"backend", b.Info().Name, "ctx_per_slot", c, "window_budget", budget)
			}
		}
	}
	return w, nil
}

// followWindow returns a window whose budget follows context (the fleet's
// smallest per-slot context), starting from w, built for the context
// known now.
func (a *App) followWindow(w *window.Window, policy string, context func() int) web.Windower {
	return &followingWindow{context: context, log: a.log, ctx: context(), cur: w,
		build: func(budget int) (*window.Window, error) { return a.newWindow(policy, budget) }}
}

// responseStore is the memory store as the Responses API's store; nil
// (not a typed nil) without one.
func (a *App) responseStore() openai.ResponseStore {
	if st, ok := a.store.(openai.ResponseStore); ok {
		return st
	}
	return nil
}

// openStore opens the memory store under the data dir, once. A store that
// cannot be opened is logged, and windows work without it.
func (a *App) openStore() error {
	a.store = a.shared.open(a.f, a.log, a.backend)
	a.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvwin_memory_store_up",
		Help: "1 while the memory store is usable; 0 when it failed to open or verify, or its database is down or left a statement unanswered for --memory-store-timeout (the server runs degraded: see /health)."},
		func() float64 {
			if a.shared.unavailable() != nil {
				return 0
			}
			return 1
		}))
	if c, ok := a.store.(window.StoreMetrics); ok {
		a.metrics.MustRegister(c.Collector()) // kvwin_memory_store_errors_total
	}
	return nil
}

// newWindow builds a window over the memory store.
func (a *App) newWindow(policy string, budget int) (*window.Window, error) {
	// The window's own defaults: the ones kvwin bench recall measures
	// (window/settings.go says by what rule each was chosen).
	w, err := window.New(windowBounds(a.f, window.Config{Policy: policy, Settings: window.Settings{Budget: budget}}), a.store)
	if err != nil {
		return nil, fmt.Errorf("--window %q --window-budget %d: %w", policy, budget, err)
	}
	a.log.Info("window", "policy", policy, "budget", budget)
	return w, nil
}

// startEmbedded loads the model into the embedded engine.
func (a *App) startEmbedded() error {
	f := a.f
	modelPath := f.Model
	if modelPath == "" {
		p, err := EnsureTinyModel(f.DataDir)
		if err != nil {
			return err
		}
		modelPath = p
		a.log.Info("serving the synthetic test model: its text is meaningless, its inference is real llama.cpp work; pass --model FILE.gguf to serve a real model", "model", p)
	}
	modelPath, _ = filepath.Abs(modelPath)
	queueLen := f.Queue
	if queueLen == 0 {
		queueLen = -1 // the engine's "none wait"; its 0 means "default"
	}
	snapshotDir := filepath.Join(f.DataDir, "snapshots")
	if f.NoSnapshots {
		snapshotDir = ""
	}
	eng, err := llamacpp.New(llamacpp.Config{
		ModelPath: modelPath, Slots: f.Slots, Ctx: f.Ctx, Threads: f.Threads, Batch: f.Batch, Seed: seed(f.Seed), Queue: queueLen,
		Order: queue.Config{FIFO: f.QueueOrder == QueueFIFO}, InteractiveSlots: f.InteractiveSlots,
		SnapshotDir: snapshotDir, SnapshotMaxBytes: f.SnapshotBytes, SnapshotTTL: f.MemoryTTL, Now: f.Now,
		SnapshotRAMBytes: kvRAMBytes(f.KVRAM), SnapshotTenantShare: kvRAMShare(f.KVRAMTenantPercent),
	}, a.log)
	if err != nil {
		return err
	}
	a.eng, a.backend, a.reg = eng, eng, eng.Registry()
	a.closers = append(a.closers, func() { eng.Close() })
	a.metrics.MustRegister(eng.Collector())
	return nil
}

// Abort closes the HTTP server and every connection at once, without
// letting requests finish, and releases the backend: what a crash looks
// like to clients and gateways. Run then returns nil.
func (a *App) Abort() {
	a.hs.Close()
	a.Close()
}

// Logger is the server's logger.
func (a *App) Logger() *slog.Logger { return a.log }

// URL is the server's base URL.
func (a *App) URL() string { return "http://" + a.ln.Addr().String() }

// Addr is the address the server listens on (host:port).
func (a *App) Addr() string { return a.ln.Addr().String() }

// Config is the configuration the server was built with.
func (a *App) Config() Config { return a.current().f }

// Engine is the embedded engine; nil for a gateway.
func (a *App) Engine() *llamacpp.Engine { return a.current().eng }

// Router is the gateway's router; nil with the embedded engine.
func (a *App) Router() *router.Router { return a.current().router }

// Log formats (--log-format).
const (
	// LogText is slog's key=value lines, for people reading a terminal.
	LogText = "text"
	// LogJSON is one JSON object a line, for log shippers (Loki, Elastic,
	// journald's JSON export): time, level, msg, request_id and the rest.
	LogJSON = "json"
)

// NewLogger returns the process logger: text on standard error.
func NewLogger(level slog.Level) *slog.Logger {
	log, _ := NewLoggerTo(os.Stderr, LogText, level)
	return log
}

// NewLoggerTo returns a logger writing format ("" is LogText) to w at
// level. Every line logged with a request's context carries its id
// (wire.RequestIDKey).
func NewLoggerTo(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "", LogText:
		h = slog.NewTextHandler(w, opts)
	case LogJSON:
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want %s or %s", format, LogText, LogJSON)
	}
	return slog.New(wire.NewLogHandler(h)), nil
}

// Run serves until ctx is done, then shuts down gracefully: no new
// connections; in-flight requests get shutdownTimeout to finish, then they
// are cancelled (streams end with an error event) and the engine is freed.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	errc := make(chan error, 1)
	a.hs.RegisterOnShutdown(func() {
		if end := a.current().endStreams; end != nil {
			end()
		}
	})
	go func() { errc <- a.hs.Serve(a.ln) }()
	a.log.Info("kvwin listening", "addr", a.URL(), "model", a.backend.Info().Model)

	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // closed from outside (tests kill nodes this way)
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	deadline := a.current().f.ShutdownTimeout
	a.log.Info("shutting down: no new connections; in-flight requests may finish", "deadline", deadline)
	sctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.hs.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
		a.log.Warn("shutdown deadline passed; cancelling in-flight requests")
		a.Close() // every generation ends; handlers write their error events
		gctx, gcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer gcancel()
		if a.hs.Shutdown(gctx) != nil {
			a.hs.Close()
		}
	}
	<-errc
	a.log.Info("stopped")
	return nil
}

// keepAlive is --stream-keepalive as web.Config.KeepAlive: 0 (none) is
// negative there, where 0 is the default.
func keepAlive(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// seed is the engine's Config.Seed of the --seed flag: > 0 as it is (at
// most 2³²−2), anything else random per request.
func seed(s int64) uint32 {
	if s <= 0 || s >= 1<<32-1 {
		return 0
	}
	return uint32(s)
}

// Orders of the embedded engine's queue (--queue-order).
const (
	// QueueFair orders by priority class, then by tenants' fair shares.
	QueueFair = "fair"
	// QueueFIFO orders by arrival, as before classes: for comparison.
	QueueFIFO = "fifo"
)
