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
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"kvwin/engine/llamacpp"
	"kvwin/kvcache"
	"kvwin/web"
)

// serveFlags are kvwin serve's flags; names follow DESIGN.md exactly.
type serveFlags struct {
	addr            string
	dataDir         string
	model           string
	slots           int
	ctx             int
	threads         int
	queue           int
	window          string
	maxBody         int64
	shutdownTimeout time.Duration
	verbose         bool
	noSnapshots     bool
	snapshotBytes   int64
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the OpenAI-compatible API from the embedded llama.cpp engine",
		Long: `Serve POST /v1/chat/completions, POST /v1/completions, GET /v1/models and
GET /health from the embedded llama.cpp engine. With no --model, the synthetic
test model is generated under --data-dir on first start and served.`,
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
	fl.IntVar(&f.queue, "queue", 64, "requests that may wait for a slot before new ones get 429 (0: none wait)")
	fl.StringVar(&f.window, "window", "full", "window policy (only full exists yet)")
	fl.Int64Var(&f.maxBody, "max-body", 8<<20, "largest request body in bytes (larger: 413)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may finish before they are cancelled")
	fl.BoolVar(&f.verbose, "verbose", false, "log every request and llama.cpp's own messages")
	fl.BoolVar(&f.noSnapshots, "no-snapshots", false, "do not save the KV of a slot given to another conversation (under --data-dir/snapshots)")
	fl.Int64Var(&f.snapshotBytes, "snapshot-max-bytes", 1<<30, "disk budget for KV snapshots; least recently used go first")
	return cmd
}

func serve(ctx context.Context, f serveFlags) error {
	a, err := newApp(f)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

// app is a running kvwin server: the engine, the HTTP server and its
// listener. Tests start it exactly as kvwin serve does.
type app struct {
	f   serveFlags
	log *slog.Logger
	eng *llamacpp.Engine
	hs  *http.Server
	ln  net.Listener
}

// newApp loads the model and binds the listen address; run serves.
func newApp(f serveFlags) (*app, error) {
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
		slog.SetDefault(newLogger(slog.LevelInfo)) // llama.cpp's loader messages too
	}
	log := newLogger(level)
	if f.window != "full" {
		return nil, fmt.Errorf("--window %q: only \"full\" exists in this version", f.window)
	}
	modelPath := f.model
	if modelPath == "" {
		p, err := ensureTinyModel(f.dataDir)
		if err != nil {
			return nil, err
		}
		modelPath = p
		log.Info("serving the synthetic test model: its text is meaningless, its inference is real llama.cpp work; pass --model FILE.gguf to serve a real model", "model", p)
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
		ModelPath: modelPath, Slots: f.slots, Ctx: f.ctx, Threads: f.threads, Queue: queue,
		SnapshotDir: snapshotDir, SnapshotMaxBytes: f.snapshotBytes,
	}, log)
	if err != nil {
		return nil, err
	}
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(eng.Collector(), kvcache.NewCollector(eng.Registry()),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := web.New(web.Config{MaxBodyBytes: f.maxBody, Registry: eng.Registry(), Metrics: metrics}, eng, log)
	if err != nil {
		eng.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		eng.Close()
		return nil, fmt.Errorf("listen on %s: %w", f.addr, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	return &app{f: f, log: log, eng: eng, hs: hs, ln: ln}, nil
}

// url is the server's base URL.
func (a *app) url() string { return "http://" + a.ln.Addr().String() }

// run serves until ctx is done, then shuts down gracefully: no new
// connections; in-flight requests get shutdownTimeout to finish, then they
// are cancelled (streams end with an error event) and the engine is freed.
func (a *app) run(ctx context.Context) error {
	defer a.eng.Close()
	errc := make(chan error, 1)
	go func() { errc <- a.hs.Serve(a.ln) }()
	a.log.Info("kvwin listening", "addr", a.url(), "model", a.eng.Info().Model)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down: no new connections; in-flight requests may finish", "deadline", a.f.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), a.f.shutdownTimeout)
	defer cancel()
	if err := a.hs.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
		a.log.Warn("shutdown deadline passed; cancelling in-flight requests")
		a.eng.Close() // every generation ends; handlers write their error events
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
