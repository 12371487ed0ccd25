package web

import (
	"encoding/json"
	"kvwin/internal/ident"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"kvwin/engine"
)

// chunkHead is what every chat chunk of a test response starts with.
const chunkHead = `{"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"tiny",`

// sse frames one data event.
func sse(payload string) string { return "data: " + payload + "\n\n" }

func TestChatNonStream(t *testing.T) {
	tests := []struct {
		name    string
		fake    *fakeBackend
		want    string
		headers map[string]string
	}{
		{
			name: "cached tokens and HTML-like text",
			fake: newFake().Script("length", engineTimings(12, 8, 3), firstEvent(12, 8), textEvent("Hel"), textEvent("lo <b>&")),
			want: `{"id":"chatcmpl-test","object":"chat.completion","created":1700000000,"model":"tiny",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello <b>&"},"logprobs":null,"finish_reason":"length"}],` +
				`"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`,
			headers: map[string]string{HeaderBackend: "fake-0", HeaderPromptTokens: "12", HeaderCachedTokens: "8", HeaderCachedEstimated: ""},
		},
		{
			name: "nothing cached still reports cached_tokens 0",
			fake: newFake().Script("stop", engineTimings(5, 0, 1), firstEvent(5, 0), textEvent("é")),
			want: `{"id":"chatcmpl-test","object":"chat.completion","created":1700000000,"model":"tiny",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"é"},"logprobs":null,"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}}}`,
			headers: map[string]string{HeaderBackend: "fake-0", HeaderPromptTokens: "5", HeaderCachedTokens: "0", HeaderCachedEstimated: ""},
		},
		{
			name: "estimated reuse and empty finish reason",
			fake: func() *fakeBackend {
				f := newFake().Script("", engine.Timings{PromptTokens: 40, CachedTokens: 32, CachedEstimated: true}, textEvent("ok"))
				f.About.Name = "ollama-a"
				f.Result.Tokens = []int{7, 9} // no GeneratedTokens: counted from the tokens
				return f
			}(),
			want: `{"id":"chatcmpl-test","object":"chat.completion","created":1700000000,"model":"tiny",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}}`,
			headers: map[string]string{HeaderBackend: "ollama-a", HeaderPromptTokens: "40", HeaderCachedTokens: "32", HeaderCachedEstimated: "true"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, tt.fake, Config{}, nil)
			resp, body := do(t, ts, http.MethodPost, chatPath, `{"model":"tiny",`+hi+`}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, body)
			}
			if got := strings.TrimSuffix(string(body), "\n"); got != tt.want {
				t.Errorf("body =\n%s\nwant\n%s", got, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			for k, v := range tt.headers {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestChatStreamBytes(t *testing.T) {
	script := func() *fakeBackend {
		return newFake().Script("length", engineTimings(12, 8, 3), firstEvent(12, 8), textEvent("Hel"), textEvent("lo <b>&"))
	}
	choices := func(delta, finish string) string {
		return chunkHead + `"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}`
	}
	body := sse(choices(`{"role":"assistant","content":""}`, "null")) +
		sse(choices(`{"content":"Hel"}`, "null")) +
		sse(choices(`{"content":"lo <b>&"}`, "null")) +
		sse(choices(`{}`, `"length"`))
	usageChunk := sse(chunkHead + `"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`)
	done := sse("[DONE]")

	tests := []struct {
		name    string
		options string
		want    string
	}{
		{"without usage", ``, body + done},
		{"usage not asked", `,"stream_options":{"include_usage":false}`, body + done},
		{"with usage", `,"stream_options":{"include_usage":true}`, body + usageChunk + done},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, script(), Config{}, nil)
			resp, got := do(t, ts, http.MethodPost, chatPath, `{"stream":true,`+hi+tt.options+`}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, got)
			}
			if string(got) != tt.want {
				t.Errorf("stream =\n%s\nwant\n%s", got, tt.want)
			}
			for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", HeaderCachedTokens: ""} {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			// Known only after the headers went out: trailers.
			for k, v := range map[string]string{HeaderBackend: "fake-0", HeaderPromptTokens: "12", HeaderCachedTokens: "8", HeaderCachedEstimated: ""} {
				if got := resp.Trailer.Get(k); got != v {
					t.Errorf("trailer %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestStreamHeadersEstimated(t *testing.T) {
	f := newFake().Script("stop", engineTimings(40, 32, 1),
		engine.Event{First: true, Text: "a", Timings: engine.Timings{PromptTokens: 40, CachedTokens: 32, CachedEstimated: true}})
	ts := startServer(t, f, Config{}, nil)
	for _, path := range []string{chatPath, completionPath} {
		t.Run(path, func(t *testing.T) {
			body := `{"stream":true,` + hi + `}`
			if path == completionPath {
				body = `{"stream":true,"prompt":"p"}`
			}
			resp, b := do(t, ts, http.MethodPost, path, body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, b)
			}
			for k, v := range map[string]string{HeaderPromptTokens: "40", HeaderCachedTokens: "32", HeaderCachedEstimated: "true"} {
				if got := resp.Trailer.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// streamedText joins the text of a chat or completions stream and checks
// it ends with [DONE].
func streamedText(t *testing.T, body string) string {
	t.Helper()
	if !strings.HasSuffix(body, sse("[DONE]")) {
		t.Errorf("stream does not end with [DONE]: %q", body)
	}
	var text strings.Builder
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %q is not a data line", ev)
		}
		if payload == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Text  *string `json:"text"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", payload, err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				text.WriteString(*c.Delta.Content)
			}
			if c.Text != nil {
				text.WriteString(*c.Text)
			}
		}
	}
	return text.String()
}

