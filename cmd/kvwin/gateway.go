package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/engine/ollama"
	"kvwin/kvcache"
	"kvwin/router"
)

// startGateway builds the remote backends of --backend KIND=URL and a
// router over them: kvwin serve runs as a gateway, without an engine.
func (a *app) startGateway() error {
	reg, err := kvcache.New(kvcache.Config{Logger: a.log})
	if err != nil {
		return err
	}
	var backends []engine.Backend
	for _, spec := range a.f.backends {
		kind, url, ok := strings.Cut(spec, "=")
		if !ok || url == "" {
			return fmt.Errorf("--backend %q: want KIND=URL, e.g. llamaserver=http://10.0.0.5:8080", spec)
		}
		switch kind {
		case "llamaserver":
			b, err := llamaserver.New(llamaserver.Config{BaseURL: url, APIKey: a.f.backendKey, ConnectTimeout: a.f.backendConnect,
				FirstTokenTimeout: a.f.backendFirstToken, IdleTimeout: a.f.backendIdle}, a.log)
			if err != nil {
				return fmt.Errorf("--backend %q: %w", spec, err)
			}
			a.closers = append(a.closers, func() { b.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			props, err := b.LoadProps(ctx)
			cancel()
			if err != nil {
				a.log.Warn("backend not reachable at start; health checks will bring it in", "backend", url, "err", err)
			} else {
				a.log.Info("backend", "url", url, "model", b.Info().Model, "slots", props.Slots, "ctx_per_slot", props.ContextSlot)
			}
			backends = append(backends, b)
		case "ollama":
			cfg, err := ollama.ParseURL(url)
			if err != nil {
				return fmt.Errorf("--backend %q: %w", spec, err)
			}
			cfg.ConnectTimeout, cfg.FirstTokenTimeout, cfg.IdleTimeout = a.f.backendConnect, a.f.backendFirstToken, a.f.backendIdle
			b, err := ollama.New(cfg, a.log)
			if err != nil {
				return fmt.Errorf("--backend %q: %w", spec, err)
			}
			a.closers = append(a.closers, func() { b.Close() })
			backends = append(backends, b)
		default:
			return fmt.Errorf("--backend %q: unknown kind %q (want llamaserver or ollama)", spec, kind)
		}
	}
	r, err := router.New(router.Config{Policy: a.f.route, Registry: reg}, backends, a.log)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, func() { r.Close() })
	a.router, a.backend, a.reg = r, r, reg
	return nil
}
