package ollama

import (
	"context"
	"errors"
	"testing"

	"kvwin/engine"
)

// Ollama v0.9.6 has no log-probabilities: a request for them is refused
// with engine.ErrNoLogprobs before any call to the server (so a router
// moves on at once), chat and raw prompt alike, and the prompt text a
// gateway keys is unaffected.
func TestLogprobsRefusedBeforeAnyCall(t *testing.T) {
	f := startFake(t, &fakeOllama{})
	b := newBackend(t, f, Config{})
	for _, req := range []engine.Request{
		{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Slot: -1, Logprobs: true},
		{Prompt: "Hi", Slot: -1, Logprobs: true, TopLogprobs: 3},
	} {
		_, err := b.Generate(context.Background(), req, nil)
		if !errors.Is(err, engine.ErrNoLogprobs) || errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("err %v, want ErrNoLogprobs", err)
		}
		if _, err := b.PromptText(req); err != nil {
			t.Fatalf("PromptText: %v", err)
		}
	}
	if n := len(f.requests("/api/show")) + len(f.requests("/api/chat")) + len(f.requests("/api/generate")); n != 0 {
		t.Fatalf("%d calls to the server", n)
	}
	// Without logprobs the same request is served.
	if _, err := b.Generate(context.Background(), engine.Request{Prompt: "Hi", Slot: -1}, nil); err != nil || len(f.requests("/api/generate")) != 1 {
		t.Fatalf("without logprobs: %v, %d calls", err, len(f.requests("/api/generate")))
	}
}
