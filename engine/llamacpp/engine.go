// Package llamacpp is kvwin's embedded engine: llama.cpp in-process through
// github.com/ollama/ollama/llama (cgo), with one context holding N slots
// (sequences) of Ctx tokens each.
//
// One run-loop goroutine owns the llama.cpp context, the batch and the slots;
// requests reach it through a channel and read their output from a task, so
// no lock guards the engine's state and callers never touch llama.cpp except
// to tokenize (read-only on the vocabulary). Each loop iteration makes one
// llama_decode call over all slots (continuous batching): the next token of
// every generating slot, or the next prompt chunk of every prefilling slot,
// the two kinds alternating while both have work. A cold prompt of n tokens
// alone takes ceil(n / Batch) calls, as llama.cpp's own tools do.
//
// Each slot remembers the tokens whose KV it holds. A request goes to the slot
// that continues it best, or gets the longest shared prefix forked into a free
// slot with KvCacheSeqCp (see place); only the new suffix is decoded, and the
// reused count is reported exactly.
package llamacpp

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
	"kvwin/gguf"
	"kvwin/kvcache"
)

var backendInit sync.Once

// Engine is the embedded llama.cpp backend. It is safe for concurrent use.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	shape  gguf.Shape
	model  *llama.Model
	lctx   *llama.Context
	render renderer
	// countID names the renderer in the token cache's message counts.
	countID string
	// samplers keeps finished requests' samplers for reuse (samplers.go).
	samplers *samplers
	vocab    int
	kv       *kv
	// pieces is every token's text (pieceTable), set before the loop
	// starts and read-only after: the loop detokenizes with it and
	// callers prepare output constraints with it (constrain.go).
	pieces []string

	admit    chan struct{} // a token per admitted request: Slots + Queue
	incoming chan *task
	forgets  chan forgetOp // conversations deleted (forget.go)
	quit     chan struct{}
	stopped  chan struct{}
	closeMu  sync.Once

	mu    sync.Mutex // guards views: copies of the slots' state for readers
	views []engine.SlotState

	// life guards the model against use after free: callers tokenize under
	// the read lock; the loop frees the model under the write lock.
	life  sync.RWMutex
	freed bool

	stats Stats
	card  cardOnce // Describe's model card
	// journal publishes what the slots hold (the loop writes it at every
	// registry record) for the gateways that follow this node.
	journal *kvcache.Journal
	// usedCells is the KV cells in use, as the loop last read them
	// (llama_kv_self_used_cells): vllm:kv_cache_usage_perc's numerator.
	usedCells atomic.Int64
}

var (
	_ engine.Backend               = (*Engine)(nil)
	_ engine.Tokenizer             = (*Engine)(nil)
	_ engine.SpecialTokenizer      = (*Engine)(nil)
	_ engine.MessageCounter        = (*Engine)(nil)
	_ engine.Prompter              = (*Engine)(nil)
	_ engine.ConversationCounter   = (*Engine)(nil)
	_ engine.SlotReporter          = (*Engine)(nil)
	_ engine.ChatTemplater         = (*Engine)(nil)
	_ engine.ToolTemplater         = (*Engine)(nil)
	_ engine.ConversationForgetter = (*Engine)(nil)
	_ engine.ModelDescriber        = (*Engine)(nil)
	_ engine.SlotJournaler         = (*Engine)(nil)
	_ engine.LoadReporter          = (*Engine)(nil)
)

// Stats are the engine's counters since start. All fields are read atomically.
type Stats struct {
	Requests        atomic.Int64
	PromptTokens    atomic.Int64 // prompt tokens of all requests
	CachedTokens    atomic.Int64 // prompt tokens reused from the KV cache
	PromptDecoded   atomic.Int64 // prompt tokens handed to llama_decode
	Decodes         atomic.Int64 // llama_decode calls that succeeded
	GeneratedTokens atomic.Int64
	Forks           atomic.Int64 // prefixes copied between slots
	Shifts          atomic.Int64 // kept history moved instead of recomputed (--shift)
	CountReuses     atomic.Int64 // CountMessages calls that found their history's counts in one lookup
}

