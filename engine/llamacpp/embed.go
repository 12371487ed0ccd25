package llamacpp

import (
	"context"
	"fmt"
	"math"
	"time"

	"kvwin/engine"
	"kvwin/internal/ident"
)

// Embeddings from the embedded engine. The context is created with
// embeddings on (the binding's default), so llama.cpp keeps the final,
// normed hidden state of every row that asks for output. A causal model
// has no pooling of its own; kvwin takes the last token's state (which has
// attended to the whole input, as decoder embedding models such as
// E5-Mistral do) and scales it to unit length. Each input is prefilled from
// scratch (no cached prefix), so a text's vector does not depend on what a
// slot held: identical inputs give identical vectors.

var _ engine.Embedder = (*Engine)(nil)

// Embed embeds each input in turn through the run loop; see
// engine.Embedder.
func (e *Engine) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	if req.Model != "" && req.Model != e.cfg.ModelID {
		return engine.Embeddings{}, fmt.Errorf("%w: %q (this engine serves %q)", engine.ErrUnknownModel, req.Model, e.cfg.ModelID)
	}
	var out engine.Embeddings
	for i, text := range req.Inputs {
		if text == "" {
			return engine.Embeddings{}, engine.Invalid("input[%d] is empty", i)
		}
		vec, n, err := e.embedOne(ctx, text, req.Tenant)
		if err != nil {
			return engine.Embeddings{}, fmt.Errorf("input[%d]: %w", i, err)
		}
		out.Vectors = append(out.Vectors, vec)
		out.PromptTokens += n
	}
	return out, nil
}

func (e *Engine) embedOne(ctx context.Context, text, tenant string) ([]float32, int, error) {
	s := engine.DefaultSampling()
	s.Temperature = 0
	req := engine.Request{Model: e.cfg.ModelID, Prompt: text, MaxTokens: 1, Sampling: s, Slot: -1, NoCache: true, Owner: ident.Owner{Tenant: tenant}}
	t, err := e.newTask(ctx, req, time.Now())
	if err != nil {
		return nil, 0, err
	}
	t.embed = true
	defer t.cancel()
	defer e.samplers.put(t.params, t.sampler) // as Generate's
	select {
	case e.admit <- struct{}{}:
	default:
		return nil, 0, engine.ErrQueueFull
	}
	defer func() { <-e.admit }()
	e.incoming <- t // never blocks: capacity equals admissions
	if _, err := t.wait(nil); err != nil {
		return nil, 0, err
	}
	return t.embedding, len(t.prompt), nil
}

// takeEmbedding ends an embedding task whose last prompt token was just
// decoded. Loop-owned.
func (l *loop) takeEmbedding(t *task) {
	vec := l.e.lctx.GetEmbeddingsIth(t.logitsAt)
	if vec == nil {
		// A model with pooling of its own (an embedding model) keeps one
		// vector per sequence instead.
		vec = l.e.lctx.GetEmbeddingsSeq(t.slot)
	}
	t.logitsAt = -1
	if vec == nil {
		l.finish(t, "", fmt.Errorf("llamacpp: the context kept no embedding for the input"))
		return
	}
	var sum float64
	for _, v := range vec {
		sum += float64(v) * float64(v)
	}
	if norm := math.Sqrt(sum); norm > 0 {
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / norm)
		}
	}
	t.embedding = vec
	l.finish(t, engine.FinishStop, nil)
}
