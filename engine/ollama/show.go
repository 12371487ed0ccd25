package ollama

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
)

// FallbackContext is the context length assumed for a model whose
// /api/show names none: llama.cpp's historical default, small enough to
// be safe on any model.
const FallbackContext = 2048

// ModelInfo is what the server says about the backend's model in
// POST /api/show.
type ModelInfo struct {
	// Architecture is model_info's general.architecture ("llama", …).
	Architecture string
	// ContextLength is model_info's <architecture>.context_length: the
	// context the model was trained for, which caps num_ctx (Ollama caps
	// it there too). FallbackContext if the server does not say.
	ContextLength int
	// ContextKnown is false when ContextLength is the fallback.
	ContextKnown bool
	// System is the Modelfile's system prompt, which Ollama puts first in
	// a chat that has no system message of its own.
	System string
}

// LoadModelInfo reads the model's /api/show and makes it the backend's:
// Info reports it and requests are sized by it. Generate calls it once;
// a router's health check calls it to notice a model re-created with
// another context. It blocks for at most Config.Timeout. A model the
// server does not have is engine.ErrUnknownModel.
func (b *Backend) LoadModelInfo(ctx context.Context) (ModelInfo, error) {
	op := http.MethodPost + " " + b.cfg.BaseURL + "/api/show"
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	p := &probe{}
	resp, err := b.api.Show(withProbe(ctx, p), &api.ShowRequest{Model: b.cfg.Model})
	switch {
	case err == nil:
	case parent.Err() != nil:
		return ModelInfo{}, fmt.Errorf("ollama: %s: %w", op, parent.Err())
	case p.status >= http.StatusBadRequest:
		return ModelInfo{}, statusError(op, p.status, p.errBody, err)
	case ctx.Err() != nil:
		return ModelInfo{}, unavailable(op, "no answer within %v", b.cfg.Timeout)
	case p.status == 0:
		return ModelInfo{}, fmt.Errorf("ollama: %s: %w (%w)", op, engine.ErrUnavailable, err)
	default:
		return ModelInfo{}, unavailable(op, "the answer is not the JSON expected: %v", err)
	}
	info := modelInfo(resp)
	if !info.ContextKnown {
		b.log.Warn("the model's context length is unknown; assuming the fallback",
			slog.String("model", b.cfg.Model), slog.String("architecture", info.Architecture),
			slog.Int("context", FallbackContext))
	}
	b.info.Store(&info)
	return info, nil
}

// modelInfo reads a ShowResponse.
func modelInfo(resp *api.ShowResponse) ModelInfo {
	info := ModelInfo{ContextLength: FallbackContext, System: resp.System}
	info.Architecture, _ = resp.ModelInfo["general.architecture"].(string)
	if info.Architecture == "" {
		return info
	}
	if n := count(resp.ModelInfo[info.Architecture+".context_length"]); n > 0 {
		info.ContextLength, info.ContextKnown = n, true
	}
	return info
}

// count reads a positive integer from a decoded JSON value (float64, or a
// json.Number if the decoder was told to keep them); 0 if it is not one.
func count(v any) int {
	switch n := v.(type) {
	case float64:
		if n >= 1 && n <= 1<<31 && n == float64(int(n)) {
			return int(n)
		}
	case json.Number:
		if i, err := n.Int64(); err == nil && i >= 1 && i <= 1<<31 {
			return int(i)
		}
	}
	return 0
}
