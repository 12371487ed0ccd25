package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/config"
	"kvwin/engine/llamacpp"
	"kvwin/router"
	"kvwin/web"
	"kvwin/window"
	"kvwin/window/memory"
)

// newServeCmd is kvwin serve: its flags fill an app.Config (names follow
// docs/architecture.md, "Flags", exactly), and package app assembles and
// runs the server.
func newServeCmd() *cobra.Command {
	var f app.Config
	var configPath string
	var check bool
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
			given := givenFlags(cmd.Flags()) // before the file sets any
			if configPath != "" {
				file, err := applyConfig(cmd.Flags(), configPath)
				if err != nil {
					if !check && f.LogFormat == app.LogJSON { // --log-format json on the command line
						log, _ := app.NewLoggerTo(cmd.ErrOrStderr(), app.LogJSON, slog.LevelInfo)
						log.Error("kvwin serve", "err", err)
						return errLogged
					}
					return err
				}
				f.Models, f.MaxLoadedModels = file.Models, file.MaxLoadedModels
				f.ConfigPath = configPath
			} else if check {
				return errors.New("--check needs --config FILE")
			}
			memoryStoreFromEnv(&f)
			otlpFromEnv(&f)
			if check {
				if err := app.Check(f); err != nil {
					return fmt.Errorf("%s: %w", configPath, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d models)\n", configPath, len(f.Models))
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveLogged(ctx, f, func() (app.Config, error) { return reloadConfig(given, configPath) })
		},
	}
	bindServeFlags(cmd.Flags(), &f, &configPath, &check)
	return cmd
}

