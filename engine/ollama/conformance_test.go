//go:build linux

package ollama

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/engine/ollama/ollamatest"
)

// TestConformance runs the engine.Backend conformance suite on the adapter
// against a real `ollama serve` (ollamatest: skipped without the binary,
// unless CI is set) on the generated test model, one adapter per subtest.
func TestConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := ollamatest.Start(t, ctx)
	backend := func(t *testing.T, url string) engine.Backend {
		b, err := New(Config{BaseURL: url, Model: tinyModel, Slots: 1, ContextLength: 2048, Options: map[string]any{"num_thread": 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	// Ollama cannot ignore end-of-generation: the requests stop at it or
	// at MaxTokens. The prompt is long enough for whole 64-byte blocks,
	// the unit of the adapter's reuse estimate (reuse.go).
	s := engine.DefaultSampling()
	s.Temperature, s.Seed = 0, 42
	msg := strings.Repeat("Tell me about the cache, the window and the slots. ", 6)
	req := engine.Request{Messages: []engine.Message{{Role: engine.RoleUser, Content: msg}}, MaxTokens: 8, Sampling: s, Slot: -1}
	// The request cancelled mid-stream is bounded all the same: twice a
	// server went on for minutes after an unbounded one was abandoned,
	// answering nothing else meanwhile.
	long := req
	long.MaxTokens = 256
	enginetest.Run(t, func(t *testing.T) engine.Backend { return backend(t, base) }, enginetest.Options{
		Request: req, Long: long, Caches: true,
		// The first event carries the adapter's estimates; Ollama counts
		// the prompt only in its last chunk (backend.go).
		EstimatedFirst: true,
		// num_ctx is pinned, so a prompt longer than the context is one
		// Ollama cuts; the adapter learns it from the final count.
		LateContextLength: true,
		Unreachable: func(t *testing.T) engine.Backend {
			gone := httptest.NewServer(nil)
			gone.Close()
			return backend(t, gone.URL)
		},
	})
}
