// Package llamaserver is kvwin's backend for a llama.cpp `llama-server`, or
// a kvwin node serving the same routes, over HTTP.
//
// kvwin decides the prompt's tokens itself: chat messages are rendered and
// tokenized here (exactly, through the server's /tokenize), and /completion
// gets token ids. So the tokens kvwin hashes into registry keys are the
// tokens the server computes, and an unchanged conversation prefix is the
// same token prefix every turn, which is what the server's prompt cache
// reuses. Each message's tokens are cached (kvcache.TokenCache), so a turn
// costs one /tokenize call per new message, not one per message; a template
// the server renders (/apply-template) has the tokens of its rendering up to
// the previous turn's last control token cached (kvcache.PromptCache), so a
// turn sends /tokenize only the text after it.
//
// Generations always stream from the server, whether or not the caller
// streams: the first chunk marks the end of prefill (time to first token),
// a silent server is noticed (Config.FirstTokenTimeout before the first
// chunk, Config.IdleTimeout after it), and an error before the
// first chunk is known to have generated nothing, so a router can fail over.
package llamaserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"kvwin/engine"
	"kvwin/engine/remote"
	"kvwin/kvcache"
)

// Backend is an engine.Backend for one llama-server. It is safe for
// concurrent use; all its state is a snapshot of what the server reported,
// replaced whole under a short lock.
type Backend struct {
	cfg     Config
	base    string // cfg.BaseURL, parsed and without a trailing slash
	client  *http.Client
	tokens  *kvcache.TokenCache
	prompts *kvcache.PromptCache // tokenized renderings of /apply-template (rendered.go)
	log     *slog.Logger

	ownClient, ownTokens, ownPrompts bool
	closed                           atomic.Bool
	// slotCounts: the server counts its slots' tokens in /slots
	// (n_prompt_tokens; /props has endpoint_slots), so a slot without a
	// count holds nothing.
	slotCounts atomic.Bool
	closeOnce  sync.Once

	// load is a token held while fetching the server's state, so that
	// concurrent first requests fetch it once; waiting for it watches the
	// caller's context, which a mutex could not.
	load chan struct{}

	mu      sync.Mutex // guards st, slots and slotIDs; held only to copy them
	st      *state     // nil until /props was read; never modified once published
	slots   []engine.SlotState
	slotIDs map[uint64][]int // slot prompt texts tokenized, by hash (slots.go)
}

// state is what kvwin knows about the server: its props and, once a chat
// request needed it, how its messages become tokens.
type state struct {
	props Props
	chat  *chat // nil until the first chat request
}

var (
	_ engine.Backend               = (*Backend)(nil)
	_ engine.Tokenizer             = (*Backend)(nil)
	_ engine.SpecialTokenizer      = (*Backend)(nil)
	_ engine.MessageCounter        = (*Backend)(nil)
	_ engine.Prompter              = (*Backend)(nil)
	_ engine.SlotReporter          = (*Backend)(nil)
	_ engine.SlotFetcher           = (*Backend)(nil)
	_ engine.ChatTemplater         = (*Backend)(nil)
	_ engine.HealthChecker         = (*Backend)(nil)
	_ engine.ConversationForgetter = (*Backend)(nil)
	_ engine.SlotPinner            = (*Backend)(nil)
)

// New returns a Backend for cfg, logging to log (nil discards logs). It does
// not contact the server: the first request, or LoadProps, does. The caller
// must Close it.
func New(cfg Config, log *slog.Logger) (*Backend, error) {
	cfg, _, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{cfg: cfg, base: cfg.BaseURL, client: cfg.HTTPClient, tokens: cfg.TokenCache,
		log: log.With("backend", cfg.Name), load: make(chan struct{}, 1)}
	if b.client == nil {
		b.client, b.ownClient = &http.Client{Transport: remote.NewTransport(cfg.ConnectTimeout)}, true
	}
	if b.tokens == nil {
		if b.tokens, err = kvcache.NewTokenCache(kvcache.TokenCacheConfig{}); err != nil {
			return nil, fmt.Errorf("llamaserver %s: %w", cfg.Name, err)
		}
		b.ownTokens = true
	}
	if b.prompts = cfg.PromptCache; b.prompts == nil {
		if b.prompts, err = kvcache.NewPromptCache(kvcache.PromptCacheConfig{MaxBytes: DefaultPromptCacheBytes}); err != nil {
			if b.ownTokens {
				b.tokens.Close()
			}
			return nil, fmt.Errorf("llamaserver %s: %w", cfg.Name, err)
		}
		b.ownPrompts = true
	}
	return b, nil
}

// Close releases what the Backend owns (its token caches, its idle
// connections). Requests running meanwhile fail or finish; later ones get
// engine.ErrClosed. Safe to call more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.ownTokens {
			b.tokens.Close()
		}
		if b.ownPrompts {
			b.prompts.Close()
		}
		if b.ownClient {
			b.client.CloseIdleConnections()
		}
	})
	return nil
}

// Info describes the backend from the last /props read; before the first,
// ContextSlot and Slots are 0 and Model is Config.Model. It does not block.
func (b *Backend) Info() engine.Info {
	info := engine.Info{Name: b.cfg.Name, Model: b.cfg.Model}
	if st := b.snapshot(); st != nil {
		info.ContextSlot, info.Slots, info.Snapshots = st.props.ContextSlot, st.props.Slots, st.props.Snapshots
		info.Tenants, info.SharesPrefixes = st.props.Tenants, st.props.SharesPrefixes
		info.Model = b.modelID(st.props)
	}
	return info
}

