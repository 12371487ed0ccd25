package router

import (
	"context"

	"kvwin/engine"
)

var _ engine.Embedder = (*Router)(nil)

// Embed computes embeddings on the first healthy backend that can; every
// backend serves the same model, so any of them embeds alike. It blocks on
// that backend.
func (r *Router) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	var name string
	out, err := delegate(r, func(e engine.Embedder) (engine.Embeddings, error) {
		res, err := e.Embed(ctx, req)
		if err == nil {
			name = nameOf(r, e)
		}
		return res, err
	})
	out.Backend = name
	return out, err
}

// nameOf is the member name of backend b.
func nameOf(r *Router, b any) string {
	for _, m := range r.fleet() {
		if any(m.backend) == b {
			return m.name
		}
	}
	return ""
}
