package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/engine/ollama"
	"kvwin/kvcache"
	"kvwin/router"
	"kvwin/web"
)

// remoteBackend is a backend kvwin holds a connection pool for.
type remoteBackend interface {
	engine.Backend
	Close() error
}

// backendOptions are what every kind of --backend may use besides its URL.
type backendOptions struct {
	apiKey string // --backend-api-key
	log    *slog.Logger
	// The backend timeouts (--backend-connect-timeout,
	// --backend-first-token-timeout, --backend-idle-timeout); 0: defaults.
	connect, firstToken, idle time.Duration
}

// backendKind is one kind of --backend KIND=URL: how its URL is parsed and
// its backend built.
type backendKind struct {
	example string // a --backend value of this kind, for error messages
	open    func(url string, o backendOptions) (remoteBackend, error)
}

// backendKinds are the kinds --backend accepts. A new kind of backend is
// one entry here.
var backendKinds = map[string]backendKind{
	"llamaserver": {example: "llamaserver=http://10.0.0.5:8080", open: openLlamaServer},
	"ollama":      {example: "ollama=http://10.0.0.6:11434?model=NAME", open: openOllama},
}

// openLlamaServer is a llama-server or kvwin node. It reads the server's
// /props now, so the log says what it serves; a server not up yet is
// brought in by the health checks.
func openLlamaServer(url string, o backendOptions) (remoteBackend, error) {
	b, err := llamaserver.New(llamaserver.Config{BaseURL: url, APIKey: o.apiKey, ConnectTimeout: o.connect,
		FirstTokenTimeout: o.firstToken, IdleTimeout: o.idle}, o.log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	props, err := b.LoadProps(ctx)
	cancel()
	if err != nil {
		o.log.Warn("backend not reachable at start; health checks will bring it in", "backend", url, "err", err)
	} else {
		o.log.Info("backend", "url", url, "model", b.Info().Model, "slots", props.Slots, "ctx_per_slot", props.ContextSlot)
	}
	return b, nil
}

// openOllama is an Ollama server; its URL names the model (?model=NAME)
// and options (ollama.ParseURL).
func openOllama(url string, o backendOptions) (remoteBackend, error) {
	cfg, err := ollama.ParseURL(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout, cfg.FirstTokenTimeout, cfg.IdleTimeout = o.connect, o.firstToken, o.idle
	return ollama.New(cfg, o.log)
}

// parseBackend splits --backend KIND=URL and finds its kind.
func parseBackend(spec string) (backendKind, string, error) {
	name, url, ok := strings.Cut(spec, "=")
	if !ok || url == "" {
		return backendKind{}, "", fmt.Errorf("--backend %q: want KIND=URL, e.g. %s", spec, backendKinds["llamaserver"].example)
	}
	kind, ok := backendKinds[name]
	if !ok {
		names := make([]string, 0, len(backendKinds))
		for n := range backendKinds {
			names = append(names, n)
		}
		slices.Sort(names)
		return backendKind{}, "", fmt.Errorf("--backend %q: unknown kind %q (want %s)", spec, name, strings.Join(names, " or "))
	}
	return kind, url, nil
}

// startGateway builds the remote backends of --backend KIND=URL and a
// router over them: kvwin serve runs as a gateway, without an engine.
func (a *App) startGateway() error {
	r, reg, err := a.openRouter(a.f.Backends)
	if err != nil {
		return err
	}
	a.router, a.backend, a.reg = r, r, reg
	return nil
}

// openRouter builds the remote backends of specs (KIND=URL) and a router
// over them with a registry of its own; closing them is added to a.closers.
func (a *App) openRouter(specs []string) (*router.Router, *kvcache.Registry, error) {
	reg, err := kvcache.New(kvcache.Config{Logger: a.log})
	if err != nil {
		return nil, nil, err
	}
	var backends []engine.Backend
	var fleets []*dnsFleet
	opts := backendOptions{apiKey: a.f.BackendKey, log: a.log,
		connect: a.f.BackendConnect, firstToken: a.f.BackendFirstToken, idle: a.f.BackendIdle}
	for _, spec := range specs {
		kind, url, err := parseBackend(spec)
		if err != nil {
			return nil, nil, err
		}
		if d, ok, err := parseDNS(spec, kind, url); ok {
			if err != nil {
				return nil, nil, err
			}
			f := a.dnsFleet(d, opts)
			fleets = append(fleets, f)
			backends = append(backends, f.start()...)
			continue
		}
		b, err := kind.open(url, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("--backend %q: %w (e.g. %s)", spec, err, kind.example)
		}
		a.closers = append(a.closers, func() { b.Close() })
		backends = append(backends, b)
	}
	cfg := router.Config{Policy: a.f.Route, Registry: reg, IsolateTenants: a.tenants, Observe: a.decisions.observe}
	if !a.tenants {
		cfg.SoleTenant = web.DefaultTenant // what a backend's slots hold is this one tenant's
	}
	cfg.Dynamic = len(fleets) > 0
	r, err := router.New(cfg, backends, a.log)
	if err != nil {
		for _, f := range fleets {
			f.closeAll()
		}
		return nil, nil, err
	}
	a.closers = append(a.closers, func() { r.Close() })
	for _, f := range fleets {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.watch(ctx, r)
		}()
		a.closers = append(a.closers, func() { cancel(); <-done }) // before the router's close (newest first)
	}
	return r, reg, nil
}
