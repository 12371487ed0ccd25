package llamacpp

import (
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
)

// TestConformance runs the engine.Backend conformance suite on the real
// engine with the test model.
func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Backend {
		return newTestEngine(t, Config{Slots: 2, Ctx: 512})
	}, enginetest.Options{Caches: true})
}