// New loads the model and creates the context. It blocks while loading.
func New(cfg Config, log *slog.Logger) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	shape, err := gguf.Read(cfg.ModelPath)
	if err != nil {
		return nil, err
	}
	if err := fits(cfg, shape, availableMemory); err != nil {
		return nil, err
	}
	if cfg.ModelID == "" {
		cfg.ModelID = strings.TrimSuffix(filepath.Base(cfg.ModelPath), ".gguf")
	}
	model, lctx, err := loadContext(cfg, cfg.Batch)
	if err != nil {
		return nil, err
	}
	tokens, err := kvcache.NewTokenCache(kvcache.TokenCacheConfig{})
	if err != nil {
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, err
	}
	prompts, err := kvcache.NewPromptCache(kvcache.PromptCacheConfig{MaxBytes: cfg.PromptCacheBytes})
	if err != nil {
		tokens.Close()
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, err
	}
	fp, err := modelFingerprint(cfg.ModelPath)
	if err != nil {
		tokens.Close()
		prompts.Close()
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, fmt.Errorf("fingerprint model %q: %w", cfg.ModelPath, err)
	}
	id := fmt.Sprintf("%016x", fp)
	render, err := newRenderer(model, shape.ChatTemplate, map[string]string{"tool_use": shape.ChatTemplateToolUse}, tokens, prompts, id, log)
	if err != nil {
		tokens.Close()
		prompts.Close()
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, fmt.Errorf("model %q: %w", cfg.ModelPath, err)
	}
	var kvs *kv
	journal, err := kvcache.NewJournal(kvcache.JournalConfig{BlockTokens: cfg.BlockTokens})
	if err == nil {
		kvs, err = newKV(cfg, fp, render.name()+"\x00"+shape.ChatTemplate, journal, log)
	}
	if err != nil {
		tokens.Close()
		prompts.Close()
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, err
	}
	kvs.tokens, kvs.prompts = tokens, prompts
	e := &Engine{journal: journal,
		cfg: cfg, log: log, shape: shape, model: model, lctx: lctx, kv: kvs,
		render:   render,
		countID:  id + "\x00" + render.name(),
		vocab:    model.NumVocab(),
		admit:    make(chan struct{}, cfg.Slots+max(cfg.Queue, 0)),
		incoming: make(chan *task, cfg.Slots+max(cfg.Queue, 0)),
		forgets:  make(chan forgetOp),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		views:    make([]engine.SlotState, cfg.Slots),
		samplers: newSamplers(2 * cfg.Slots),
	}
	for i := range e.views {
		e.views[i] = engine.SlotState{ID: i, Context: cfg.Ctx}
	}
	l, err := newLoop(e)
	if err != nil {
		e.free()
		kvs.close()
		return nil, err
	}
	go l.run()
	log.Info("embedded engine ready", "model", cfg.ModelID, "template", e.render.name(),
		"slots", cfg.Slots, "ctx_per_slot", cfg.Ctx, "threads", cfg.Threads,
		"kv_bytes", shape.KVBytesPerToken("f16")*cfg.Slots*cfg.Ctx)
	return e, nil
}

func (e *Engine) free() {
	e.life.Lock()
	defer e.life.Unlock()
	e.freed = true
	if e.lctx != nil {
		freeContext(e.lctx)
	}
	llama.FreeModel(e.model)
}

// Close cancels every request, stops the run loop and frees the model. It
// blocks until the loop has stopped. Safe to call more than once.
func (e *Engine) Close() error {
	e.closeMu.Do(func() {
		close(e.quit)
		<-e.stopped
		e.kv.close() // writes the snapshots still queued
	})
	<-e.stopped
	return nil
}

// Registry returns the block registry the engine records into.
func (e *Engine) Registry() *kvcache.Registry { return e.kv.reg }

// Info describes the engine.
func (e *Engine) Info() engine.Info {
	return engine.Info{Name: e.cfg.Name, Model: e.cfg.ModelID, ContextSlot: e.cfg.Ctx, Slots: e.cfg.Slots, Snapshots: e.kv.store != nil,
		SharesPrefixes: true} // placement forks a shared prefix into a free slot (KvCacheSeqCp)
}

// CountMessage returns a chat message's tokens as the engine renders it
// into a prompt; the window plans its budget with it.
func (e *Engine) CountMessage(m engine.Message) int { return e.countFor("", m) }

// countFor is m's count through tenant's caches.
func (e *Engine) countFor(tenant string, m engine.Message) int {
	if !e.use() {
		return engine.EstimateTokens(len(m.Content))
	}
	defer e.life.RUnlock()
	// A message's count is a function of the renderer, its role and its
	// text alone, and the window asks for every message every turn: the
	// token cache keeps it (per tenant, see tokenSpace), so a message costs
	// a lookup, not a rendering.
	space := tokenSpace(e.countID, tenant)
	if n, ok := e.kv.tokens.Count(space, m.Role, m.Content); ok {
		return n
	}
	n := e.render.count(tenant, m)
	e.kv.tokens.PutCount(space, m.Role, m.Content, n)
	return n
}

