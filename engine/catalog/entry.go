package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"kvwin/engine"
)

// entry is one configured model: what Select returns.
type entry struct {
	cat    *Catalog
	m      Model
	remote engine.Backend // remote{m.Remote}; nil for an embedded model

	// Guarded by cat.mu.
	state    string
	eng      Engine
	inflight int
	lastUsed time.Time
	loadedAt time.Time
	lastErr  error
}

var (
	_ engine.Backend        = (*entry)(nil)
	_ engine.Unwrapper      = (*entry)(nil)
	_ engine.MessageCounter = (*entry)(nil)
	_ engine.ModelDescriber = (*entry)(nil)
	_ engine.Embedder       = (*entry)(nil)
	_ engine.ToolTemplater  = (*entry)(nil)
)

// peek returns e's backend if it is loaded (or remote), held until
// release; nil if it is not loaded. It never loads.
func (e *entry) peek() (engine.Backend, func()) {
	if e.remote != nil {
		return e.remote, func() {}
	}
	c := e.cat
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.state != Loaded {
		return nil, nil
	}
	e.inflight++
	c.signalLocked()
	return e.eng, func() { c.release(e) }
}

// Info is the model's as configured: its name, slots and context.
func (e *entry) Info() engine.Info { return e.m.Info }

// Generate loads the model if needed, then generates.
func (e *entry) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	b, release, err := e.cat.acquire(ctx, e)
	if err != nil {
		return engine.Result{}, err
	}
	defer release()
	return b.Generate(ctx, req, fn)
}

// Unwrap returns the backend serving the model, so that engine.As finds
// its every ability: a remote model's (served under the backends' own
// model name), or the embedded engine, loaded if it is not (it blocks for
// the load, as the request that asks is about to need it; nil if the load
// fails). The engine is not held: unloaded meanwhile (its TTL, room for
// another), its calls fail with engine.ErrClosed.
func (e *entry) Unwrap() engine.Backend {
	b, release, err := e.cat.acquire(context.Background(), e)
	if err != nil {
		return nil
	}
	release()
	return b
}

// CountMessage counts in the model's tokens, loading it (the window plans
// right before the generation that needs it loaded anyway); if it cannot
// be loaded or cannot count, Config.Estimate's count.
func (e *entry) CountMessage(m engine.Message) int {
	b, release, err := e.cat.acquire(context.Background(), e)
	if err != nil {
		return e.cat.cfg.Estimate(m)
	}
	defer release()
	if mc, ok := engine.As[engine.MessageCounter](b); ok { // a router counts with a backend's tokenizer
		return mc.CountMessage(m)
	}
	return e.cat.cfg.Estimate(m)
}

// Describe describes the model's file without loading it.
func (e *entry) Describe() (engine.ModelCard, error) {
	if e.remote != nil {
		if d, ok := engine.As[engine.ModelDescriber](e.remote); ok {
			return d.Describe()
		}
		return engine.ModelCard{}, errors.New("remote model: no card")
	}
	st, err := os.Stat(e.m.Source)
	if err != nil {
		return engine.ModelCard{}, fmt.Errorf("describe model %q: %w", e.m.Name, err)
	}
	return engine.ModelCard{Format: "gguf", Size: st.Size(), ModifiedAt: st.ModTime()}, nil
}

// Embed loads the model if needed, then embeds with it (a remote model:
// under the backends' own model name).
func (e *entry) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	b, release, err := e.cat.acquire(ctx, e)
	if err != nil {
		return engine.Embeddings{}, err
	}
	defer release()
	emb, ok := engine.As[engine.Embedder](b)
	if !ok {
		return engine.Embeddings{}, fmt.Errorf("model %q cannot compute embeddings: %w", e.m.Name, engine.ErrNotSupported)
	}
	return emb.Embed(ctx, req)
}

// TemplateTools reports whether the model's own chat template renders
// tools; it loads the model (the chat that asks is about to need it).
func (e *entry) TemplateTools() bool {
	b, release, err := e.cat.acquire(context.Background(), e)
	if err != nil {
		return false
	}
	defer release()
	tt, ok := engine.As[engine.ToolTemplater](b)
	return ok && tt.TemplateTools()
}

// remote is a remote model's backend as its entry serves it: requests
// reach it without the entry's name, which is kvwin's, not the backends'.
// It unwraps to that backend, whose abilities engine.As finds.
type remote struct{ engine.Backend }

var (
	_ engine.Unwrapper = remote{}
	_ engine.Embedder  = remote{}
)

// Generate serves req with the backends' own model.
func (r remote) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	req.Model = ""
	return r.Backend.Generate(ctx, req, fn)
}

// Unwrap is the backend serving the model.
func (r remote) Unwrap() engine.Backend { return r.Backend }

// Embed embeds with the backends' own model.
func (r remote) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	emb, ok := engine.As[engine.Embedder](r.Backend)
	if !ok {
		return engine.Embeddings{}, fmt.Errorf("remote model: embeddings: %w", engine.ErrNotSupported)
	}
	req.Model = ""
	return emb.Embed(ctx, req)
}
