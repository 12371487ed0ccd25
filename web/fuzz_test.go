package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/web/core"
)

// Fuzz targets for request decoding, one per API, through the real handler:
// whatever the body, the answer is a 200 or a client error with an
// OpenAI-shaped (or, on node routes, llama-server-shaped) body, never a
// panic (the recovery middleware's 500) and never a request the backend
// contract forbids. CI runs each for 30 s (.ci/fuzz).

// fuzzBackend serves every request with "ok" (enginetest's fake, which
// keeps no record of the fuzzer's millions of requests) and fails (500)
// any request the engine contract forbids, so the fuzzer reports it. It
// tokenizes in enginetest's byte-level vocabulary.
type fuzzBackend struct {
	*enginetest.Backend
	enginetest.Tokens
	embeds enginetest.Embeds
}

var (
	_ engine.Backend   = fuzzBackend{}
	_ engine.Tokenizer = fuzzBackend{}
	_ engine.Embedder  = fuzzBackend{}
)

var errContract = errors.New("the web layer passed a request the engine contract forbids")

// newFuzzBackend returns the fuzz targets' backend.
func newFuzzBackend() fuzzBackend {
	t := engine.Timings{PromptTokens: 3, GeneratedTokens: 1}
	b := enginetest.New(engine.Info{Name: "fuzz", Model: "tiny", ContextSlot: 512, Slots: 2}).
		Script(engine.FinishStop, t, engine.Event{First: true, Text: "ok", Timings: t})
	b.Result.Tokens, b.NoRecord = []int{'o'}, true
	return fuzzBackend{b, enginetest.Tokens{B: b}, enginetest.Embeds{B: b, Width: 2}}
}

func (f fuzzBackend) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	switch {
	case req.CheckPrompt() != nil:
		return engine.Result{}, fmt.Errorf("%w: %v", errContract, req.CheckPrompt())
	case req.MaxTokens < 0 || req.MaxTokens > 512:
		return engine.Result{}, fmt.Errorf("%w: max tokens %d", errContract, req.MaxTokens)
	case req.Slot < -1:
		return engine.Result{}, fmt.Errorf("%w: slot %d", errContract, req.Slot)
	}
	for _, m := range req.Messages {
		if !engine.ValidRole(m.Role) {
			return engine.Result{}, fmt.Errorf("%w: role %q", errContract, m.Role)
		}
	}
	return f.Backend.Generate(ctx, req, stream)
}

// Embed answers a unit vector per input, and fails any request the
// contract forbids: no inputs, an empty one, more than the web layer's cap.
func (f fuzzBackend) Embed(ctx context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	if len(req.Inputs) == 0 || len(req.Inputs) > core.MaxEmbedInputs {
		return engine.Embeddings{}, fmt.Errorf("%w: %d inputs", errContract, len(req.Inputs))
	}
	for i, in := range req.Inputs {
		if in == "" {
			return engine.Embeddings{}, fmt.Errorf("%w: input %d is empty", errContract, i)
		}
	}
	return f.embeds.Embed(ctx, req)
}

