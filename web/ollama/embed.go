package ollama

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// Ollama's embedding routes: POST /api/embed (a string or an array of
// strings in, unit-length vectors out, as Ollama normalises them) and the
// older POST /api/embeddings (one prompt, one vector). kvwin's vectors are
// unit length on both; Ollama's older route returns them unscaled. kvwin
// does not truncate: an input longer than the model's context is an error
// whatever "truncate" says, and keep_alive and options are accepted and
// have no effect (the model stays loaded).

// ollamaEmbedRequest is POST /api/embed's body (api.EmbedRequest of Ollama
// v0.9.6, with input kept raw).
type ollamaEmbedRequest struct {
	Model     string          `json:"model"`
	Input     json.RawMessage `json:"input"`
	KeepAlive *oapi.Duration  `json:"keep_alive,omitempty"`
	Truncate  *bool           `json:"truncate,omitempty"`
	Options   map[string]any  `json:"options"`
}

// ollamaEmbed serves POST /api/embed.
func (s *server) ollamaEmbed(c *gin.Context, t *core.Turn) error {
	start := time.Now()
	var body ollamaEmbedRequest
	if err := s.Decode(c, &body); err != nil {
		return err
	}
	inputs, err := ollamaEmbedInputs(body.Input)
	if err != nil {
		return err
	}
	check := func(info engine.Info) error { return ollamaModel(body.Model, info) }
	if len(inputs) == 0 {
		// Ollama loads the model and answers no vectors.
		if _, _, err := s.ollamaServes(t, body.Model); err != nil {
			return err
		}
		core.WriteJSON(c.Writer, http.StatusOK, oapi.EmbedResponse{Model: body.Model, Embeddings: [][]float32{}})
		return nil
	}
	out, info, err := s.Embed(c, t, body.Model, inputs, check)
	if err != nil {
		return err
	}
	c.Header(wire.HeaderBackend, core.ServedBy(info, out.Backend))
	core.WriteJSON(c.Writer, http.StatusOK, oapi.EmbedResponse{Model: body.Model, Embeddings: out.Vectors,
		TotalDuration: time.Since(start), PromptEvalCount: out.PromptTokens})
	return nil
}

// ollamaEmbedInputs reads /api/embed's input as Ollama does: a string (""
// is no input), an array of strings, or nothing at all.
func ollamaEmbedInputs(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` || string(raw) == "[]" {
		return nil, nil
	}
	inputs, err := core.EmbedInputs(raw)
	if err != nil {
		return nil, core.BadInput(core.CodeInvalidType, "input", "invalid input type: input must be a string or an array of non-empty strings")
	}
	return inputs, nil
}

// ollamaEmbeddingsRequest is POST /api/embeddings' body (api.EmbeddingRequest).
type ollamaEmbeddingsRequest struct {
	Model     string         `json:"model"`
	Prompt    string         `json:"prompt"`
	KeepAlive *oapi.Duration `json:"keep_alive,omitempty"`
	Options   map[string]any `json:"options"`
}

// ollamaEmbeddings serves POST /api/embeddings: one prompt's vector, or an
// empty one for an empty prompt, as Ollama answers.
func (s *server) ollamaEmbeddings(c *gin.Context, t *core.Turn) error {
	var body ollamaEmbeddingsRequest
	if err := s.Decode(c, &body); err != nil {
		return err
	}
	check := func(info engine.Info) error { return ollamaModel(body.Model, info) }
	if body.Prompt == "" {
		if _, _, err := s.ollamaServes(t, body.Model); err != nil {
			return err
		}
		core.WriteJSON(c.Writer, http.StatusOK, oapi.EmbeddingResponse{Embedding: []float64{}})
		return nil
	}
	out, info, err := s.Embed(c, t, body.Model, []string{body.Prompt}, check)
	if err != nil {
		return err
	}
	v := make([]float64, len(out.Vectors[0]))
	for i, x := range out.Vectors[0] {
		v[i] = float64(x)
	}
	c.Header(wire.HeaderBackend, core.ServedBy(info, out.Backend))
	core.WriteJSON(c.Writer, http.StatusOK, oapi.EmbeddingResponse{Embedding: v})
	return nil
}

// ollamaServes reports whether model is served here, and by which backend;
// if not, it has answered in Ollama's shape.
func (s *server) ollamaServes(t *core.Turn, model string) (engine.Backend, engine.Info, error) {
	b, info, err := s.SelectBackend(t, model)
	if err == nil {
		err = ollamaModel(model, info)
	}
	return b, info, err
}
