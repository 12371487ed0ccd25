package ollama

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
)

var _ engine.Embedder = (*Backend)(nil)

// Embed asks Ollama's POST /api/embed for the configured model's vectors
// (Ollama scales them to unit length, as kvwin's engine does). It blocks
// for at most Config.Timeout.
func (b *Backend) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	op := http.MethodPost + " " + b.cfg.BaseURL + "/api/embed"
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	p := &probe{}
	truncate := false // an input longer than the context is an error, not silently cut
	resp, err := b.api.Embed(withProbe(ctx, p), &api.EmbedRequest{
		Model: b.cfg.Model, Input: req.Inputs, Truncate: &truncate,
		KeepAlive: &api.Duration{Duration: b.cfg.KeepAlive},
	})
	switch {
	case err == nil:
	case parent.Err() != nil:
		return engine.Embeddings{}, fmt.Errorf("ollama: %s: %w", op, parent.Err())
	case p.status >= http.StatusBadRequest:
		return engine.Embeddings{}, statusError(op, p.status, p.errBody, err)
	case ctx.Err() != nil:
		return engine.Embeddings{}, unavailable(op, "no answer within %v", b.cfg.Timeout)
	case p.status == 0:
		return engine.Embeddings{}, fmt.Errorf("ollama: %s: %w (%w)", op, engine.ErrUnavailable, err)
	default:
		return engine.Embeddings{}, unavailable(op, "the answer is not the JSON expected: %v", err)
	}
	if len(resp.Embeddings) != len(req.Inputs) {
		return engine.Embeddings{}, unavailable(op, "%d embeddings for %d inputs", len(resp.Embeddings), len(req.Inputs))
	}
	return engine.Embeddings{Vectors: resp.Embeddings, PromptTokens: resp.PromptEvalCount}, nil
}