// TestStreamMatchesNonStream: the concatenated stream is byte-identical to
// the non-streamed text of the same generation, on both endpoints.
func TestStreamMatchesNonStream(t *testing.T) {
	tests := []struct {
		name string
		fake func() *fakeBackend
		want string
	}{
		{"plain", func() *fakeBackend {
			return newFake().Script("stop", engineTimings(3, 0, 3), firstEvent(3, 0), textEvent("a"), textEvent("b"), textEvent("c"))
		}, "abc"},
		{"multi-byte, escapes and markup", func() *fakeBackend {
			return newFake().Script("stop", engineTimings(3, 0, 5), firstEvent(3, 0),
				textEvent("日本"), textEvent("\n\t\"q\"\\"), textEvent("<b>&amp;</b>"), textEvent("🙂\u2028"))
		}, "日本\n\t\"q\"\\<b>&amp;</b>🙂\u2028"},
		{"text in the first event and empty events", func() *fakeBackend {
			return newFake().Script("stop", engineTimings(3, 1, 2),
				engine.Event{First: true, Text: "x", Timings: engine.Timings{PromptTokens: 3}}, textEvent(""), textEvent("y"))
		}, "xy"},
		{"no events at all", func() *fakeBackend {
			f := newFake()
			f.Result = engine.Result{Text: "whole", FinishReason: "stop", Timings: engineTimings(2, 0, 1)}
			return f
		}, "whole"},
		{"backend streamed only a prefix", func() *fakeBackend {
			f := newFake().Script("stop", engineTimings(2, 0, 2), firstEvent(2, 0), textEvent("hea"))
			f.Result.Text = "head"
			return f
		}, "head"},
		{"nothing generated", func() *fakeBackend {
			return newFake().Script("length", engineTimings(2, 0, 0), firstEvent(2, 0))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{chatPath, completionPath} {
				ts := startServer(t, tt.fake(), Config{}, nil)
				req := `"prompt":"p"`
				if path == chatPath {
					req = hi
				}
				_, whole := do(t, ts, http.MethodPost, path, `{`+req+`}`)
				var res struct {
					Choices []struct {
						Text    *string `json:"text"`
						Message struct {
							Content *string `json:"content"`
						} `json:"message"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(whole, &res); err != nil || len(res.Choices) != 1 {
					t.Fatalf("%s: non-stream body %s (%v)", path, whole, err)
				}
				nonStream := res.Choices[0].Message.Content
				if path == completionPath {
					nonStream = res.Choices[0].Text
				}
				if nonStream == nil {
					t.Fatalf("%s: no text in %s", path, whole)
				}
				_, streamed := do(t, ts, http.MethodPost, path, `{"stream":true,`+req+`}`)
				if got := streamedText(t, string(streamed)); got != *nonStream || got != tt.want {
					t.Errorf("%s: streamed %q, non-stream %q, want both %q", path, got, *nonStream, tt.want)
				}
			}
		})
	}
}

// TestRequestTranslation: what reaches the backend for a given body.
func TestRequestTranslation(t *testing.T) {
	def := engine.DefaultSampling()
	sampling := func(edit func(*engine.Sampling)) engine.Sampling {
		s := def
		edit(&s)
		return s
	}
	user := []engine.Message{{Role: "user", Content: "hi"}}
	tests := []struct {
		name string
		path string
		body string
		want engine.Request
	}{
		{"defaults", chatPath, `{` + hi + `}`,
			engine.Request{Model: "tiny", Messages: user, Sampling: def, Slot: -1}},
		{"every parameter", chatPath, `{"model":"tiny",` + hi + `,"max_tokens":64,"temperature":0,"top_p":0.5,"top_k":7,"min_p":0.1,"seed":42,"stop":["\n\n","END"],"n":1,"user":"u","prompt_cache_key":"conv-1","presence_penalty":0.3,"tools":[]}`,
			engine.Request{Model: "tiny", Messages: user, MaxTokens: 64, Stop: []string{"\n\n", "END"}, Slot: -1, Owner: ident.Owner{Conversation: "conv-1"},
				Sampling: sampling(func(s *engine.Sampling) {
					s.Temperature, s.TopP, s.TopK, s.MinP, s.Seed, s.PresencePenalty = 0, 0.5, 7, 0.1, 42, 0.3
				})}},
		{"stop as a string", chatPath, `{` + hi + `,"stop":"###"}`,
			engine.Request{Model: "tiny", Messages: user, Stop: []string{"###"}, Sampling: def, Slot: -1}},
		{"empty stop strings dropped", chatPath, `{` + hi + `,"stop":["","x"]}`,
			engine.Request{Model: "tiny", Messages: user, Stop: []string{"x"}, Sampling: def, Slot: -1}},
		{"null stop", chatPath, `{` + hi + `,"stop":null}`,
			engine.Request{Model: "tiny", Messages: user, Sampling: def, Slot: -1}},
		{"max_completion_tokens wins", chatPath, `{` + hi + `,"max_tokens":10,"max_completion_tokens":20}`,
			engine.Request{Model: "tiny", Messages: user, MaxTokens: 20, Sampling: def, Slot: -1}},
		{"max_tokens equal to the slot", chatPath, `{` + hi + `,"max_tokens":512}`,
			engine.Request{Model: "tiny", Messages: user, MaxTokens: 512, Sampling: def, Slot: -1}},
		{"seed -1 is random", chatPath, `{` + hi + `,"seed":-1}`,
			engine.Request{Model: "tiny", Messages: user, Sampling: def, Slot: -1}},
		{"seed 0", chatPath, `{` + hi + `,"seed":0}`,
			engine.Request{Model: "tiny", Messages: user, Sampling: sampling(func(s *engine.Sampling) { s.Seed = 0 }), Slot: -1}},
		{"roles, content parts, null content", chatPath,
			`{"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null},{"role":"tool","content":"42"}]}`,
			engine.Request{Model: "tiny", Sampling: def, Slot: -1, Messages: []engine.Message{
				{Role: "system", Content: "be brief"}, {Role: "user", Content: "ab"}, {Role: "assistant"}, {Role: "user", Content: "<tool_response>\n42\n</tool_response>"}}}},
		{"surrogate pairs and escaped backslashes kept", chatPath, `{"messages":[{"role":"user","content":"\ud83d\ude00 \\ud800"}]}`,
			engine.Request{Model: "tiny", Messages: []engine.Message{{Role: "user", Content: "😀 \\ud800"}}, Sampling: def, Slot: -1}},
		{"completions prompt", completionPath, `{"prompt":"Once upon","max_tokens":8,"temperature":1.5,"stop":"\n"}`,
			engine.Request{Model: "tiny", Prompt: "Once upon", MaxTokens: 8, Stop: []string{"\n"}, Slot: -1,
				Sampling: sampling(func(s *engine.Sampling) { s.Temperature = 1.5 })}},
		{"completions one-string array", completionPath, `{"prompt":["x"]}`,
			engine.Request{Model: "tiny", Prompt: "x", Sampling: def, Slot: -1}},
		{"completions token ids", completionPath, `{"prompt":[1,2,3]}`,
			engine.Request{Model: "tiny", Tokens: []int{1, 2, 3}, Sampling: def, Slot: -1}},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "", true: "/stream"}[stream], func(t *testing.T) {
				f := newFake().Script("stop", engineTimings(1, 0, 1), firstEvent(1, 0), textEvent("x"))
				ts := startServer(t, f, Config{}, nil)
				body := tt.body
				if stream {
					body = `{"stream":true,` + body[1:]
				}
				resp, b := do(t, ts, http.MethodPost, tt.path, body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status = %d, body %s", resp.StatusCode, b)
				}
				reqs := f.Requests()
				if len(reqs) != 1 {
					t.Fatalf("backend got %d requests, want 1", len(reqs))
				}
				want := tt.want
				want.Tenant = DefaultTenant // a server without keys has one tenant
				if !reflect.DeepEqual(reqs[0], want) {
					t.Errorf("request =\n%+v\nwant\n%+v", reqs[0], want)
				}
			})
		}
	}
}
