package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// embeddingsRequest is the body of POST /v1/embeddings. Input stays raw:
// a string or an array of strings (token-id arrays are refused).
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// embeddingList is the response of POST /v1/embeddings.
type embeddingList struct {
	Object string           `json:"object"`
	Data   []embeddingDatum `json:"data"`
	Model  string           `json:"model"`
	Usage  embeddingUsage   `json:"usage"`
}

// embeddingDatum's Embedding is a []float32 or, for encoding_format
// base64, the little-endian float32 bytes in base64.
type embeddingDatum struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddings serves POST /v1/embeddings through the backend's Embedder
// (a gateway's router delegates to a backend that has one).
func (s *server) embeddings(c *gin.Context, t *core.Turn) error {
	var body embeddingsRequest
	if err := s.Decode(c, &body); err != nil {
		return err
	}
	inputs, err := core.EmbedInputs(body.Input)
	if err != nil {
		return err
	}
	switch body.EncodingFormat {
	case "", "float", "base64":
	default:
		return core.BadInput(core.CodeInvalidValue, "encoding_format", `encoding_format is %q; it must be "float" or "base64"`, body.EncodingFormat)
	}
	out, info, err := s.Embed(c, t, body.Model, inputs, func(info engine.Info) error {
		if body.Model != "" && body.Model != info.Model {
			return fmt.Errorf("the model %q does not exist (this server serves %q): %w", body.Model, info.Model, engine.ErrUnknownModel)
		}
		return nil
	})
	if errors.Is(err, engine.ErrNotSupported) {
		s.failNotSupported(c, err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	if d := body.Dimensions; d != nil && len(out.Vectors) > 0 && *d != len(out.Vectors[0]) {
		return core.BadInput(core.CodeInvalidValue, "dimensions", "dimensions is %d but this model's embeddings have %d; kvwin does not shorten them", *d, len(out.Vectors[0]))
	}
	list := embeddingList{Object: objectList, Model: info.Model, Data: make([]embeddingDatum, len(out.Vectors)),
		Usage: embeddingUsage{PromptTokens: out.PromptTokens, TotalTokens: out.PromptTokens}}
	for i, v := range out.Vectors {
		list.Data[i] = embeddingDatum{Object: "embedding", Index: i, Embedding: v}
		if body.EncodingFormat == "base64" {
			list.Data[i].Embedding = base64Floats(v)
		}
	}
	c.Header(wire.HeaderBackend, core.ServedBy(info, out.Backend))
	core.WriteJSON(c.Writer, http.StatusOK, list)
	return nil
}

// failNotSupported answers 501: the route exists, the backend cannot.
func (s *server) failNotSupported(c *gin.Context, msg string) {
	_ = c.Error(engine.ErrNotSupported)
	core.WriteJSON(c.Writer, http.StatusNotImplemented, core.ErrorBody{Error: core.APIError{Message: msg, Type: core.TypeInvalidRequest, Code: "not_supported"}})
}

// base64Floats is v as OpenAI's base64 encoding: little-endian float32s.
func base64Floats(v []float32) string {
	buf := make([]byte, 0, 4*len(v))
	for _, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}