// CountMessages returns the count of every message of msgs, as
// CountMessage gives them, through the tenant's own caches; the counts of the longest prefix counted for
// the tenant before come from the prompt cache, so an unchanged history
// costs one lookup, not one per message.
func (e *Engine) CountMessages(tenant string, msgs []engine.Message) []int {
	keys := chainKeys(e.kv.prompts, tenant, e.countID+"\x00counts", msgs)
	out, reused := e.kv.prompts.Counts(keys, len(msgs), func(i int) (int, bool) { return e.countFor(tenant, msgs[i]), true })
	if reused {
		e.stats.CountReuses.Add(1)
	}
	return out
}

// TemplateTools reports whether the model's own chat template renders a
// request's tools (in the <tool_call> convention).
func (e *Engine) TemplateTools() bool {
	j, ok := e.render.(*jinjaRenderer)
	return ok && j.t.ToolCalls
}

// ChatTemplate returns the model's chat template as its file states it
// (GET /props of the node API reports it).
func (e *Engine) ChatTemplate() string { return e.shape.ChatTemplate }

// TokenizeSpecial tokenizes text with llama.cpp's two flags apart: add
// BOS/EOS as the model wants, and parse control-token text.
func (e *Engine) TokenizeSpecial(_ context.Context, text string, addSpecial, parseSpecial bool) ([]int, error) {
	if !e.use() {
		return nil, engine.ErrClosed
	}
	defer e.life.RUnlock()
	return e.model.Tokenize(text, addSpecial, parseSpecial)
}

// Shape returns the model's shape as read from its file.
func (e *Engine) Shape() gguf.Shape { return e.shape }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// SlotJournal returns the journal of what the slots hold.
func (e *Engine) SlotJournal() *kvcache.Journal { return e.journal }

// Load returns the requests running in slots and admitted but waiting
// for one (queued). It does not block.
func (e *Engine) Load() kvcache.Load {
	running := 0
	for _, s := range e.Slots() {
		if s.Processing {
			running++
		}
	}
	return kvcache.Load{Running: running, Waiting: max(len(e.admit)-running, 0)}
}

// Slots returns a copy of the slots' state.
func (e *Engine) Slots() []engine.SlotState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.SlotState(nil), e.views...)
}

// Tokenize tokenizes text; special adds BOS and parses control tokens.
func (e *Engine) Tokenize(_ context.Context, text string, special bool) ([]int, error) {
	if !e.use() {
		return nil, engine.ErrClosed
	}
	defer e.life.RUnlock()
	return e.model.Tokenize(text, special, special)
}

// use takes the read side of life; false (and no lock held) once freed.
func (e *Engine) use() bool {
	e.life.RLock()
	if e.freed {
		e.life.RUnlock()
		return false
	}
	return true
}

// Detokenize turns token ids back into text (control tokens as their text).
func (e *Engine) Detokenize(_ context.Context, tokens []int) (string, error) {
	if !e.use() {
		return "", engine.ErrClosed
	}
	defer e.life.RUnlock()
	var b strings.Builder
	for _, t := range tokens {
		if t < 0 || t >= e.vocab {
			return "", engine.Invalid("token id %d outside the vocabulary (0..%d)", t, e.vocab-1)
		}
		b.WriteString(e.model.TokenToPiece(t))
	}
	return b.String(), nil
}

// Prompt returns the prompt tokens Generate computes for req (the chat
// rendered with its tools and sink padding), so a count of a request's
// tokens (Anthropic's count_tokens) is what its turn sends. An output
// format Generate would refuse (a forced tool's schema llama.cpp's
// converter rejects, a grammar over the size limit) is refused here too,
// with the same error, so a count answers as its turn would; the token
// budget is not checked, as a count has none.
func (e *Engine) Prompt(_ context.Context, req engine.Request) ([]int, error) {
	if !e.use() {
		return nil, engine.ErrClosed
	}
	defer e.life.RUnlock()
	if o := req.Sampling.Output; o != nil {
		if _, _, err := outputGrammar(o); err != nil { // as newTask does
			return nil, err
		}
	}
	return e.prompt(req)
}

// prompt turns a request into prompt tokens.
func (e *Engine) prompt(req engine.Request) ([]int, error) { return e.promptSpent(req, nil) }

