package core

import (
	"time"

	"kvwin/engine"
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

// States of a model in a Catalog.
const (
	ModelIdle    = "idle"    // configured, not loaded: the first request loads it
	ModelLoading = "loading" // requests wait for it
	ModelLoaded  = "loaded"
	ModelRemote  = "remote" // served by remote backends, always available
	ModelFailed  = "failed" // its last load failed; the next request tries again
)

// ModelStatus is one model of a Catalog as operators see it.
type ModelStatus struct {
	Name      string      `json:"name"`
	State     string      `json:"state"`
	Info      engine.Info `json:"info"`
	Source    string      `json:"source"`               // the GGUF file, or the backends' URLs
	InFlight  int         `json:"in_flight"`            // generations running
	LastUsed  time.Time   `json:"last_used,omitzero"`   // zero: never used
	ExpiresAt time.Time   `json:"expires_at,omitzero"`  // when an idle TTL unloads it; zero: never
	LoadedAt  time.Time   `json:"loaded_at,omitzero"`   // zero: not loaded
	LastError string      `json:"last_error,omitempty"` // of the last failed load
}
