package web

import (
	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/catalog"
)

// Catalog is a backend serving several models under their names (kvwin
// serve --config with models:). The server asks it for each request's
// model; its own Generate serves the first model and requests that name
// one. Both methods are safe for concurrent use and do not block on a load.
type Catalog interface {
	engine.Backend
	// Select returns the backend serving model ("" is the first
	// configured), or an error wrapping engine.ErrUnknownModel.
	Select(model string) (engine.Backend, error)
	// Models lists the configured models in configuration order.
	Models() []ModelStatus
}

// States of a model in a Catalog (engine/catalog's).
const (
	ModelIdle    = catalog.Idle
	ModelLoading = catalog.Loading
	ModelLoaded  = catalog.Loaded
	ModelRemote  = catalog.Remote
	ModelFailed  = catalog.Failed
)

// ModelStatus is one model of a Catalog as operators see it.
type ModelStatus = catalog.Status

// ctxBackend is the gin context key of the backend serving a request.
const ctxBackend = "kvwin.backend"

// selectBackend finds the backend serving the model a request names, and
// records it for the rest of the turn (backendOf). A server over one
// backend serves every name through it (the backend checks the name).
func (s *Server) selectBackend(c *gin.Context, model string) (engine.Backend, engine.Info, error) {
	b := s.backend
	if cat, ok := s.backend.(Catalog); ok {
		sel, err := cat.Select(model)
		if err != nil {
			return nil, engine.Info{}, err
		}
		b = sel
	}
	c.Set(ctxBackend, b)
	return b, b.Info(), nil
}

// backendOf is the backend selectBackend chose for this request, or the
// server's own.
func (s *Server) backendOf(c *gin.Context) engine.Backend {
	if b, ok := c.Get(ctxBackend); ok {
		return b.(engine.Backend)
	}
	return s.backend
}

// ModelWindows is a Windower that keeps one window per model (each with
// its budget): For returns the one of model.
type ModelWindows interface {
	Windower
	For(model string) Windower
}
