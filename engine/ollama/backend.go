// Package ollama is kvwin's backend for an Ollama server (v0.9.6, the
// version whose api package kvwin builds with), serving one model through
// Ollama's own client (github.com/ollama/ollama/api), named as
// `--backend ollama=http://HOST:11434?model=NAME` (ParseURL). What it
// sends (num_ctx, num_keep, keep_alive, streaming), what it refuses, and how
// it estimates the prompt and cached tokens Ollama does not report are in
// docs/fleet.md, "Gateway over Ollama".
package ollama

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/kvcache"
)

// Backend is an engine.Backend for one model on one Ollama server. It is
// safe for concurrent use: its state is what the server reported (replaced
// whole), the num_ctx sent so far and the tokens-per-byte ratio (atomics),
// and the residency estimate (a short lock).
type Backend struct {
	cfg       Config
	api       *api.Client
	http      *http.Client
	ownClient bool
	log       *slog.Logger
	closed    atomic.Bool
	closeOnce sync.Once
	// drains counts the answers still being drained (drain.go).
	drains sync.WaitGroup

	info    atomic.Pointer[ModelInfo] // nil until /api/show was read
	ctxHigh atomic.Int64              // the largest num_ctx sized and sent; only grows
	ratio   ratio
	res     *residency
}

var (
	_ engine.Backend      = (*Backend)(nil)
	_ engine.TextRenderer = (*Backend)(nil)
)

// New returns a Backend for cfg, logging to log (nil discards logs). It does
// not contact the server: the first request, or LoadModelInfo, does. The
// caller must Close it.
func New(cfg Config, log *slog.Logger) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("ollama: base URL %q: %w", cfg.BaseURL, err)
	}
	keyer, err := kvcache.NewTextKeyer(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("ollama %s: %w", cfg.Name, err)
	}
	b := &Backend{
		cfg: cfg, http: newHTTPClient(cfg.HTTPClient, cfg.ConnectTimeout), ownClient: cfg.HTTPClient == nil,
		log: log.With("backend", cfg.Name), res: newResidency(keyer, cfg.Slots, cfg.KeepAlive),
	}
	b.api = api.NewClient(base, b.http)
	return b, nil
}

// Close releases what the Backend owns (its idle connections). Requests
// running meanwhile fail or finish; later ones get engine.ErrClosed. Safe
// to call more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.ownClient {
			b.http.CloseIdleConnections()
		}
	})
	return nil
}

// Info describes the backend (see the package comment). It does not block.
func (b *Backend) Info() engine.Info {
	info := engine.Info{Name: b.cfg.Name, Model: b.cfg.Model, Slots: b.cfg.Slots}
	if mi := b.info.Load(); mi != nil {
		info.ContextSlot = b.limit(*mi)
	}
	return info
}

// limit is the context of one slot: the model's, or Config.ContextLength
// if smaller.
func (b *Backend) limit(mi ModelInfo) int {
	if b.cfg.ContextLength > 0 {
		return min(b.cfg.ContextLength, mi.ContextLength)
	}
	return mi.ContextLength
}

// Generate runs req on the server; see engine.Backend and the package
// comment. It blocks until the generation ends. Errors before the first
// event wrap engine.ErrUnavailable when the server could not serve
// (unreachable, 5xx, garbage, silent), so a router may try another
// backend; engine.ErrUnknownModel when the server lacks the model;
// engine.ErrInvalidRequest when the request itself is at fault;
// engine.ErrNoLogprobs when it asks for log-probabilities.
func (b *Backend) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	if b.closed.Load() {
		return engine.Result{}, engine.ErrClosed
	}
	if err := checkForm(req); err != nil {
		return engine.Result{}, err
	}
	if req.Logprobs {
		// Ollama v0.9.6's API has no log-probabilities: an answer without
		// them would look like one that has none to give. Refused before
		// any call, so a router moves on to a backend that has them.
		return engine.Result{}, fmt.Errorf("%s: %w (Ollama v0.9.6's API has none)", b.cfg.Name, engine.ErrNoLogprobs)
	}
	if req.Model != "" && !sameModel(req.Model, b.cfg.Model) {
		return engine.Result{}, fmt.Errorf("%w: %q (%s serves %q)", engine.ErrUnknownModel, req.Model, b.cfg.Name, b.cfg.Model)
	}
	mi, err := b.model(ctx)
	if err != nil {
		return engine.Result{}, err
	}
	if err := checkRequest(req, b.limit(mi)); err != nil {
		return engine.Result{}, err
	}

	p := plan{text: render(req)}
	p.upper = upperTokens(req, p.text, mi.System)
	p.numCtx, p.grew = b.size(req, p.upper, mi.ContextLength)
	if p.grew {
		b.log.Info("num_ctx grows: Ollama reloads the model and loses its cached prompts", slog.Int("num_ctx", p.numCtx))
		b.res.reset()
	}
	g := &generation{
		ctx: ctx, idle: b.cfg.IdleTimeout, firstWait: b.cfg.FirstTokenTimeout, stream: stream, numCtx: p.numCtx,
		likely: b.ratio.tokens(len(p.text)), textBytes: len(p.text), maxTokens: b.predict(req, p), maxText: maxAnswerBytes,
		cachedBytes: b.res.match(b.res.chain(req.Tenant, p.text), time.Now()),
	}

	g.sent = time.Now()
	err = b.run(ctx, req, p, g)
	if g.left() {
		// The caller went away, or its StreamFunc failed: the answer is
		// being drained (drain.go).
		if err := g.failed(); err != nil {
			return engine.Result{}, err // the caller's own, returned as it is
		}
		return engine.Result{}, fmt.Errorf("ollama: %s: %w", g.op, ctx.Err())
	}
	res, err := g.finish(err)
	if err != nil {
		// What the server's slot holds now is unknown; the memory keeps
		// its older belief, which the next finished request corrects.
		return res, err
	}
	b.ratio.learn(g.metrics.PromptEvalCount, len(p.text))
	b.res.record(b.res.chain(req.Tenant, p.text+res.Text), time.Now())
	return res, nil
}

// model returns the model's info, reading /api/show the first time.
// Concurrent first requests may each read it; the reads are the same.
func (b *Backend) model(ctx context.Context) (ModelInfo, error) {
	if mi := b.info.Load(); mi != nil {
		return *mi, nil
	}
	return b.LoadModelInfo(ctx)
}

// sameModel reports whether two Ollama model names name the same model:
// "llama3.1" is "llama3.1:latest".
func sameModel(a, b string) bool {
	return withTag(a) == withTag(b)
}

// withTag adds Ollama's default tag to a name without one.
func withTag(name string) string {
	if strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		return name
	}
	return name + ":latest"
}