// bindServeFlags defines kvwin serve's flags on fl, bound to f.
func bindServeFlags(fl *pflag.FlagSet, f *app.Config, configPath *string, check *bool) {
	fl.StringVar(configPath, "config", "", "YAML file of settings: each flag as a snake_case key (--window-budget: window_budget), plus models: and max_loaded_models:; flags on the command line win")
	fl.BoolVar(check, "check", false, "with --config: validate the file and what it asks for (model files readable, slots × ctx allocatable here), print ok and exit 0, or the error and exit 1; nothing is loaded")
	fl.StringVar(&f.Addr, "addr", "127.0.0.1:8080", "listen address HOST:PORT")
	fl.StringVar(&f.DataDir, "data-dir", "./data", "directory for kvwin's state (the generated test model, later the memory store and KV snapshots)")
	fl.StringVar(&f.Model, "model", "", "GGUF model to serve (default: the generated test model under --data-dir)")
	fl.IntVar(&f.Slots, "slots", 4, "parallel sequences (slots) of the engine")
	fl.IntVar(&f.Ctx, "ctx", 4096, "context per slot in tokens; the KV cache holds slots × ctx")
	fl.IntVar(&f.Threads, "threads", runtime.NumCPU(), "compute threads")
	fl.Int64Var(&f.Seed, "seed", -1, "sampler seed of requests that name none (llama-server's --seed): the same prompt then gives the same answer, for tests and recorded sessions; -1: random per request")
	fl.IntVar(&f.Batch, "batch", llamacpp.DefaultConfig().Batch, fmt.Sprintf("most tokens per llama_decode call, 1..%d: prompts are prefilled in chunks of this size (see docs/serve.md, Choosing threads and batch)", llamacpp.MaxBatch))
	fl.IntVar(&f.Queue, "queue", 64, "requests that may wait for a slot before new ones get 429 (0: none wait)")
	fl.StringVar(&f.QueueOrder, "queue-order", app.QueueFair, "how requests waiting for a slot are ordered: fair (interactive before batch, then tenants' fair shares by deficit round-robin over tokens) or fifo (arrival order, as before priority classes)")
	fl.IntVar(&f.InteractiveSlots, "interactive-slots", 0, "slots batch requests leave idle for interactive ones (capacity reserved, nothing preempted); 0: 1 with 2 slots or more, -1: none")
	fl.StringVar(&f.Window, "window", window.PolicyMemory, "window policy: full, sliding, sink or memory (per request: header X-Kvwin-Window-Policy)")
	fl.BoolVar(&f.Shift, "shift", false, "at eviction steps move the kept turns' KV instead of recomputing it: no prefill, but approximate (StreamingLLM-style)")
	fl.IntVar(&f.WindowBudget, "window-budget", 0, "tokens a window may hold (default: the context per slot minus the output reservation)")
	fl.Int64Var(&f.MaxBody, "max-body", 8<<20, "largest request body in bytes (larger: 413)")
	fl.Int64Var(&f.MemoryMaxBytes, "memory-max-bytes", app.DefaultMemoryMaxBytes, "conversation state held in memory between turns, in bytes: stored conversations' indexes (half), indexes of conversations served from their own turns (a quarter), Responses chains and packets (an eighth each); least recently used go first and are read back from the store when used again, never refused. Default 512 MiB: its half holds a 100,000-short-turn conversation's index (~200 MB)")
	fl.IntVar(&f.MaxItems, "max-items", web.DefaultMaxItems, "most messages (chat, Messages, Ollama) or input items (Responses) in one request; more: 400 array_above_max_length. Default 262,144: above a 100,000-turn conversation resent whole (200,000 messages), far above a 2,000-turn chain")
	fl.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may finish before they are cancelled")
	fl.BoolVar(&f.Verbose, "verbose", false, "log every request and llama.cpp's own messages")
	fl.StringVar(&f.LogFormat, "log-format", app.LogText, "log lines as text (key=value) or json (one object a line, for a log shipper); each request's lines carry its request_id")
	fl.BoolVar(&f.NoSnapshots, "no-snapshots", false, "do not save the KV of a slot given to another conversation (under --data-dir/snapshots)")
	fl.Int64Var(&f.SnapshotBytes, "snapshot-max-bytes", -1, "disk budget for KV snapshots, in bytes; least recently used go first; default an eighth of the free space of --data-dir's filesystem at start, at least 1 GiB, at most 16 GiB")
	fl.Int64Var(&f.KVRAM, "kv-ram", -1, "RAM tier of KV snapshots, in bytes, before they are demoted to disk; 0 none; default an eighth of MemAvailable at start, at most 4 GiB")
	fl.IntVar(&f.KVRAMTenantPercent, "kv-ram-tenant-percent", 50, "most of --kv-ram one tenant's snapshots may hold, in percent (1-100)")
	fl.StringArrayVar(&f.Backends, "backend", nil, "front a remote backend instead of the embedded engine (repeatable): llamaserver=URL for llama-server and kvwin nodes, ollama=URL?model=NAME; URL dns://NAME:PORT (dns+https://) is one backend per address NAME resolves to")
	fl.StringVar(&f.Route, "route", router.PolicyPrefix, "routing policy over --backend: prefix, round-robin, least-loaded, random")
	fl.StringArrayVar(&f.APIKeys, "api-key", nil, "TENANT=KEY (repeatable): requests with Authorization: Bearer KEY act as TENANT; with any key configured, requests without one get 401")
	fl.StringVar(&f.APIKeyFile, "api-key-file", "", "file of TENANT=KEY lines (# comments), as --api-key")
	fl.StringVar(&f.AdminKey, "admin-key", "", "key for /metrics and /kvwin/v1/*; it may act as any tenant (X-Kvwin-Tenant), as a gateway in front of this node does")
	fl.BoolVar(&f.NoAuth, "no-auth", false, "allow listening on a non-loopback --addr without any key (everyone is tenant default)")
	fl.StringArrayVar(&f.CORSOrigins, "cors-origin", nil, "origin a browser page may call from, e.g. https://app.example.com (repeatable; none by default)")
	fl.StringArrayVar(&f.AllowedHosts, "allowed-host", nil, "Host header accepted besides the listen address and loopback names (repeatable); others get 403")
	fl.StringVar(&f.BackendKey, "backend-api-key", "", "with --backend: key sent to the backends as Authorization: Bearer (a kvwin node's --admin-key, so it keeps tenants apart; llama-server's --api-key)")
	fl.IntVar(&f.TenantMaxConcurrent, "tenant-max-concurrent", 0, "generations one tenant may run at once (0: no limit)")
	fl.IntVar(&f.TenantMaxQueued, "tenant-max-queued", 0, "with --tenant-max-concurrent: a tenant's requests that may wait beyond it; more get 429")
	fl.StringVar(&f.MemoryStore, "memory-store", "", "where named conversations' evicted turns are stored: postgres://… or postgresql://… for a PostgreSQL database gateway replicas share, a path or sqlite:PATH for a SQLite file (default: memory/memory.db under --data-dir); env "+envMemoryStore+" when neither this flag nor the config key is given, so a password stays out of the process list")
	fl.DurationVar(&f.MemoryStoreTimeout, "memory-store-timeout", memory.DefaultTimeout, "with a PostgreSQL --memory-store: how long the database may leave a statement unanswered before the store counts as down (/health degraded; named chats served without memory, previous_response_id a 503) until it answers again; it bounds silence, not work")
	fl.DurationVar(&f.MemoryTTL, "memory-ttl", 0, "retention: delete a named conversation's stored turns and KV snapshots after it has been idle this long, and any KV snapshot not saved or restored for this long (checked at start, then every quarter of it, at least hourly), e.g. 720h (0: keep them)")
	fl.DurationVar(&f.StreamKeepAlive, "stream-keepalive", web.DefaultKeepAlive, "streamed answers: once a request is accepted (queued or prefilling) its headers and opening event go out at once, then a keep-alive this often until the first token (Anthropic's ping, an SSE comment, an empty Ollama object); 0: none. Default: a quarter of the 60 s idle timeout common to proxies, far inside Claude Code's 300 s stream watchdog")
	fl.DurationVar(&f.BackendConnect, "backend-connect-timeout", 5*time.Second, "with --backend: how long connecting to a backend may take")
	fl.DurationVar(&f.BackendFirstToken, "backend-first-token-timeout", 120*time.Second, "with --backend: how long a backend may take to send a turn's first token, its queue included; then the turn is retried once elsewhere, or 504")
	fl.DurationVar(&f.BackendIdle, "backend-idle-timeout", 60*time.Second, "with --backend: how long a backend may be silent between tokens; then the stream ends with an error")
	fl.StringVar(&f.OTLPEndpoint, "otlp-endpoint", "", "export each turn as an OpenTelemetry trace (a span, its Server-Timing phases as children) to this OTLP collector's base URL, e.g. http://collector:4318 (HTTP; /v1/traces is appended) or http://collector:4317 with --otlp-protocol grpc; default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT if set, else no tracing")
	fl.StringVar(&f.OTLPProtocol, "otlp-protocol", "", "with an OTLP endpoint: http/protobuf or grpc; default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL if set, else http/protobuf")
	fl.DurationVar(&f.BackendResolveInterval, "backend-resolve-interval", app.DefaultResolveInterval, "with --backend KIND=dns://NAME:PORT: how often NAME is resolved again; addresses that appear join, those that vanish drain")
}

