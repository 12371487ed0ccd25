package core

import (
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

// ModelStatus is one model of a Catalog as operators see it; its states
// are engine/catalog's (catalog.Idle…).
type ModelStatus = catalog.Status
