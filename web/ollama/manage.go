package ollama

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/core"
)

// Ollama's model management routes. kvwin serves the models its flags or
// configuration file name and manages no model store, so: /api/pull of a
// served model succeeds at once (there is nothing newer to fetch), of any
// other is Ollama's 404; /api/create, /api/copy, /api/delete and /api/push
// are 501 saying so, rather than the 404 of an unknown route, which
// clients report as a missing server feature or a wrong address.

// ollamaPull serves POST /api/pull: {"status":"success"} for a served
// model.
func (s *server) ollamaPull(c *gin.Context, t *core.Turn) error {
	var body oapi.PullRequest
	if err := s.Decode(c, &body); err != nil {
		return err
	}
	if _, _, err := s.ollamaServes(t, firstNonEmpty(body.Model, body.Name)); err != nil {
		return err // Name: the deprecated field older clients send
	}
	// Streamed or not, the answer is this one object (a stream of one line).
	core.WriteJSON(c.Writer, http.StatusOK, oapi.ProgressResponse{Status: "success"})
	return nil
}

// ollamaUnmanaged answers the model store's other routes with 501.
func (s *server) ollamaUnmanaged(verb string) gin.HandlerFunc {
	return func(c *gin.Context) {
		core.FailOllama(c, fmt.Errorf("kvwin does not %s models: it serves the models its flags or configuration file name: %w", verb, engine.ErrNotSupported))
	}
}

// firstNonEmpty returns the first of names that is not "".
func firstNonEmpty(names ...string) string {
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return ""
}
