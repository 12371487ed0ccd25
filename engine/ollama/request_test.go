package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// TestRequestJSON: the exact body Ollama receives for each kind of request:
// num_ctx with headroom (the prompt's byte bound plus the answer, a power
// of two, at least MinContext, capped by the model's 8192), num_keep,
// num_predict, keep_alive, the sampling options and extra options.
func TestRequestJSON(t *testing.T) {
	long := strings.Repeat("S", 6000)
	tests := []struct {
		name string
		cfg  Config
		req  engine.Request
		path string
		want string
	}{
		{
			// text: 22 + 8 + 11 = 41 bytes; bound 41 + 16 + 2×16 = 89;
			// num_keep: the system message, 2+6+14+16, plus 16.
			name: "chat with a system prompt and max tokens",
			req: engine.Request{Messages: []engine.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Hi"}},
				MaxTokens: 64, Sampling: engine.DefaultSampling(), Slot: -1},
			path: "/api/chat",
			want: `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}],
				"stream":true,"keep_alive":"30m0s","options":{"num_ctx":4096,"num_keep":54,"num_predict":64,"seed":-1,
				"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,"repeat_penalty":1,"repeat_last_n":64}}`,
		},
		{
			// text 28 bytes, bound 60; no max tokens: the room left, 4096 − 60.
			name: "no max tokens, keep all, stop strings, a seed, extra options, keep-alive forever",
			cfg:  Config{KeepAlive: -1, Options: map[string]any{"num_thread": 1}},
			req: engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hello there"}}, Keep: -1, Stop: []string{"\n\n"},
				Sampling: engine.Sampling{Temperature: 0, TopK: 0, TopP: 1, MinP: 0, RepeatPenalty: 1.1, RepeatLastN: 32, Seed: 7}, Slot: -1},
			path: "/api/chat",
			want: `{"model":"m","messages":[{"role":"user","content":"Hello there"}],"stream":true,"keep_alive":-1,
				"options":{"num_thread":1,"num_ctx":4096,"num_keep":-1,"num_predict":4036,"seed":7,"temperature":0,"top_k":0,
				"top_p":1,"min_p":0,"repeat_penalty":1.1,"repeat_last_n":32,"stop":["\n\n"]}}`,
		},
		{
			// text 6008 + 106 + 11 = 6125 bytes, bound 6173, + 100 → 8192.
			name: "a long prompt: the next power of two",
			req: engine.Request{Messages: []engine.Message{{Role: "system", Content: long}, {Role: "user", Content: strings.Repeat("U", 100)}},
				MaxTokens: 100, Sampling: engine.DefaultSampling(), Slot: -1},
			path: "/api/chat",
			want: fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],
				"stream":true,"keep_alive":"30m0s","options":{"num_ctx":8192,"num_keep":6040,"num_predict":100,"seed":-1,
				"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,"repeat_penalty":1,"repeat_last_n":64}}`, long, strings.Repeat("U", 100)),
		},
		{
			// Pinned at 16384, capped by the model's 8192; text 19, bound 51.
			name: "pinned context capped by the model's",
			cfg:  Config{ContextLength: 16384, KeepAlive: time.Hour},
			req:  engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Sampling: engine.DefaultSampling(), Slot: -1},
			path: "/api/chat",
			want: `{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"keep_alive":"1h0m0s",
				"options":{"num_ctx":8192,"num_keep":4,"num_predict":8141,"seed":-1,"temperature":0.8,"top_k":40,"top_p":0.95,
				"min_p":0.05,"repeat_penalty":1,"repeat_last_n":64}}`,
		},
		{
			name: "a text prompt: raw generate",
			req:  engine.Request{Prompt: "<|im_start|>user\nHi", MaxTokens: 8, Sampling: engine.DefaultSampling(), Slot: -1},
			path: "/api/generate",
			want: `{"model":"m","prompt":"<|im_start|>user\nHi","suffix":"","system":"","template":"","stream":true,"raw":true,
				"keep_alive":"30m0s","options":{"num_ctx":4096,"num_keep":4,"num_predict":8,"seed":-1,"temperature":0.8,
				"top_k":40,"top_p":0.95,"min_p":0.05,"repeat_penalty":1,"repeat_last_n":64}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeOllama{})
			b := newBackend(t, f, tt.cfg)
			if _, err := b.Generate(context.Background(), tt.req, nil); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			calls := f.requests(tt.path)
			if len(calls) != 1 {
				t.Fatalf("%d requests to %s, want 1", len(calls), tt.path)
			}
			assertJSON(t, calls[0].body, tt.want)
		})
	}
}

// assertJSON fails unless got and want are the same JSON value.
func assertJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("the request is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the expected JSON is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Errorf("request body\n got: %s\nwant: %s", gb, wb)
	}
}

// TestSize: num_ctx sized per request grows in powers of two, never
// shrinks, and is capped by the model; pinned, it is fixed.
func TestSize(t *testing.T) {
	type step struct {
		upper, maxTokens int
		model            int // the model's context if not the test's
		want             int
		grew             bool
	}
	tests := []struct {
		name     string
		cfg      Config
		modelCtx int
		steps    []step
	}{
		{
			name: "the floor, then growth, then no shrinking", modelCtx: 32768,
			steps: []step{
				{upper: 100, maxTokens: 64, want: 4096},
				{upper: 3000, maxTokens: 1000, want: 4096}, // 4000 fits
				{upper: 3000, maxTokens: 1200, want: 8192, grew: true},
				{upper: 100, maxTokens: 64, want: 8192},               // sticky
				{upper: 20000, maxTokens: 0, want: 32768, grew: true}, // + AnswerTokens, 21024 → 32768
			},
		},
		{
			name: "capped by the model", modelCtx: 6000,
			steps: []step{
				{upper: 100, maxTokens: 64, want: 4096},
				{upper: 5000, maxTokens: 64, want: 6000, grew: true},
				{upper: 9000, maxTokens: 64, want: 6000},
				{upper: 100, maxTokens: 64, model: 4096, want: 4096}, // re-created smaller
			},
		},
		{
			name: "a floor above the model", cfg: Config{MinContext: 8192}, modelCtx: 2048,
			steps: []step{{upper: 10, maxTokens: 10, want: 2048}},
		},
		{
			name: "pinned", cfg: Config{ContextLength: 16384}, modelCtx: 32768,
			steps: []step{
				{upper: 100, maxTokens: 64, want: 16384},
				{upper: 30000, maxTokens: 64, want: 16384},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.BaseURL, cfg.Model = "http://127.0.0.1:1", "m"
			b, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				model := tt.modelCtx
				if s.model != 0 {
					model = s.model
				}
				got, grew := b.size(engine.Request{MaxTokens: s.maxTokens}, s.upper, model)
				if got != s.want || grew != s.grew {
					t.Errorf("step %d (bound %d, max tokens %d): num_ctx %d grew %v, want %d grew %v",
						i, s.upper, s.maxTokens, got, grew, s.want, s.grew)
				}
			}
		})
	}
}

// TestBounds: the token bounds behind num_ctx and num_keep.
func TestBounds(t *testing.T) {
	sys := engine.Message{Role: "system", Content: "Be brief."}
	user := engine.Message{Role: "user", Content: "Hello"}
	tests := []struct {
		name        string
		req         engine.Request
		modelSystem string
		upper, keep int
	}{
		// text: 1+6+1+9 + 1+4+1+5 + 11 = 39
		{name: "system and user", req: engine.Request{Messages: []engine.Message{sys, user}}, upper: 39 + 16 + 32, keep: 17 + 16 + 16},
		// The Modelfile's system prompt goes first when the chat has none.
		{name: "a Modelfile system prompt", req: engine.Request{Messages: []engine.Message{user}}, modelSystem: "Be kind.",
			upper: 22 + 16 + 16 + 8 + 16, keep: 0},
		{name: "a Modelfile system prompt overridden", req: engine.Request{Messages: []engine.Message{sys, user}}, modelSystem: "Be kind.",
			upper: 39 + 16 + 32, keep: 17 + 16 + 16},
		{name: "raw", req: engine.Request{Prompt: "abc"}, upper: 4 + 16, keep: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := render(tt.req)
			if got := upperTokens(tt.req, text, tt.modelSystem); got != tt.upper {
				t.Errorf("upperTokens = %d, want %d", got, tt.upper)
			}
			if got := systemTokens(tt.req); got != tt.keep {
				t.Errorf("systemTokens = %d, want %d", got, tt.keep)
			}
		})
	}
}

// TestRejectedBeforeSending: what Ollama cannot do is refused with
// engine.ErrInvalidRequest (or ErrUnknownModel) and never sent.
func TestRejectedBeforeSending(t *testing.T) {
	hi := []engine.Message{{Role: "user", Content: "Hi"}}
	tests := []struct {
		name     string
		req      engine.Request
		sentinel error
		message  string
	}{
		{name: "token ids", req: engine.Request{Tokens: []int{1, 2, 3}}, sentinel: engine.ErrInvalidRequest, message: "token ids cannot be sent to Ollama"},
		{name: "no prompt", req: engine.Request{}, sentinel: engine.ErrInvalidRequest, message: "exactly one of"},
		{name: "two prompts", req: engine.Request{Messages: hi, Prompt: "x"}, sentinel: engine.ErrInvalidRequest, message: "exactly one of"},
		{name: "unknown role", req: engine.Request{Messages: []engine.Message{{Role: "wizard", Content: "x"}}}, sentinel: engine.ErrInvalidRequest, message: `unknown role "wizard"`},
		{name: "ignore EOS", req: engine.Request{Messages: hi, IgnoreEOS: true}, sentinel: engine.ErrInvalidRequest, message: "ignore_eos"},
		{name: "no cache", req: engine.Request{Messages: hi, NoCache: true}, sentinel: engine.ErrInvalidRequest, message: "prompt cache"},
		{name: "max tokens past the context", req: engine.Request{Messages: hi, MaxTokens: 8193}, sentinel: engine.ErrInvalidRequest, message: "outside 0..8192"},
		{name: "keep below -1", req: engine.Request{Messages: hi, Keep: -2}, sentinel: engine.ErrInvalidRequest, message: "keep -2"},
		{name: "another model", req: engine.Request{Model: "other", Messages: hi}, sentinel: engine.ErrUnknownModel, message: `"other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeOllama{})
			b := newBackend(t, f, Config{})
			_, err := b.Generate(context.Background(), tt.req, nil)
			if !errors.Is(err, tt.sentinel) || !strings.Contains(fmt.Sprint(err), tt.message) {
				t.Fatalf("error %v, want %v containing %q", err, tt.sentinel, tt.message)
			}
			if n := len(f.requests("/api/chat")) + len(f.requests("/api/generate")); n != 0 {
				t.Errorf("%d generation requests sent, want none", n)
			}
		})
	}
}

// TestModelNames: a request may name the model with or without Ollama's
// default tag.
func TestModelNames(t *testing.T) {
	tests := []struct {
		configured, requested string
		same                  bool
	}{
		{"llama3.1", "llama3.1:latest", true},
		{"llama3.1:latest", "llama3.1", true},
		{"llama3.1:8b", "llama3.1", false},
		{"registry.local:5000/team/m", "registry.local:5000/team/m:latest", true},
		{"m", "n", false},
	}
	for _, tt := range tests {
		if got := sameModel(tt.configured, tt.requested); got != tt.same {
			t.Errorf("sameModel(%q, %q) = %v, want %v", tt.configured, tt.requested, got, tt.same)
		}
	}
}
