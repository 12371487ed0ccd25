package web

import (
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// Embed computes the embeddings of inputs on the backend serving model,
// once check accepts the backend's model. A backend that cannot embed is
// engine.ErrNotSupported.
func (s *Server) Embed(c *gin.Context, t *core.Turn, model string, inputs []string, check func(engine.Info) error) (engine.Embeddings, engine.Info, error) {
	b, info, err := s.SelectBackend(t, model)
	if err == nil {
		err = check(info)
	}
	if err != nil {
		return engine.Embeddings{}, info, err
	}
	emb, release, err := engine.Hold[engine.Embedder](c.Request.Context(), b)
	if errors.Is(err, engine.ErrNotSupported) {
		return engine.Embeddings{}, info, fmt.Errorf("this server's backend cannot compute embeddings: %w", engine.ErrNotSupported)
	}
	if err != nil {
		return engine.Embeddings{}, info, err
	}
	defer release()
	out, err := emb.Embed(c.Request.Context(), engine.EmbedRequest{Model: info.Model, Inputs: inputs, Tenant: t.Tenant})
	return out, info, err
}