// givenFlags records the flags given on the command line, as they were
// spelled (a repeated flag once per value).
func givenFlags(fl *pflag.FlagSet) map[string][]string {
	given := map[string][]string{}
	fl.Visit(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			given[f.Name] = sv.GetSlice()
		} else {
			given[f.Name] = []string{f.Value.String()}
		}
	})
	return given
}

// reloadConfig is what SIGHUP serves: the command line's flags again over
// the configuration file as it is now.
func reloadConfig(given map[string][]string, configPath string) (app.Config, error) {
	var f app.Config
	var path string
	var check bool
	fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bindServeFlags(fl, &f, &path, &check)
	for name, vals := range given {
		for _, v := range vals {
			if err := fl.Set(name, v); err != nil {
				return f, fmt.Errorf("--%s %s: %w", name, v, err)
			}
		}
	}
	if configPath != "" {
		file, err := applyConfig(fl, configPath)
		if err != nil {
			return f, err
		}
		f.Models, f.MaxLoadedModels, f.ConfigPath = file.Models, file.MaxLoadedModels, configPath
	}
	memoryStoreFromEnv(&f)
	otlpFromEnv(&f)
	return f, nil
}

// envMemoryStore names the variable that gives --memory-store when neither
// the flag nor the config file does: a PostgreSQL URL's password then
// stays out of the process list (a Kubernetes Secret as an env var).
const envMemoryStore = "KVWIN_MEMORY_STORE"

