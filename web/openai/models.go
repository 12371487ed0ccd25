package openai

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// models serves GET /v1/models: the one model the backend serves, or none
// while it does not know its model yet (a gateway whose backends were
// never reached): an empty id is no model a client could name.
func (s *server) models(c *gin.Context) {
	core.WriteJSON(c.Writer, http.StatusOK, modelList{Object: objectList, Data: s.modelObjects()})
}

// model serves GET /v1/models/{model}: the model object of a served model
// (ids may hold slashes), 404 model_not_found for any other.
func (s *server) model(c *gin.Context) {
	id := strings.TrimPrefix(c.Param("model"), "/")
	if id == "" { // "/v1/models/" is no route, as everywhere: no redirect
		core.Fail(c, fmt.Errorf("%w: %s %s", core.ErrUnknownRoute, c.Request.Method, c.Request.URL.Path))
		return
	}
	for _, m := range s.modelObjects() {
		if m.ID == id {
			core.WriteJSON(c.Writer, http.StatusOK, m)
			return
		}
	}
	core.Fail(c, fmt.Errorf("the model %q does not exist: %w", id, engine.ErrUnknownModel))
}

// modelObjects lists the served models: a catalog's every model, else the
// backend's one.
func (s *server) modelObjects() []modelObject {
	out := []modelObject{}
	if cat, ok := s.Backend().(core.Catalog); ok {
		for _, m := range cat.Models() {
			out = append(out, modelObject{ID: m.Name, Object: objectModel, Created: s.Started().Unix(), OwnedBy: "kvwin"})
		}
	} else if model := s.Backend().Info().Model; model != "" {
		out = append(out, modelObject{ID: model, Object: objectModel, Created: s.Started().Unix(), OwnedBy: "kvwin"})
	}
	return out
}
