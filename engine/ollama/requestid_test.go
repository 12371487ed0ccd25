package ollama

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"kvwin/engine"
	"kvwin/engine/wire"
)

// A generation sends the request id of its context to Ollama, so a proxy's
// or Ollama's own lines can be matched with the gateway's; without one it
// sends no header.
func TestGenerateSendsRequestID(t *testing.T) {
	var mu sync.Mutex
	var got []string
	f := &fakeOllama{}
	f.chat = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(wire.HeaderRequestID))
		mu.Unlock()
		f.serveStream("message")(w, r)
	}
	startFake(t, f)
	b := newBackend(t, f, Config{})
	req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, MaxTokens: 8, Slot: -1}
	for _, ctx := range []context.Context{wire.WithRequestID(context.Background(), "turn-7"), context.Background()} {
		var rec recorder
		if _, err := b.Generate(ctx, req, rec.add); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"turn-7", ""}; !slices.Equal(got, want) {
		t.Fatalf("X-Request-Id sent: %q, want %q", got, want)
	}
}