// promptSpent is prompt, adding the tokenizer's time to sp.
func (e *Engine) promptSpent(req engine.Request, sp *spent) ([]int, error) {
	if err := req.CheckPrompt(); err != nil {
		return nil, err
	}
	switch {
	case len(req.Messages) > 0:
		for i, m := range req.Messages {
			if !engine.ValidRole(m.Role) {
				return nil, engine.Invalid("messages[%d]: unknown role %q", i, m.Role)
			}
		}
		return e.render.render(req.Tenant, req.Messages, req.Tools, req.PadSinks, e.cfg.BlockTokens, sp)
	case req.Prompt != "":
		defer sp.since(time.Now())
		return e.model.Tokenize(req.Prompt, true, false)
	default:
		for i, t := range req.Tokens {
			if t < 0 || t >= e.vocab {
				return nil, engine.Invalid("tokens[%d]: id %d outside the vocabulary (0..%d)", i, t, e.vocab-1)
			}
		}
		return append([]int(nil), req.Tokens...), nil
	}
}

// newTask tokenizes and checks req and prepares its sampler, holding the
// model alive meanwhile.
func (e *Engine) newTask(ctx context.Context, req engine.Request, arrived time.Time) (*task, error) {
	if !e.use() {
		return nil, engine.ErrClosed
	}
	defer e.life.RUnlock()
	var sp spent
	rendering := time.Now()
	tokens, err := e.promptSpent(req, &sp)
	if err != nil {
		return nil, err
	}
	rendered := time.Since(rendering)
	if len(tokens) == 0 {
		return nil, engine.Invalid("the prompt is empty")
	}
	if len(tokens) >= e.cfg.Ctx {
		return nil, &engine.ContextLengthError{PromptTokens: len(tokens), Limit: e.cfg.Ctx}
	}
	t, err := newTask(ctx, e, req, tokens, arrived)
	if err != nil {
		return nil, err
	}
	t.chain = e.kv.keyer.ForTenant(req.Tenant).Tokens(tokens)
	if !req.NoCache && !(req.SlotOnly && req.Slot >= 0) {
		t.restore = e.kv.prepareRestore(req.Tenant, t.chain, tokens)
	}
	t.render, t.tokenize = rendered-sp.tokenize, sp.tokenize
	t.ready = rendering.Add(rendered)
	return t, nil
}

// Generate runs one request; see engine.Backend. It blocks until the
// generation has ended and its slot is free again.
func (e *Engine) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	arrived := time.Now()
	if req.Model != "" && req.Model != e.cfg.ModelID {
		return engine.Result{}, fmt.Errorf("%w: %q (this engine serves %q)", engine.ErrUnknownModel, req.Model, e.cfg.ModelID)
	}
	if req.MaxTokens < 0 || req.MaxTokens > e.cfg.Ctx {
		return engine.Result{}, engine.Invalid("max tokens %d outside 1..%d (the context of one slot)", req.MaxTokens, e.cfg.Ctx)
	}
	if req.Slot >= e.cfg.Slots {
		return engine.Result{}, engine.Invalid("slot %d does not exist (slots 0..%d)", req.Slot, e.cfg.Slots-1)
	}
	t, err := e.newTask(ctx, req, arrived)
	if err != nil {
		return engine.Result{}, err
	}
	defer t.cancel()
	// Once Generate returns, the loop is done with the task (wait returns
	// only then, or once the loop has stopped): its sampler goes back.
	defer e.samplers.put(t.params, t.sampler)
	select {
	case e.admit <- struct{}{}:
	default:
		if t.con != nil {
			t.con.free()
		}
		return engine.Result{}, engine.ErrQueueFull
	}
	defer func() { <-e.admit }()
	e.incoming <- t      // never blocks: capacity equals admissions
	engine.Accepted(ctx) // checked and queued: only a slot and its prefill are left
	return t.wait(stream)
}

// loadContext loads cfg's model and a context of cfg.Slots × cfg.Ctx cells
// decoding in batches of batch, as the engine and the baseline both need.
// It blocks while loading; on error nothing is left allocated.
func loadContext(cfg Config, batch int) (*llama.Model, *llama.Context, error) {
	if err := checkBindingLayout(); err != nil {
		return nil, nil, err
	}
	backendInit.Do(llama.BackendInit)
	// A progress callback of our own keeps llama.cpp from printing dots.
	model, err := llama.LoadModelFromFile(cfg.ModelPath, llama.ModelParams{UseMmap: true, Progress: func(float32) {}})
	if err != nil {
		return nil, nil, fmt.Errorf("load model %q: %w", cfg.ModelPath, err)
	}
	params := llama.NewContextParams(cfg.Slots*cfg.Ctx, batch, cfg.Slots, cfg.Threads, cfg.FlashAttention, "")
	lctx, err := llama.NewContextWithModel(model, params)
	if err != nil {
		llama.FreeModel(model)
		return nil, nil, fmt.Errorf("create context for %q (%d slots × %d tokens): %w", cfg.ModelPath, cfg.Slots, cfg.Ctx, err)
	}
	return model, lctx, nil
}
