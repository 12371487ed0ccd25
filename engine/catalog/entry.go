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
	_ engine.Holder         = (*entry)(nil)
	_ engine.ModelDescriber = (*entry)(nil)
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
// model name), or the embedded engine if it is loaded; nil if it is not.
// It never loads and holds nothing: to use an ability, engine.Hold it.
func (e *entry) Unwrap() engine.Backend {
	if e.remote != nil {
		return e.remote
	}
	c := e.cat
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.state != Loaded {
		return nil
	}
	return e.eng
}

// Hold loads the model if it is not (waiting for room as a request does)
// and holds it until release: an ability found through it (engine.Hold) is
// used while the model cannot be unloaded.
func (e *entry) Hold(ctx context.Context) (engine.Backend, func(), error) {
	return e.cat.acquire(ctx, e)
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
