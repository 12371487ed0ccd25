package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/engine/catalog"
	"kvwin/engine/enginetest"
	"kvwin/engine/llamaserver"
	"kvwin/kvcache"
)

// tokFake is a fakeBackend with the abilities the node routes look for:
// enginetest's byte-level vocabulary (enginetest.Encode), slots and a
// ChatML template. It has engine.Tokenizer's one flag, as the embedded
// engine does.
type tokFake struct {
	*fakeBackend
	enginetest.Tokens
	enginetest.SlotList
	enginetest.Template
}

var (
	_ engine.Tokenizer     = tokFake{}
	_ engine.SlotReporter  = tokFake{}
	_ engine.ChatTemplater = tokFake{}
)

// newTokFake gives f tokFake's abilities.
func newTokFake(f *fakeBackend) tokFake {
	return tokFake{f, enginetest.Tokens{B: f},
		enginetest.SlotList{B: f, List: []engine.SlotState{{ID: 0, Context: 512, Processing: true, Tokens: 300}, {ID: 1, Context: 512}}},
		enginetest.Template{B: f}}
}

// chatMLTemplate is the chat template tokFake reports.
const chatMLTemplate = enginetest.ChatMLTemplate

// fakeEncode is tokFake's tokenizer: with special, BOS (1) first and the
// ChatML markers as 2 and 3; every other byte b is 100+b.
func fakeEncode(text string, special bool) []int { return enginetest.Encode(text, special) }

// splitFake also tokenizes with the two flags apart, recording them.
type splitFake struct {
	tokFake
	enginetest.SpecialTokens
}

var _ engine.SpecialTokenizer = splitFake{}

// startNode serves backend b (built around f) with the node routes.
func startNode(t *testing.T, f *fakeBackend, b engine.Backend) *httptest.Server {
	t.Helper()
	s, err := New(Config{}, b, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() { f.Release() })
	return ts
}

// nodeScript makes f generate "Hello world" from a 12-token prompt with 8
// reused, on slot 1.
func nodeScript(f *fakeBackend) *fakeBackend {
	first := engine.Event{First: true, Slot: 1, Timings: engine.Timings{PromptTokens: 12, CachedTokens: 8, PromptEval: 20 * time.Millisecond}}
	f.Script(engine.FinishStop, engine.Timings{PromptTokens: 12, CachedTokens: 8, PromptEval: 20 * time.Millisecond,
		GeneratedTokens: 2, Decode: 10 * time.Millisecond}, first, textEvent("Hello"), textEvent(" world"))
	f.Result.Slot, f.Result.Tokens = 1, []int{7, 8}
	f.Result.Journal = kvcache.Cursor{Epoch: "00c0ffee00c0ffee", After: 42} // where the node's journal stood at the end
	return f
}

// nodeFinalBody is the final object of nodeScript's generation.
func nodeFinalBody(content string) string {
	return `{"index":0,"content":"` + content + `","tokens":[7,8],"id_slot":1,"stop":true,"model":"tiny",` +
		`"tokens_predicted":2,"tokens_evaluated":12,"has_new_line":false,"truncated":false,"stop_type":"eos",` +
		`"stopping_word":"","tokens_cached":14,"timings":{"cache_n":8,"prompt_n":4,"prompt_ms":20,` +
		`"prompt_per_token_ms":5,"prompt_per_second":200,"predicted_n":2,"predicted_ms":10,` +
		`"predicted_per_token_ms":5,"predicted_per_second":200},"kvwin_journal":{"epoch":"00c0ffee00c0ffee","seq":42}}`
}

// nodePartialBody is a streamed partial of nodeScript's generation.
func nodePartialBody(content string, predicted int) string {
	return `{"index":0,"content":"` + content + `","tokens":[],"stop":false,"id_slot":1,` +
		`"tokens_predicted":` + strconv.Itoa(predicted) + `,"tokens_evaluated":12}`
}