// modelID is the model name clients use (see Config.Model).
func (b *Backend) modelID(p Props) string {
	switch {
	case b.cfg.Model != "":
		return b.cfg.Model
	case p.ModelAlias != "":
		return p.ModelAlias
	default:
		// The path is the server's; only its base name means anything here.
		// path.Base handles "/", Windows servers' "\" separators are cut too.
		base := path.Base(strings.ReplaceAll(p.ModelPath, `\`, "/"))
		return strings.TrimSuffix(base, ".gguf")
	}
}

// Generate runs req on the server; see engine.Backend. It blocks until the
// generation ends. Errors before the first event wrap engine.ErrUnavailable
// when the server could not serve (unreachable, 5xx, garbage, silent), so a
// router may try another backend; engine.ErrInvalidRequest or
// *engine.ContextLengthError when the request itself is at fault.
func (b *Backend) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	if b.closed.Load() {
		return engine.Result{}, engine.ErrClosed
	}
	st, err := b.current(ctx, len(req.Messages) > 0)
	if err != nil {
		return engine.Result{}, err
	}
	p := st.props
	if model := b.modelID(p); req.Model != "" && req.Model != model {
		return engine.Result{}, fmt.Errorf("%w: %q (%s serves %q)", engine.ErrUnknownModel, req.Model, b.cfg.Name, model)
	}
	switch {
	case req.MaxTokens < 0 || req.MaxTokens > p.ContextSlot:
		return engine.Result{}, engine.Invalid("max tokens %d outside 1..%d (the context of one slot)", req.MaxTokens, p.ContextSlot)
	case req.Slot < -1 || req.Slot >= p.Slots:
		return engine.Result{}, engine.Invalid("slot %d does not exist (slots 0..%d, or -1 for any)", req.Slot, p.Slots-1)
	case req.Keep < -1:
		return engine.Result{}, engine.Invalid("keep %d below -1 (-1 keeps the whole prompt)", req.Keep)
	}
	tokens, err := b.prompt(ctx, st, req)
	if err != nil {
		return engine.Result{}, err
	}
	// The server would refuse it too (llama-server never truncates a
	// prompt); saying so here saves a round trip and gives the same error.
	if len(tokens) >= p.ContextSlot {
		return engine.Result{}, &engine.ContextLengthError{PromptTokens: len(tokens), Limit: p.ContextSlot}
	}
	// What the server may generate: max tokens, or what the slot has room
	// for; counted here too, for a server that generates past n_predict.
	budget := req.MaxTokens
	if budget == 0 {
		budget = p.ContextSlot - len(tokens)
	}
	return b.complete(ctx, b.completionBody(req, tokens), ownerOf(req), p.ContextSlot, budget, req.TopLogprobs, stream)
}

// Prompt returns the prompt tokens Generate would send for req: the chat
// rendered and tokenized, the raw prompt tokenized, or req.Tokens. A gateway
// hashes them into registry keys. It blocks on the server's /tokenize (and
// /props the first time) for what is not cached.
func (b *Backend) Prompt(ctx context.Context, req engine.Request) ([]int, error) {
	if b.closed.Load() {
		return nil, engine.ErrClosed
	}
	st, err := b.current(ctx, len(req.Messages) > 0)
	if err != nil {
		return nil, err
	}
	return b.prompt(ctx, st, req)
}

// prompt turns a request into prompt tokens.
func (b *Backend) prompt(ctx context.Context, st *state, req engine.Request) ([]int, error) {
	if err := req.CheckPrompt(); err != nil {
		return nil, err
	}
	switch {
	case len(req.Messages) > 0:
		return b.render(ctx, st.chat, req.Tenant, req.Messages)
	case req.Prompt != "":
		// As the embedded engine does: BOS added, control tokens not
		// parsed, so raw text cannot smuggle in a control token.
		return b.TokenizeSpecial(ctx, req.Prompt, true, false)
	default:
		for i, t := range req.Tokens {
			if t < 0 {
				return nil, engine.Invalid("tokens[%d]: id %d is negative", i, t)
			}
		}
		return append([]int(nil), req.Tokens...), nil
	}
}

// snapshot returns the current state (nil before the first /props).
func (b *Backend) snapshot() *state {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// ChatTemplate is the server's chat template as its /props last said ("" before
// the first read). It does not block.
func (b *Backend) ChatTemplate() string {
	if st := b.snapshot(); st != nil {
		return st.props.ChatTemplate
	}
	return ""
}

// publish replaces the state.
func (b *Backend) publish(st *state) {
	b.mu.Lock()
	b.st = st
	b.mu.Unlock()
}

// current returns the state, reading /props first if it was never read and
// setting up the chat rendering if chat is asked for and not set up yet. It
// blocks on the server only the first time.
func (b *Backend) current(ctx context.Context, chat bool) (*state, error) {
	if st := b.snapshot(); st != nil && (!chat || st.chat != nil) {
		return st, nil
	}
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	st := b.snapshot()
	if st == nil {
		if _, err := b.loadProps(ctx); err != nil {
			return nil, err
		}
		st = b.snapshot()
	}
	if chat && st.chat == nil {
		c, err := b.setupChat(ctx, st.props)
		if err != nil {
			return nil, err
		}
		st = &state{props: st.props, chat: c}
		b.publish(st)
	}
	return st, nil
}

// lock takes the load token, or gives up when ctx ends.
func (b *Backend) lock(ctx context.Context) error {
	select {
	case b.load <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("llamaserver %s: waiting for the server's properties: %w", b.cfg.Name, ctx.Err())
	}
}

func (b *Backend) unlock() { <-b.load }
