package llamaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"kvwin/engine"
)

// chat is the two-message conversation most tests send.
var chatMsgs = []engine.Message{
	{Role: engine.RoleSystem, Content: "You are terse."},
	{Role: engine.RoleUser, Content: "Say hello."},
}

// chatML is the ChatML text of msgs with the generation prompt: what the
// rendered tokens must equal once tokenized whole with control tokens parsed.
func chatML(msgs ...engine.Message) string {
	var s string
	for _, m := range msgs {
		s += "<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n"
	}
	return s + "<|im_start|>assistant\n"
}

// recorded is what the fixture completion_stream.sse (and completion.json)
// generated, as the engine reports it.
var recorded = engine.Result{
	Text:         "Hello, world!",
	Tokens:       []int{9707, 11, 1879, 0},
	FinishReason: engine.FinishStop,
	Slot:         1,
	Timings: engine.Timings{
		PromptTokens: 248, CachedTokens: 236, PromptEval: 30958 * time.Microsecond,
		GeneratedTokens: 4, Decode: 61508 * time.Microsecond,
	},
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestGenerateRequest checks the exact JSON kvwin sends to /completion for
// a request, and the result and events it makes of the recorded answer.
func TestGenerateRequest(t *testing.T) {
	sampling := engine.Sampling{Temperature: 0.7, TopK: 20, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 42}
	prompt := jsonOf(encode(chatML(chatMsgs...), true, true, true))
	tests := []struct {
		name     string
		req      engine.Request
		cfg      Config
		answer   string // fixture the server answers with
		stream   bool
		wantBody string
		want     engine.Result
	}{
		{
			name: "chat, every field set, streamed",
			req: engine.Request{Messages: chatMsgs, MaxTokens: 64, Sampling: sampling, Stop: []string{"</s>"},
				Slot: 1, Keep: 5, IgnoreEOS: true, SlotOnly: true},
			cfg:    Config{CacheReuse: 256},
			answer: "completion_stream.sse", stream: true,
			wantBody: `{"prompt":` + prompt + `,"id_slot":1,"cache_prompt":true,"n_keep":5,"n_cache_reuse":256,` +
				`"n_predict":64,"seed":42,"temperature":0.7,"top_k":20,"top_p":0.9,"min_p":0.05,` +
				`"repeat_penalty":1.1,"repeat_last_n":64,"stop":["</s>"],"ignore_eos":true,"kvwin_slot_only":true,"stream":true,"timings_per_token":true}`,
			want: recorded,
		},
		{
			// No cache: no n_cache_reuse either, configured or asked
			// for by a shift (a router isolating tenants relies on it).
			name:   "token ids, defaults, no cache, not streamed by the caller",
			req:    engine.Request{Tokens: []int{1, 2, 3}, Sampling: engine.DefaultSampling(), Slot: -1, NoCache: true, Shift: true},
			cfg:    Config{CacheReuse: 256},
			answer: "completion_stream.sse",
			wantBody: `{"prompt":[1,2,3],"id_slot":-1,"cache_prompt":false,"n_keep":0,"n_cache_reuse":0,` +
				`"n_predict":-1,"seed":4294967295,"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,` +
				`"repeat_penalty":1,"repeat_last_n":64,"stop":[],"ignore_eos":false,"stream":true,"timings_per_token":true}`,
			want: recorded,
		},
		{
			name:   "raw prompt, server answers with one JSON object",
			req:    engine.Request{Prompt: "Hi<|im_end|>", Sampling: engine.DefaultSampling(), Slot: 0, Keep: -1},
			answer: "completion.json", stream: true,
			// BOS added, the control-token text left as text.
			wantBody: `{"prompt":` + jsonOf(encode("Hi<|im_end|>", true, false, true)) + `,"id_slot":0,"cache_prompt":true,"n_keep":-1,"n_cache_reuse":0,` +
				`"n_predict":-1,"seed":4294967295,"temperature":0.8,"top_k":40,"top_p":0.95,"min_p":0.05,` +
				`"repeat_penalty":1,"repeat_last_n":64,"stop":[],"ignore_eos":false,"stream":true,"timings_per_token":true}`,
			want: func() engine.Result {
				r := recorded
				r.Tokens = nil // not asked for (return_tokens), so not in the answer
				return r
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := tt.answer
			f := startFake(t, &fakeServer{completion: func(w http.ResponseWriter, r *http.Request) {
				if answer == "completion.json" {
					serveFile(w, http.StatusOK, answer)
					return
				}
				serveStream(w, answer)
			}})
			b := f.backend(t, tt.cfg)

			var events []engine.Event
			var stream engine.StreamFunc
			if tt.stream {
				stream = func(ev engine.Event) error { events = append(events, ev); return nil }
			}
			res, err := b.Generate(context.Background(), tt.req, stream)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			bodies := f.requests("/completion")
			if len(bodies) != 1 {
				t.Fatalf("%d requests to /completion, want 1", len(bodies))
			}
			if bodies[0] != tt.wantBody {
				t.Errorf("request body\n got %s\nwant %s", bodies[0], tt.wantBody)
			}

			if res.Timings.FirstToken <= 0 {
				t.Errorf("FirstToken = %v, want the measured time to the first chunk", res.Timings.FirstToken)
			}
			res.Timings.FirstToken = 0
			if !reflect.DeepEqual(res, tt.want) {
				t.Errorf("result\n got %+v\nwant %+v", res, tt.want)
			}
			if !tt.stream {
				return
			}
			var text string
			for i, ev := range events {
				if ev.First != (i == 0) {
					t.Errorf("event %d: First = %v", i, ev.First)
				}
				if ev.Slot != 1 {
					t.Errorf("event %d: Slot = %d, want 1", i, ev.Slot)
				}
				text += ev.Text
			}
			if text != tt.want.Text {
				t.Errorf("streamed text %q, want %q", text, tt.want.Text)
			}
			// The first event carries the prompt side of the timings, from
			// the first chunk: cache_n reused of cache_n + prompt_n.
			first := events[0].Timings
			want := engine.Timings{PromptTokens: 248, CachedTokens: 236, PromptEval: 30958 * time.Microsecond, FirstToken: first.FirstToken}
			if first != want || first.FirstToken <= 0 {
				t.Errorf("first event timings %+v, want %+v", first, want)
			}
		})
	}
}

// TestGenerateChecks: requests the server would refuse are refused before
// /completion, with the engine's errors.
func TestGenerateChecks(t *testing.T) {
	long := make([]int, 8192) // props_chatml.json: n_ctx 8192
	tests := []struct {
		name string
		req  engine.Request
		want error
	}{
		{"other model", engine.Request{Model: "llama", Tokens: []int{1}}, engine.ErrUnknownModel},
		{"slot beyond the server's", engine.Request{Tokens: []int{1}, Slot: 4}, engine.ErrInvalidRequest},
		{"max tokens beyond a slot", engine.Request{Tokens: []int{1}, MaxTokens: 8193}, engine.ErrInvalidRequest},
		{"two prompts", engine.Request{Tokens: []int{1}, Prompt: "x"}, engine.ErrInvalidRequest},
		{"no prompt", engine.Request{}, engine.ErrInvalidRequest},
		{"negative token", engine.Request{Tokens: []int{-1}}, engine.ErrInvalidRequest},
		{"unknown role", engine.Request{Messages: []engine.Message{{Role: "narrator", Content: "x"}}}, engine.ErrInvalidRequest},
		{"prompt fills the slot", engine.Request{Tokens: long}, &engine.ContextLengthError{PromptTokens: 8192, Limit: 8192}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{})
			b := f.backend(t, Config{})
			_, err := b.Generate(context.Background(), tt.req, nil)
			checkErr(t, err, tt.want)
			if n := len(f.requests("/completion")); n != 0 {
				t.Errorf("%d requests reached /completion", n)
			}
		})
	}
}

