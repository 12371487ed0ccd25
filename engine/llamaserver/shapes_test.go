package llamaserver

import (
	"context"
	"net/http"
	"testing"

	"kvwin/engine"
)

// TestReuseShapes: every way a server has said how much of the prompt it
// reused is read exactly, in the first event (the response headers) and
// in the result; a server that says nothing leaves the counts to the
// router.
func TestReuseShapes(t *testing.T) {
	tests := []struct {
		name                     string
		answer                   string
		prompt                   int // tokens sent
		firstPrompt, firstCached int
		prompt2, cached          int // the result's
	}{
		{"timings.cache_n (newer servers, kvwin nodes)", "completion_stream.sse", 248, 248, 236, 248, 236},
		// June 2025: no cache_n; 1091 evaluated, 90 computed.
		{"tokens_evaluated less timings.prompt_n (older servers)", "completion_stream_nocachen.sse", 1091, 1091, 1001, 1091, 1001},
		// Nothing in the partial; OpenAI usage in the final object.
		{"usage.prompt_tokens_details.cached_tokens", "completion_stream_usage.sse", 50, 50, 0, 50, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{completion: func(w http.ResponseWriter, r *http.Request) { serveStream(w, tt.answer) }})
			b := f.backend(t, Config{})
			var first engine.Timings
			res, err := b.Generate(context.Background(), engine.Request{Tokens: make([]int, tt.prompt), Slot: -1}, func(ev engine.Event) error {
				if ev.First {
					first = ev.Timings
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if first.PromptTokens != tt.firstPrompt || first.CachedTokens != tt.firstCached {
				t.Errorf("first event: %d prompt, %d cached; want %d, %d", first.PromptTokens, first.CachedTokens, tt.firstPrompt, tt.firstCached)
			}
			if got := res.Timings; got.PromptTokens != tt.prompt2 || got.CachedTokens != tt.cached {
				t.Errorf("result: %d prompt, %d cached; want %d, %d", got.PromptTokens, got.CachedTokens, tt.prompt2, tt.cached)
			}
		})
	}
}
