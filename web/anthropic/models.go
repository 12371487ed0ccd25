package anthropic

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// modelInfo is one model in Anthropic's shape.
type modelInfo struct {
	Type           string `json:"type"`
	ID             string `json:"id"`
	DisplayName    string `json:"display_name"`
	CreatedAt      string `json:"created_at"`
	MaxInputTokens int    `json:"max_input_tokens,omitempty"`
	MaxTokens      int    `json:"max_tokens,omitempty"`
}

// modelPage is GET /v1/models in Anthropic's shape: one page holding
// every served model.
type modelPage struct {
	Data    []modelInfo `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID *string     `json:"first_id"`
	LastID  *string     `json:"last_id"`
}

// modelsPath is the path of the model list (and, below it, of a model).
const modelsPath = "/v1/models"

// Models is the middleware that answers GET /v1/models[/{model}] in
// Anthropic's shape when the request carries anthropic-version (as
// Anthropic's clients always do); other requests go on to the OpenAI
// routes, which hold the path.
func Models(svc Services) gin.HandlerFunc {
	s := &server{svc}
	return func(c *gin.Context) {
		r := c.Request
		if r.Method != http.MethodGet || r.Header.Get(headerVersion) == "" {
			return
		}
		p := r.URL.Path
		switch {
		case p == modelsPath:
			s.modelList(c)
		case strings.HasPrefix(p, modelsPath+"/") && len(p) > len(modelsPath)+1:
			s.model(c, strings.TrimPrefix(p, modelsPath+"/"))
		default:
			return
		}
		c.Abort()
	}
}

func (s *server) modelList(c *gin.Context) {
	page := modelPage{Data: s.modelInfos()}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = &page.Data[0].ID, &page.Data[n-1].ID
	}
	core.WriteJSON(c.Writer, http.StatusOK, page)
}

func (s *server) model(c *gin.Context, id string) {
	for _, m := range s.modelInfos() {
		if m.ID == id {
			core.WriteJSON(c.Writer, http.StatusOK, m)
			return
		}
	}
	Fail(c, fmt.Errorf("the model %q does not exist: %w", id, engine.ErrUnknownModel))
}

// modelInfos lists the served models: a catalog's every model, else the
// backend's one (none while a gateway does not know it yet).
func (s *server) modelInfos() []modelInfo {
	created := s.Started().UTC().Format(time.RFC3339)
	info := func(id string, ctx int) modelInfo {
		return modelInfo{Type: "model", ID: id, DisplayName: id, CreatedAt: created, MaxInputTokens: ctx, MaxTokens: ctx}
	}
	out := []modelInfo{}
	if cat, ok := s.Backend().(core.Catalog); ok {
		for _, m := range cat.Models() {
			out = append(out, info(m.Name, m.Info.ContextSlot))
		}
	} else if i := s.Backend().Info(); i.Model != "" {
		out = append(out, info(i.Model, i.ContextSlot))
	}
	return out
}
