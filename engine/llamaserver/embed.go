package llamaserver

import (
	"context"
	"net/http"

	"kvwin/engine"
)

var _ engine.Embedder = (*Backend)(nil)

// Embed asks the server's OpenAI route, POST /v1/embeddings, which kvwin
// nodes serve and llama-server serves when started with --embeddings. It
// blocks for at most Config.Timeout.
func (b *Backend) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	const path = "/v1/embeddings"
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	in := map[string]any{"input": req.Inputs, "encoding_format": "float"}
	if err := b.call(ctx, http.MethodPost, path, in, &out); err != nil {
		return engine.Embeddings{}, err
	}
	if len(out.Data) != len(req.Inputs) {
		return engine.Embeddings{}, unavailable(http.MethodPost+" "+b.base+path, "%d embeddings for %d inputs", len(out.Data), len(req.Inputs))
	}
	vecs := make([][]float32, len(out.Data))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(vecs) || vecs[d.Index] != nil {
			return engine.Embeddings{}, unavailable(http.MethodPost+" "+b.base+path, "embedding index %d out of place", d.Index)
		}
		vecs[d.Index] = d.Embedding
	}
	return engine.Embeddings{Vectors: vecs, PromptTokens: out.Usage.PromptTokens}, nil
}
