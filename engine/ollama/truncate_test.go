package ollama

import (
	"context"
	"errors"
	"testing"

	"kvwin/engine"
)

// TestACutPromptIsAContextLengthError: Ollama's runner cuts a prompt
// longer than num_ctx to exactly num_ctx tokens and answers the rest, so a
// final prompt_eval_count of num_ctx (or more) means the answer is not to
// the prompt sent: a *engine.ContextLengthError at the limit sent, after
// the events already streamed. One token less is an answer.
func TestACutPromptIsAContextLengthError(t *testing.T) {
	const numCtx = 2048
	for _, tt := range []struct {
		name   string
		count  int
		cutOff bool
	}{
		{"cut to num_ctx", numCtx, true},
		{"one token of room", numCtx - 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeOllama{promptEval: func([]byte) int { return tt.count }})
			b := newBackend(t, f, Config{ContextLength: numCtx})
			rec := &recorder{}
			res, err := b.Generate(context.Background(), engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Slot: -1}, rec.add)
			var cl *engine.ContextLengthError
			if got := errors.As(err, &cl); got != tt.cutOff {
				t.Fatalf("prompt_eval_count %d of num_ctx %d: result %+v, error %v; want a ContextLengthError: %v", tt.count, numCtx, res, err, tt.cutOff)
			}
			if tt.cutOff && (cl.Limit != numCtx || cl.PromptTokens < numCtx) {
				t.Errorf("%+v: want limit %d and at least as many prompt tokens", cl, numCtx)
			}
			if len(rec.events) != 2 {
				t.Errorf("%d events streamed, want the fake's 2", len(rec.events))
			}
		})
	}
}