// checkErr checks that err is want (a sentinel) or equal to it (a
// *engine.ContextLengthError).
func checkErr(t *testing.T, err, want error) {
	t.Helper()
	if ctxLen, ok := want.(*engine.ContextLengthError); ok {
		var got *engine.ContextLengthError
		if !errors.As(err, &got) || *got != *ctxLen {
			t.Fatalf("err = %v, want %v", err, ctxLen)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want one wrapping %v", err, want)
	}
}

func TestInfo(t *testing.T) {
	tests := []struct {
		props string
		cfg   Config
		want  engine.Info
	}{
		{"props_chatml.json", Config{Name: "gpu-1"}, engine.Info{Name: "gpu-1", Model: "Qwen2.5-7B-Instruct-Q4_K_M", ContextSlot: 8192, Slots: 4}},
		{"props_llama3.json", Config{Name: "gpu-2"}, engine.Info{Name: "gpu-2", Model: "llama-3.1-8b", ContextSlot: 4096, Slots: 2}},
		{"props_llama3.json", Config{Name: "gpu-3", Model: "chat"}, engine.Info{Name: "gpu-3", Model: "chat", ContextSlot: 4096, Slots: 2}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s as %s", tt.props, tt.want.Model), func(t *testing.T) {
			f := startFake(t, &fakeServer{props: tt.props})
			b := f.backend(t, tt.cfg)
			before := engine.Info{Name: tt.want.Name, Model: tt.cfg.Model}
			if got := b.Info(); got != before {
				t.Errorf("Info before /props = %+v, want %+v", got, before)
			}
			if _, err := b.LoadProps(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := b.Info(); got != tt.want {
				t.Errorf("Info = %+v, want %+v", got, tt.want)
			}
		})
	}
}