// fuzzRoute fuzzes the body of POST path, starting from seeds.
func fuzzRoute(f *testing.F, path string, node bool, seeds ...string) {
	fuzzWith(f, path, func(t *testing.T, body []byte, w *httptest.ResponseRecorder) {
		// A client error says what is wrong, in the route's error shape.
		var e struct {
			Error struct {
				Message string          `json:"message"`
				Type    string          `json:"type"`
				Code    json.RawMessage `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || len(e.Error.Code) == 0 {
			t.Fatalf("status %d without an error object for %q: %s", w.Code, body, w.Body.Bytes())
		}
		if !node && e.Error.Code[0] != '"' {
			t.Fatalf("OpenAI route answered a non-string code: %s", w.Body.Bytes())
		}
	}, seeds...)
}

// fuzzMaxItems is the fuzzed server's items per request: low, so that a
// small seed holds more (hugeItems' seeds reach the 400); seeds of
// thousands of items stall the fuzzer's minimizing.
const fuzzMaxItems = 64

// hugeItems returns n copies of item joined by commas: the many-item
// shapes of issue 45's probe, scaled to the fuzzed server's bounds.
func hugeItems(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// fuzzWith posts fuzzed bodies to path on a server over fuzzBackend: each
// must answer 200 or a client error (400, 404, 413) that checkError
// accepts; anything else (a 5xx, a panic) fails.
func fuzzWith(f *testing.F, path string, checkError func(t *testing.T, body []byte, w *httptest.ResponseRecorder), seeds ...string) {
	s, err := New(Config{MaxBodyBytes: 1 << 16, MaxItems: fuzzMaxItems}, newFuzzBackend(), nil)
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
			return
		case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge:
			checkError(t, body, w)
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body.Bytes())
		}
	})
}

func FuzzChatCompletionsRequest(f *testing.F) {
	fuzzRoute(f, "/v1/chat/completions", false,
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"a"}],"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":7,"stop":["x","y"],"prompt_cache_key":"c1","n":1}`,
		`{"messages":[{"role":"user","content":"\ud83d\ude00"}],"max_completion_tokens":4}`,
		`{"messages":[{"role":"tool","content":null}]}`,
		`{"messages":[{"role":"user","content":"a"}],"prompt_cache_key":"c\u0000","tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`,
		`{"messages":[{"role":"user","content":"a"}],"tool_choice":"bogus"}`,
	)
}

func FuzzCompletionsRequest(f *testing.F) {
	fuzzRoute(f, "/v1/completions", false,
		`{"prompt":"hello"}`,
		`{"prompt":["hello"],"max_tokens":4,"stream":true}`,
		`{"prompt":[1,2,3],"temperature":0,"stop":"\n"}`,
		`{"model":"tiny","prompt":"x","seed":-1,"echo":false}`,
	)
}

func FuzzNodeCompletionRequest(f *testing.F) {
	fuzzRoute(f, "/completion", true,
		`{"prompt":"hello","n_predict":4}`,
		`{"prompt":[1,2,3],"id_slot":1,"cache_prompt":true,"n_keep":-1,"stream":true,"timings_per_token":true}`,
		`{"prompt":"x","temperature":0.1,"top_k":1,"repeat_last_n":-1,"n_cache_reuse":256,"ignore_eos":true,"stop":["a"]}`,
	)
}

func FuzzNodeTokenizeRequest(f *testing.F) {
	fuzzRoute(f, "/tokenize", true,
		`{"content":"hello"}`,
		`{"content":"<|im_start|>","add_special":true,"parse_special":false,"with_pieces":true}`,
	)
}

func FuzzNodeDetokenizeRequest(f *testing.F) {
	fuzzRoute(f, "/detokenize", true,
		`{"tokens":[104,105]}`,
		`{"tokens":[-1,300]}`,
	)
}

// fuzzOllamaRoute is fuzzRoute for an Ollama route, whose errors are
// {"error": "…"}.
func fuzzOllamaRoute(f *testing.F, path string, seeds ...string) {
	fuzzWith(f, path, func(t *testing.T, body []byte, w *httptest.ResponseRecorder) {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("status %d without Ollama's error object for %q: %s", w.Code, body, w.Body.Bytes())
		}
	}, seeds...)
}

func FuzzOllamaChatRequest(f *testing.F) {
	fuzzOllamaRoute(f, "/api/chat",
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"tiny:latest","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":4,"temperature":0,"seed":1,"stop":["x"]}}`,
		`{"model":"tiny","messages":[],"keep_alive":"5m","options":{"num_ctx":99999999,"top_k":-3}}`,
	)
}

func FuzzOllamaGenerateRequest(f *testing.F) {
	fuzzOllamaRoute(f, "/api/generate",
		`{"model":"tiny","prompt":"hello"}`,
		`{"model":"tiny","prompt":"hi","raw":true,"stream":false,"options":{"num_predict":2}}`,
		`{"model":"tiny","prompt":"hi","system":"s","template":"{{ .System }} {{ .Prompt }}"}`,
		`{"model":"tiny","prompt":"hi","template":"{{ range }}"}`,
	)
}

func FuzzOllamaEmbedRequest(f *testing.F) {
	fuzzOllamaRoute(f, "/api/embed",
		`{"model":"tiny","input":"hello"}`,
		`{"model":"tiny:latest","input":["a","b"],"truncate":false,"keep_alive":"5m","options":{"num_ctx":8}}`,
		`{"model":"tiny","input":""}`,
		`{"model":"tiny","input":[1,2]}`,
	)
}