// TestNodeCompletion checks /completion's request translation and its
// answers byte for byte, streamed and not.
func TestNodeCompletion(t *testing.T) {
	sampling := engine.Sampling{Temperature: 0, TopK: 1, TopP: 1, MinP: 0, RepeatPenalty: 1.1, RepeatLastN: 512, Seed: 7}
	tests := []struct {
		name    string
		body    string
		want    engine.Request
		ctype   string
		answer  string
		headers bool
	}{
		{
			name: "token ids, every field, not streamed",
			body: `{"prompt":[1,2,3],"id_slot":1,"cache_prompt":false,"n_keep":4,"n_predict":16,"n_cache_reuse":256,` +
				`"temperature":0,"top_k":1,"top_p":1,"min_p":0,"seed":7,"repeat_penalty":1.1,"repeat_last_n":-1,"stop":["\n\n"],"ignore_eos":true}`,
			want: engine.Request{Model: "tiny", Tokens: []int{1, 2, 3}, MaxTokens: 16, Sampling: sampling,
				Stop: []string{"\n\n"}, Slot: 1, Keep: 4, NoCache: true, IgnoreEOS: true, Shift: true},
			ctype:  "application/json; charset=utf-8",
			answer: nodeFinalBody("Hello world") + "\n",
		},
		{
			name:  "text, defaults, streamed",
			body:  `{"prompt":"Hi","stream":true}`,
			want:  engine.Request{Model: "tiny", Prompt: "Hi", Sampling: engine.DefaultSampling(), Slot: -1},
			ctype: "text/event-stream",
			answer: sse(nodePartialBody("", 0)) + sse(nodePartialBody("Hello", 1)) + sse(nodePartialBody(" world", 2)) +
				sse(nodeFinalBody("")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := nodeScript(newFake())
			ts := startNode(t, f, f)
			resp, body := do(t, ts, http.MethodPost, "/completion", tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			want := tt.want
			want.Tenant = DefaultTenant // a server without keys has one tenant
			if got := f.Requests(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Errorf("backend got %+v\nwant %+v", got, want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tt.ctype {
				t.Errorf("Content-Type %q, want %q", ct, tt.ctype)
			}
			if string(body) != tt.answer {
				t.Errorf("body\n got %s\nwant %s", body, tt.answer)
			}
			for h, want := range map[string]string{HeaderBackend: "fake-0", HeaderPromptTokens: "12", HeaderCachedTokens: "8"} {
				// Headers of a whole answer, trailers of a stream.
				if got := resp.Header.Get(h) + resp.Trailer.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

// TestNodeTimingsPerToken: with timings_per_token, every partial carries the
// timings, the first one already the prompt side.
func TestNodeTimingsPerToken(t *testing.T) {
	f := nodeScript(newFake())
	ts := startNode(t, f, f)
	_, body := do(t, ts, http.MethodPost, "/completion", `{"prompt":[1],"stream":true,"timings_per_token":true}`)
	chunks := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	if len(chunks) != 4 {
		t.Fatalf("%d chunks, want 4: %s", len(chunks), body)
	}
	for i, ch := range chunks[:3] {
		var p struct {
			Timings *struct {
				CacheN     int     `json:"cache_n"`
				PromptN    int     `json:"prompt_n"`
				PromptMS   float64 `json:"prompt_ms"`
				PredictedN int     `json:"predicted_n"`
			} `json:"timings"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ch, "data: ")), &p); err != nil || p.Timings == nil {
			t.Fatalf("partial %d: %s (%v)", i, ch, err)
		}
		if tm := *p.Timings; tm.CacheN != 8 || tm.PromptN != 4 || tm.PromptMS != 20 || tm.PredictedN != i {
			t.Errorf("partial %d timings %+v, want cache_n 8, prompt_n 4, prompt_ms 20, predicted_n %d", i, tm, i)
		}
	}
}

// TestNodeCompletionErrors: errors are llama-server's shape with the status
// classify gives; after the first partial, an error object ends the stream.
func TestNodeCompletionErrors(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		err      error
		errAfter error
		status   int
		want     string
	}{
		{"not JSON", `{`, nil, nil, 400, `{"error":{"code":400,"message":"request body is not valid JSON: unexpected end of JSON input (at byte 1)","type":"invalid_request_error"}}`},
		{"no prompt", `{}`, nil, nil, 400, `{"error":{"code":400,"message":"prompt is required","type":"invalid_request_error"}}`},
		{"n_predict 0", `{"prompt":"x","n_predict":0}`, nil, nil, 400, `{"error":{"code":400,"message":"n_predict 0 (evaluate the prompt only) is not supported","type":"invalid_request_error"}}`},
		{"id_slot -2", `{"prompt":"x","id_slot":-2}`, nil, nil, 400, `{"error":{"code":400,"message":"id_slot must be in [-1, 1] (-1: any slot), not -2","type":"invalid_request_error"}}`},
		{"prompt too long", `{"prompt":"x"}`, &engine.ContextLengthError{PromptTokens: 600, Limit: 512}, nil, 400,
			`{"error":{"code":400,"message":"request (600 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":600,"n_ctx":512}}`},
		{"queue full, streamed", `{"prompt":"x","stream":true}`, engine.ErrQueueFull, nil, 429, `{"error":{"code":429,"message":"all slots are busy and the queue is full","type":"unavailable_error"}}`},
		{"closed", `{"prompt":"x"}`, engine.ErrClosed, nil, 503, `{"error":{"code":503,"message":"backend closed","type":"unavailable_error"}}`},
		{"error mid-stream", `{"prompt":"x","stream":true}`, nil, errors.New("llama_decode failed"), 200,
			sse(nodePartialBody("", 0)) + sse(nodePartialBody("Hello", 1)) + sse(nodePartialBody(" world", 2)) +
				sse(`{"error":{"code":500,"message":"llama_decode failed","type":"server_error"}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := nodeScript(newFake())
			f.Err, f.ErrAfter = tt.err, tt.errAfter
			ts := startNode(t, f, f)
			resp, body := do(t, ts, http.MethodPost, "/completion", tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			want := tt.want
			if tt.status != http.StatusOK {
				want += "\n" // a JSON answer, not a stream
			}
			if string(body) != want {
				t.Errorf("body\n got %s\nwant %s", body, want)
			}
		})
	}
}

func TestNodeTokenize(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{"defaults: parse, no BOS", `{"content":"<|im_end|>a"}`, `{"tokens":[3,197]}`},
		{"BOS and parse", `{"content":"<|im_end|>a","add_special":true,"parse_special":true}`, `{"tokens":[1,3,197]}`},
		{"BOS, no parse", `{"content":"<|im_end|>a","add_special":true,"parse_special":false}`,
			`{"tokens":[1,160,224,205,209,195,201,210,200,224,162,197]}`},
		{"plain", `{"content":"ab","add_special":false,"parse_special":false}`, `{"tokens":[197,198]}`},
		{"empty with BOS", `{"content":"","add_special":true}`, `{"tokens":[1]}`},
		{"empty", `{"content":""}`, `{"tokens":[]}`},
		{"pieces", `{"content":"<|im_end|>a","with_pieces":true}`, `{"tokens":[{"id":3,"piece":"<|im_end|>"},{"id":197,"piece":"a"}]}`},
		{"pieces of a split character", `{"content":"é","with_pieces":true}`, `{"tokens":[{"id":295,"piece":[195]},{"id":269,"piece":[169]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			ts := startNode(t, f, newTokFake(f))
			resp, body := do(t, ts, http.MethodPost, "/tokenize", tt.body)
			if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != tt.want {
				t.Errorf("%d %s, want %s", resp.StatusCode, body, tt.want)
			}
		})
	}

	// A backend that tokenizes with both flags gets them as sent.
	f := newFake()
	flags := &enginetest.FlagLog{}
	split := splitFake{newTokFake(f), enginetest.SpecialTokens{B: f, Flags: flags}}
	ts := startNode(t, f, split)
	for _, c := range []struct{ body, want string }{
		{`{"content":"ab"}`, `{"tokens":[197,198]}`},
		{`{"content":"ab","add_special":true,"parse_special":false}`, `{"tokens":[1,197,198]}`},
	} {
		if resp, got := do(t, ts, http.MethodPost, "/tokenize", c.body); strings.TrimSpace(string(got)) != c.want {
			t.Errorf("%s: %d %s, want %s", c.body, resp.StatusCode, got, c.want)
		}
	}
	if want := [][2]bool{{false, true}, {true, false}}; !reflect.DeepEqual(flags.All(), want) {
		t.Errorf("flags %v, want %v", flags.All(), want)
	}
}

// TestNodeRoutes checks the other node routes' answers byte for byte, with
// and without the backend abilities they need.
func TestNodeRoutes(t *testing.T) {
	tests := []struct {
		name         string
		abilities    bool
		method, path string
		body         string
		status       int
		want         string
	}{
		{"detokenize", true, "POST", "/detokenize", `{"tokens":[2,197,3]}`, 200, `{"content":"<|im_start|>a<|im_end|>"}`},
		{"detokenize nothing", true, "POST", "/detokenize", `{}`, 200, `{"content":""}`},
		{"detokenize a bad id", true, "POST", "/detokenize", `{"tokens":[9]}`, 400,
			`{"error":{"code":400,"message":"invalid request: tokens[0]: id 9 outside the vocabulary","type":"invalid_request_error"}}`},
		{"slots", true, "GET", "/slots", "", 200,
			`[{"id":0,"n_ctx":512,"is_processing":true,"n_tokens":300},{"id":1,"n_ctx":512,"is_processing":false,"n_tokens":0}]`},
		{"props", true, "GET", "/props", "", 200,
			`{"default_generation_settings":{"n_ctx":512},"total_slots":2,"model_alias":"tiny","model_path":"tiny","chat_template":` + jsonString(chatMLTemplate) + `,"kvwin_snapshots":false,"kvwin_tenants":false,"kvwin_shares_prefixes":false}`},
		{"health", true, "GET", "/health", "", 200, `{"status":"ok"}`},
		{"props without a template", false, "GET", "/props", "", 200,
			`{"default_generation_settings":{"n_ctx":512},"total_slots":2,"model_alias":"tiny","model_path":"tiny","chat_template":"","kvwin_snapshots":false,"kvwin_tenants":false,"kvwin_shares_prefixes":false}`},
		{"tokenize without a tokenizer", false, "POST", "/tokenize", `{"content":"a"}`, 501,
			`{"error":{"code":501,"message":"tokenize: not supported by this server's backend","type":"not_supported_error"}}`},
		{"detokenize without a tokenizer", false, "POST", "/detokenize", `{"tokens":[1]}`, 501,
			`{"error":{"code":501,"message":"detokenize: not supported by this server's backend","type":"not_supported_error"}}`},
		{"slots without slots", false, "GET", "/slots", "", 501,
			`{"error":{"code":501,"message":"slots: not supported by this server's backend","type":"not_supported_error"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			var b engine.Backend = f
			if tt.abilities {
				b = newTokFake(f)
			}
			ts := startNode(t, f, b)
			resp, body := do(t, ts, tt.method, tt.path, tt.body)
			if resp.StatusCode != tt.status || strings.TrimSpace(string(body)) != tt.want {
				t.Errorf("%d %s\nwant %d %s", resp.StatusCode, body, tt.status, tt.want)
			}
		})
	}
}

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(b.String())
}

// TestNodeRoundTrip: kvwin's llama-server adapter, fronting a kvwin node,
// sends what the node's backend gets and gets back what it generated.
func TestNodeRoundTrip(t *testing.T) {
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "Be brief."}, {Role: engine.RoleUser, Content: "Hi <|im_end|>"}}
	sampling := engine.Sampling{Temperature: 0.7, TopK: 20, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 42}
	req := engine.Request{Messages: msgs, MaxTokens: 32, Sampling: sampling, Stop: []string{"</s>"}, Slot: 1, Keep: 4, IgnoreEOS: true}
	// The ChatML rendering, the user's marker text kept as text.
	wantTokens := append(fakeEncode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>", true),
		fakeEncode("user\nHi <|im_end|>", false)...)
	wantTokens = append(wantTokens, fakeEncode("<|im_end|>\n<|im_start|>assistant\n", true)[1:]...)

	t.Run("generation", func(t *testing.T) {
		f := nodeScript(newFake())
		b := adapterFor(t, startNode(t, f, newTokFake(f)))
		var events []engine.Event
		res, err := b.Generate(context.Background(), req, func(ev engine.Event) error {
			ev.Timings.FirstToken = 0
			events = append(events, ev)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := f.Requests()
		want := req
		want.Messages, want.Tokens, want.Model = nil, wantTokens, "tiny"
		want.Tenant = DefaultTenant // a node without keys has one tenant
		if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Errorf("node backend got %+v\nwant %+v", got, want)
		}
		if res.Timings.FirstToken <= 0 {
			t.Errorf("FirstToken %v, want it measured", res.Timings.FirstToken)
		}
		res.Timings.FirstToken = 0
		wantRes := f.Result
		if !reflect.DeepEqual(res, wantRes) {
			t.Errorf("result %+v\nwant %+v", res, wantRes)
		}
		wantEvents := []engine.Event{
			{First: true, Slot: 1, Timings: engine.Timings{PromptTokens: 12, CachedTokens: 8, PromptEval: 20 * time.Millisecond}},
			{Text: "Hello", Slot: 1}, {Text: " world", Slot: 1},
		}
		if !reflect.DeepEqual(events, wantEvents) {
			t.Errorf("events %+v\nwant %+v", events, wantEvents)
		}
		if info := b.Info(); info != (engine.Info{Name: "node-1", Model: "tiny", ContextSlot: 512, Slots: 2}) {
			t.Errorf("Info %+v", info)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		f := newFake()
		b := adapterFor(t, startNode(t, f, newTokFake(f)))
		ctx := context.Background()
		if ids, err := b.Tokenize(ctx, "<|im_end|>a", true); err != nil || !reflect.DeepEqual(ids, []int{1, 3, 197}) {
			t.Errorf("Tokenize = %v, %v", ids, err)
		}
		if text, err := b.Detokenize(ctx, []int{2, 197}); err != nil || text != "<|im_start|>a" {
			t.Errorf("Detokenize = %q, %v", text, err)
		}
		if slots, err := b.FetchSlots(ctx); err != nil || !reflect.DeepEqual(slots, newTokFake(f).Slots()) {
			t.Errorf("FetchSlots = %+v, %v", slots, err)
		}
		if err := b.Health(ctx); err != nil {
			t.Errorf("Health: %v", err)
		}
	})

	errs := []struct {
		name     string
		err      error
		errAfter error
		want     error // a sentinel the adapter's error wraps; nil: none
		ctxLen   *engine.ContextLengthError
		events   int
	}{
		{"context length", &engine.ContextLengthError{PromptTokens: 600, Limit: 512}, nil, engine.ErrInvalidRequest, &engine.ContextLengthError{PromptTokens: 600, Limit: 512}, 0},
		{"queue full", engine.ErrQueueFull, nil, engine.ErrQueueFull, nil, 0},
		{"invalid", engine.Invalid("slot 1 is pinned"), nil, engine.ErrInvalidRequest, nil, 0},
		{"closed", engine.ErrClosed, nil, engine.ErrUnavailable, nil, 0},
		{"mid-stream", nil, errors.New("llama_decode failed"), nil, nil, 3},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			f := nodeScript(newFake())
			f.Err, f.ErrAfter = tt.err, tt.errAfter
			b := adapterFor(t, startNode(t, f, newTokFake(f)))
			events := 0
			_, err := b.Generate(context.Background(), req, func(engine.Event) error { events++; return nil })
			if err == nil {
				t.Fatal("Generate succeeded")
			}
			if events != tt.events {
				t.Errorf("%d events, want %d", events, tt.events)
			}
			var ctxLen *engine.ContextLengthError
			switch {
			case tt.ctxLen != nil:
				if !errors.As(err, &ctxLen) || *ctxLen != *tt.ctxLen {
					t.Errorf("err = %v, want %v", err, tt.ctxLen)
				}
			case tt.want != nil:
				if !errors.Is(err, tt.want) {
					t.Errorf("err = %v, want one wrapping %v", err, tt.want)
				}
			default:
				if errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "llama_decode failed") {
					t.Errorf("err = %v, want the node's mid-stream error", err)
				}
			}
		})
	}
}

// adapterFor returns a llama-server adapter for the node at ts.
func adapterFor(t *testing.T, ts *httptest.Server) *llamaserver.Backend {
	t.Helper()
	b, err := llamaserver.New(llamaserver.Config{BaseURL: ts.URL, Name: "node-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// twoModels is a Catalog of two models, a and b, each with its own
// vocabulary, slots and template, as a config with two models: serves.
type twoModels struct {
	*fakeBackend
	models map[string]engine.Backend
}

var _ Catalog = twoModels{}

func (m twoModels) Select(model string) (engine.Backend, error) {
	if model == "" {
		model = "a"
	}
	b, ok := m.models[model]
	if !ok {
		return nil, fmt.Errorf("the model %q is not configured: %w", model, engine.ErrUnknownModel)
	}
	return b, nil
}

func (m twoModels) Models() []ModelStatus {
	return []ModelStatus{{Name: "a", State: catalog.Loaded}, {Name: "b", State: catalog.Loaded}}
}

// modelB tokenizes as tokFake with every id shifted by 1000, and has one
// slot and a template of its own.
type modelB struct{ tokFake }

func (modelB) Tokenize(_ context.Context, text string, special bool) ([]int, error) {
	ids := fakeEncode(text, special)
	for i := range ids {
		ids[i] += 1000
	}
	return ids, nil
}

func (modelB) Slots() []engine.SlotState { return []engine.SlotState{{ID: 0, Context: 256, Tokens: 7}} }

func (m modelB) FetchSlots(context.Context) ([]engine.SlotState, error) { return m.Slots(), nil }

func (modelB) ChatTemplate() string { return "b-template" }

// TestNodeRoutesServeTheNamedModel: with several models, each node route
// answers for the model it names ("model" in the body, ?model= on GET),
// the first without a name, and 404 in llama-server's shape for a model
// not served.
func TestNodeRoutesServeTheNamedModel(t *testing.T) {
	fa, fb := nodeScript(newFake()), nodeScript(newFake())
	fa.About.Model = "a"
	fb.About.Model, fb.About.ContextSlot, fb.About.Slots = "b", 256, 1
	a, b := newTokFake(fa), modelB{newTokFake(fb)}
	ts := startNode(t, fa, twoModels{fakeBackend: fa, models: map[string]engine.Backend{"a": a, "b": b}})
	t.Cleanup(fb.Release)

	for _, tt := range []struct {
		name, method, path, body string
		want                     string
	}{
		{"props of the first", "GET", "/props", "", `"model_alias":"a"`},
		{"props of b", "GET", "/props?model=b", "", `"total_slots":1,"model_alias":"b","model_path":"b","chat_template":"b-template"`},
		{"tokenize with the first", "POST", "/tokenize", `{"content":"hi"}`, `{"tokens":[204,205]}`},
		{"tokenize with b", "POST", "/tokenize", `{"model":"b","content":"hi"}`, `{"tokens":[1204,1205]}`},
		{"slots of a", "GET", "/slots?model=a", "", `[{"id":0,"n_ctx":512,"is_processing":true,"n_tokens":300},{"id":1,"n_ctx":512,"is_processing":false,"n_tokens":0}]`},
		{"slots of b", "GET", "/slots?model=b", "", `[{"id":0,"n_ctx":256,"is_processing":false,"n_tokens":7}]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, ts, tt.method, tt.path, tt.body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tt.want) {
				t.Fatalf("%s %s = %d %s, want 200 with %s", tt.method, tt.path, resp.StatusCode, body, tt.want)
			}
		})
	}

	_, body := do(t, ts, "POST", "/completion", `{"model":"b","prompt":[1]}`)
	if !strings.Contains(string(body), `"model":"b"`) || len(fb.Requests()) != 1 || len(fa.Requests()) != 0 {
		t.Fatalf("completion of b: %s; a got %d requests, b %d, want b 1", body, len(fa.Requests()), len(fb.Requests()))
	}

	for _, path := range []string{"/props?model=c", "/slots?model=c"} {
		resp, body := do(t, ts, "GET", path, "")
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"type":"not_found_error"`) {
			t.Errorf("GET %s = %d %s, want 404 not_found_error", path, resp.StatusCode, body)
		}
	}
	resp, body := do(t, ts, "POST", "/tokenize", `{"model":"c","content":"hi"}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("tokenize with c = %d %s, want 404", resp.StatusCode, body)
	}
}
