package engine

import "context"

// Embedder is implemented by backends that compute embeddings (OpenAI's
// POST /v1/embeddings). Embed blocks until every input is embedded or ctx
// ends; it is safe for concurrent use.
type Embedder interface {
	Embed(ctx context.Context, req EmbedRequest) (Embeddings, error)
}

// EmbedRequest asks for one vector per input text.
type EmbedRequest struct {
	Model  string
	Inputs []string
	Tenant string // as Request.Tenant
}

// Embeddings are the vectors of an EmbedRequest, in input order, each of
// the model's width and unit length; PromptTokens counts every input's
// tokens. Backend names the backend that computed them when a router
// chose it.
type Embeddings struct {
	Vectors      [][]float32
	PromptTokens int
	Backend      string
}