// memoryStoreFromEnv fills f.MemoryStore from the environment if the flag
// and the file left it empty.
func memoryStoreFromEnv(f *app.Config) {
	if f.MemoryStore == "" {
		f.MemoryStore = os.Getenv(envMemoryStore)
	}
}

// otlpFromEnv reads the standard OpenTelemetry variables that decide
// whether, and how, turns are traced when neither flag nor file says: an
// endpoint variable turns tracing on (the exporter reads it, and the other
// OTEL_EXPORTER_OTLP_* variables, itself); the protocol variables choose
// the exporter, which the Go SDK leaves to its caller.
func otlpFromEnv(f *app.Config) {
	f.OTLPFromEnv = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := os.Getenv(name); f.OTLPProtocol == "" && v != "" {
			f.OTLPProtocol = v
		}
	}
}

// applyConfig loads the file at path and sets every flag it names that was
// not given on the command line, so the command line wins.
func applyConfig(fl *pflag.FlagSet, path string) (*config.File, error) {
	file, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	for key, vals := range file.FlagValues() {
		flag := fl.Lookup(config.FlagName(key))
		if flag == nil {
			return nil, fmt.Errorf("%s: key %q has no flag --%s", path, key, config.FlagName(key))
		}
		if flag.Changed {
			continue
		}
		for _, v := range vals {
			if err := fl.Set(flag.Name, v); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, key, err)
			}
		}
	}
	return file, nil
}

// errLogged is an error serve already logged; main only exits 1.
var errLogged = errors.New("kvwin serve failed (logged)")

// serveLogged serves f with standard output and error taken over
// (app.Stdio): from here to the end, every line the process prints —
// kvwin's, llama.cpp's, a library's — is one record of the server's logger,
// in --log-format. Its own error is logged too, then errLogged returned.
func serveLogged(ctx context.Context, f app.Config, reload func() (app.Config, error)) error {
	if f.LogFormat != "" && f.LogFormat != app.LogText && f.LogFormat != app.LogJSON {
		_, err := app.NewLoggerTo(os.Stderr, f.LogFormat, slog.LevelInfo)
		return err
	}
	stdio, err := app.CaptureStdio()
	if err != nil {
		return err
	}
	defer stdio.Close() // last: the lines printed up to here are logged first
	level := f.LogLevel
	if f.Verbose {
		level = slog.LevelDebug
	}
	log, _ := app.NewLoggerTo(stdio.Real(), f.LogFormat, level)
	stdio.Start(log)
	slog.SetDefault(log)
	llamacpp.SetLogger(log, app.LlamaLogLevel(f.Verbose))
	// OpenTelemetry's SDK reports what it could not do (an export the
	// collector refused or never answered) to a process-wide handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	f.Logger = log
	if err := serve(ctx, f, reload); err != nil {
		log.Error("kvwin serve", "err", err)
		return errLogged
	}
	return nil
}

// serve runs the server until ctx ends; each SIGHUP serves what reload
// returns from then on (keys, backends, models), or keeps the running
// configuration and logs why not.
func serve(ctx context.Context, f app.Config, reload func() (app.Config, error)) error {
	a, err := app.New(f)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				nf, err := reload()
				if err == nil {
					nf.LogLevel, nf.Logger = f.LogLevel, f.Logger
					err = a.Reload(nf)
				}
				if err != nil {
					a.Logger().Error("SIGHUP: configuration not reloaded; the running one stays", "err", err)
				}
			}
		}
	}()
	return a.Run(ctx)
}
