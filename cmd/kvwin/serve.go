package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"kvwin/engine"
	"kvwin/engine/llamacpp"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
	"kvwin/window"
	"kvwin/window/memory"
)

// serveFlags are kvwin serve's flags; names follow DESIGN.md exactly.
type serveFlags struct {
	addr            string
	dataDir         string
	model           string
	slots           int
	ctx             int
	threads         int
	batch           int
	queue           int
	window          string
	maxBody         int64
	shutdownTimeout time.Duration
	verbose         bool
	noSnapshots     bool
	snapshotBytes   int64
	backends        []string
	route           string
	windowBudget    int
	shift           bool
	logLevel        slog.Level // the server's log level (benchmarks quiet it); --verbose lowers it to debug

	// Who may call (auth.go).
	apiKeys       []string // TENANT=KEY
	apiKeyFile    string
	adminKey      string
	noAuth        bool
	corsOrigins   []string
	allowedHosts  []string
	backendKey    string
	tenantMaxRun  int
	tenantMaxWait int
	memoryTTL     time.Duration
	// Timeouts toward --backend servers.
	backendConnect    time.Duration
	backendFirstToken time.Duration
	backendIdle       time.Duration
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the OpenAI-compatible API from the embedded llama.cpp engine, or as a gateway over --backend servers",
		Long: `Serve POST /v1/chat/completions, POST /v1/completions and GET /v1/models
(plus llama-server's /completion, /tokenize, /detokenize, /slots, /props and
/health, GET /kvwin/v1/registry and /metrics) from the embedded llama.cpp
engine. With no --model, the synthetic test model is generated under
--data-dir on first start and served. With --backend, kvwin serve is a
gateway: it routes each turn to the llama-server, kvwin node or Ollama that
will answer it soonest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address HOST:PORT")
	fl.StringVar(&f.dataDir, "data-dir", "./data", "directory for kvwin's state (the generated test model, later the memory store and KV snapshots)")
	fl.StringVar(&f.model, "model", "", "GGUF model to serve (default: the generated test model under --data-dir)")
	fl.IntVar(&f.slots, "slots", 4, "parallel sequences (slots) of the engine")
	fl.IntVar(&f.ctx, "ctx", 4096, "context per slot in tokens; the KV cache holds slots × ctx")
	fl.IntVar(&f.threads, "threads", runtime.NumCPU(), "compute threads")
	fl.IntVar(&f.batch, "batch", llamacpp.DefaultConfig().Batch, fmt.Sprintf("most tokens per llama_decode call, 1..%d: prompts are prefilled in chunks of this size (see the README)", llamacpp.MaxBatch))
	fl.IntVar(&f.queue, "queue", 64, "requests that may wait for a slot before new ones get 429 (0: none wait)")
	fl.StringVar(&f.window, "window", window.PolicyMemory, "window policy: full, sliding, sink or memory (per request: header X-Kvwin-Window-Policy)")
	fl.BoolVar(&f.shift, "shift", false, "at eviction steps move the kept turns' KV instead of recomputing it: no prefill, but approximate (StreamingLLM-style)")
	fl.IntVar(&f.windowBudget, "window-budget", 0, "tokens a window may hold (default: the context per slot minus the output reservation)")
	fl.Int64Var(&f.maxBody, "max-body", 8<<20, "largest request body in bytes (larger: 413)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may finish before they are cancelled")
	fl.BoolVar(&f.verbose, "verbose", false, "log every request and llama.cpp's own messages")
	fl.BoolVar(&f.noSnapshots, "no-snapshots", false, "do not save the KV of a slot given to another conversation (under --data-dir/snapshots)")
	fl.Int64Var(&f.snapshotBytes, "snapshot-max-bytes", 1<<30, "disk budget for KV snapshots; least recently used go first")
	fl.StringArrayVar(&f.backends, "backend", nil, "front a remote backend instead of the embedded engine (repeatable): llamaserver=URL for llama-server and kvwin nodes, ollama=URL?model=NAME")
	fl.StringVar(&f.route, "route", router.PolicyPrefix, "routing policy over --backend: prefix, round-robin, least-loaded, random")
	fl.StringArrayVar(&f.apiKeys, "api-key", nil, "TENANT=KEY (repeatable): requests with Authorization: Bearer KEY act as TENANT; with any key configured, requests without one get 401")
	fl.StringVar(&f.apiKeyFile, "api-key-file", "", "file of TENANT=KEY lines (# comments), as --api-key")
	fl.StringVar(&f.adminKey, "admin-key", "", "key for /metrics and /kvwin/v1/*; it may act as any tenant (X-Kvwin-Tenant), as a gateway in front of this node does")
	fl.BoolVar(&f.noAuth, "no-auth", false, "allow listening on a non-loopback --addr without any key (everyone is tenant default)")
	fl.StringArrayVar(&f.corsOrigins, "cors-origin", nil, "origin a browser page may call from, e.g. https://app.example.com (repeatable; none by default)")
	fl.StringArrayVar(&f.allowedHosts, "allowed-host", nil, "Host header accepted besides the listen address and loopback names (repeatable); others get 403")
	fl.StringVar(&f.backendKey, "backend-api-key", "", "with --backend: key sent to the backends as Authorization: Bearer (a kvwin node's --admin-key, so it keeps tenants apart; llama-server's --api-key)")
	fl.IntVar(&f.tenantMaxRun, "tenant-max-concurrent", 0, "generations one tenant may run at once (0: no limit)")
	fl.IntVar(&f.tenantMaxWait, "tenant-max-queued", 0, "with --tenant-max-concurrent: a tenant's requests that may wait beyond it; more get 429")
	fl.DurationVar(&f.memoryTTL, "memory-ttl", 0, "delete a named conversation's stored turns after it has been idle this long, e.g. 720h (0: keep them)")
	fl.DurationVar(&f.backendConnect, "backend-connect-timeout", 5*time.Second, "with --backend: how long connecting to a backend may take")
	fl.DurationVar(&f.backendFirstToken, "backend-first-token-timeout", 120*time.Second, "with --backend: how long a backend may take to send a turn's first token, its queue included; then the turn is retried once elsewhere, or 504")
	fl.DurationVar(&f.backendIdle, "backend-idle-timeout", 60*time.Second, "with --backend: how long a backend may be silent between tokens; then the stream ends with an error")
	return cmd
}

func serve(ctx context.Context, f serveFlags) error {
	a, err := newApp(f)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

// app is a running kvwin server: its backend (the embedded engine, or a
// router over remote backends), the HTTP server and its listener. Tests
// start it exactly as kvwin serve does.
type app struct {
	f         serveFlags
	log       *slog.Logger
	eng       *llamacpp.Engine // nil in gateway mode
	router    *router.Router   // nil with the embedded engine
	backend   engine.Backend
	reg       *kvcache.Registry
	metrics   *prometheus.Registry
	closers   []func()
	closeOnce sync.Once
	hs        *http.Server
	ln        net.Listener
}

// newApp builds the backend and binds the listen address; run serves.
func newApp(f serveFlags) (*app, error) {
	level := f.logLevel
	if f.verbose {
		level = slog.LevelDebug
		slog.SetDefault(newLogger(slog.LevelInfo)) // llama.cpp's loader messages too
	}
	a := &app{f: f, log: newLogger(level), metrics: prometheus.NewRegistry()}
	keys, err := loadKeys(f)
	if err != nil {
		return nil, err
	}
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if len(f.backends) > 0 {
		err = a.startGateway()
	} else {
		err = a.startEmbedded()
	}
	if err != nil {
		a.close()
		return nil, err
	}
	a.metrics.MustRegister(kvcache.NewCollector(a.reg))
	win, err := a.startWindow()
	if err != nil {
		a.close()
		return nil, err
	}
	// Listen first: the Host check needs the address actually bound.
	if a.ln, err = net.Listen("tcp", f.addr); err != nil {
		a.close()
		return nil, fmt.Errorf("listen on %s: %w", f.addr, err)
	}
	srv, err := web.New(web.Config{
		MaxBodyBytes: f.maxBody, Registry: a.reg, Metrics: a.metrics, Window: win, Shift: f.shift,
		APIKeys: keys, AdminKey: f.adminKey, ListenAddr: a.ln.Addr().String(), AllowedHosts: f.allowedHosts,
		CORSOrigins: f.corsOrigins, TenantMaxConcurrent: f.tenantMaxRun, TenantMaxQueued: f.tenantMaxWait,
		Forget: a.forgetter(win),
	}, a.backend, a.log)
	if err != nil {
		a.ln.Close()
		a.close()
		return nil, err
	}
	a.hs = &http.Server{
		Handler: srv.Handler(),
		// Headers must arrive promptly; a body is bounded by web's own read
		// deadline. No ReadTimeout or WriteTimeout: net/http applies them to
		// the whole exchange, so they would cut long streams.
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	return a, nil
}

// close releases the backend, newest first. Safe to call more than once
// and from several goroutines (shutdown and tests both do).
func (a *app) close() {
	a.closeOnce.Do(func() {
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
	})
}

// outputReserve is the part of a slot's context the window leaves for the
// answer when --window-budget is not given.
func outputReserve(ctx int) int { return min(ctx/4, 1024) }

// startWindow opens the memory store under the data dir and builds the
// window. A store that cannot be opened (locked, read-only, corrupt) is
// logged and the server keeps serving: packets then come from each
// request's own turns.
func (a *app) startWindow() (*window.Window, error) {
	budget := a.f.windowBudget
	if budget == 0 {
		ctx := a.backend.Info().ContextSlot
		if ctx == 0 {
			ctx = 4096 // a remote backend not reached yet; its context is unknown
		}
		budget = ctx - outputReserve(ctx)
	}
	var store window.Store
	if a.f.memoryTTL < 0 {
		return nil, fmt.Errorf("--memory-ttl %v: must not be negative", a.f.memoryTTL)
	}
	if st, err := memory.Open(memory.StoreConfig{Dir: filepath.Join(a.f.dataDir, "memory"), TTL: a.f.memoryTTL}); err != nil {
		a.log.Error("memory store unavailable; named conversations get packets from their own turns only", "err", err)
	} else {
		store = st // not a typed nil: window.New checks for nil
		a.closers = append(a.closers, func() { st.Close() })
	}
	// A packet gets an eighth of the budget: its fence and one quoted turn
	// alone take ~160 tokens with a byte-level tokenizer (the test model),
	// which the window's default sixteenth of a 2k budget cannot hold.
	w, err := window.New(window.Config{Policy: a.f.window, Settings: window.Settings{Budget: budget, PacketShare: 1.0 / 8}}, store)
	if err != nil {
		return nil, fmt.Errorf("--window %q --window-budget %d: %w", a.f.window, budget, err)
	}
	a.log.Info("window", "policy", a.f.window, "budget", budget)
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

// startEmbedded loads the model into the embedded engine.
func (a *app) startEmbedded() error {
	f := a.f
	modelPath := f.model
	if modelPath == "" {
		p, err := ensureTinyModel(f.dataDir)
		if err != nil {
			return err
		}
		modelPath = p
		a.log.Info("serving the synthetic test model: its text is meaningless, its inference is real llama.cpp work; pass --model FILE.gguf to serve a real model", "model", p)
	}
	modelPath, _ = filepath.Abs(modelPath)
	queue := f.queue
	if queue == 0 {
		queue = -1 // the engine's "none wait"; its 0 means "default"
	}
	snapshotDir := filepath.Join(f.dataDir, "snapshots")
	if f.noSnapshots {
		snapshotDir = ""
	}
	eng, err := llamacpp.New(llamacpp.Config{
		ModelPath: modelPath, Slots: f.slots, Ctx: f.ctx, Threads: f.threads, Batch: f.batch, Queue: queue,
		SnapshotDir: snapshotDir, SnapshotMaxBytes: f.snapshotBytes,
	}, a.log)
	if err != nil {
		return err
	}
	a.eng, a.backend, a.reg = eng, eng, eng.Registry()
	a.closers = append(a.closers, func() { eng.Close() })
	a.metrics.MustRegister(eng.Collector())
	return nil
}

// url is the server's base URL.
func (a *app) url() string { return "http://" + a.ln.Addr().String() }

// run serves until ctx is done, then shuts down gracefully: no new
// connections; in-flight requests get shutdownTimeout to finish, then they
// are cancelled (streams end with an error event) and the engine is freed.
func (a *app) run(ctx context.Context) error {
	defer a.close()
	errc := make(chan error, 1)
	go func() { errc <- a.hs.Serve(a.ln) }()
	a.log.Info("kvwin listening", "addr", a.url(), "model", a.backend.Info().Model)

	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // closed from outside (tests kill nodes this way)
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down: no new connections; in-flight requests may finish", "deadline", a.f.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), a.f.shutdownTimeout)
	defer cancel()
	if err := a.hs.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
		a.log.Warn("shutdown deadline passed; cancelling in-flight requests")
		a.close() // every generation ends; handlers write their error events
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
