package web

import (
	"kvwin/engine"
	"kvwin/web/core"
)

// SelectBackend finds the backend serving the model a request names and
// records it in t for the rest of the turn. A server over one backend
// serves every name through it (the backend checks the name).
func (s *Server) SelectBackend(t *core.Turn, model string) (engine.Backend, engine.Info, error) {
	b := s.backend
	if cat, ok := s.backend.(Catalog); ok {
		sel, err := cat.Select(model)
		if err != nil {
			return nil, engine.Info{}, err
		}
		b = sel
	}
	t.Backend, t.Info = b, b.Info()
	return t.Backend, t.Info, nil
}

// ModelWindows is a Windower that keeps one window per model (each with
// its budget): For returns the one of model.
type ModelWindows interface {
	Windower
	For(model string) Windower
}

// Catalog is a backend serving several models under their names
// (core.Catalog).
type Catalog = core.Catalog

// ModelStatus is one model of a Catalog as operators see it
// (core.ModelStatus).
type ModelStatus = core.ModelStatus
