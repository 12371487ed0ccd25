package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// The Messages API (web/anthropic) served over the scripted fake: bytes on
// the wire, the prompt the backend receives, and errors in Anthropic's
// shape, before the route and in it.

const messagesPath = "/v1/messages"

// messagesBody is a minimal valid body with extra fields.
func messagesBody(extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"hi"}]` + extra + `}`
}

func TestMessagesWholeBytes(t *testing.T) {
	f := newFake().Script("length", engineTimings(12, 8, 3), firstEvent(12, 8), textEvent("Hel"), textEvent("lo <b>&"))
	ts := startServer(t, f, Config{}, nil)
	resp, body := send(t, ts, http.MethodPost, messagesPath, messagesBody(""), map[string]string{"anthropic-version": "2023-06-01"})
	want := `{"id":"msg_test","type":"message","role":"assistant","model":"tiny","content":[{"type":"text","text":"Hello <b>&"}],` +
		`"stop_reason":"max_tokens","stop_sequence":null,` +
		`"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":3}}`
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != want {
		t.Fatalf("status %d, body\n%s\nwant\n%s", resp.StatusCode, body, want)
	}
	for k, v := range map[string]string{HeaderBackend: "fake-0", HeaderPromptTokens: "12", HeaderCachedTokens: "8", "request-id": resp.Header.Get("X-Request-Id")} {
		if got := resp.Header.Get(k); got != v || v == "" {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestMessagesStreamBytes(t *testing.T) {
	f := newFake().Script("stop", engineTimings(12, 8, 3), firstEvent(12, 8), textEvent("Hel"), textEvent("lo"))
	f.Result.StopSequence = "###"
	ts := startServer(t, f, Config{}, nil)
	resp, body := do(t, ts, http.MethodPost, messagesPath, messagesBody(`"stream":true,"stop_sequences":["###"]`))
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	want := ev("message_start", `{"type":"message_start","message":{"id":"msg_test","type":"message","role":"assistant","model":"tiny","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":0}}}`) +
		ev("ping", `{"type":"ping"}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"###"},"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":3}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("status %d, body\n%s\nwant\n%s", resp.StatusCode, body, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Trailer.Get(HeaderCachedTokens) != "8" {
		t.Errorf("Content-Type %q, cached %q (trailer)", ct, resp.Trailer.Get(HeaderCachedTokens))
	}
	if got := f.Requests()[0].Stop; len(got) != 1 || got[0] != "###" {
		t.Errorf("stop sequences reached the backend as %q", got)
	}
}

// sseEvents reads a stream's events as (name, data) pairs.
func sseEvents(t *testing.T, body []byte) [][2]string {
	t.Helper()
	var out [][2]string
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, [2]string{strings.TrimPrefix(name, "event: "), data})
	}
	return out
}

const weatherTool = `"tools":[{"name":"get_weather","description":"weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`

// looseTool's schema uses a keyword the grammar cannot enforce, as Claude
// Code's tools do.
const looseTool = `"tools":[{"name":"task","input_schema":{"type":"object","properties":{"metadata":{"type":"object","propertyNames":{"pattern":"^[a-z]+$"}}}}}]`

// A tool the model calls of its own accord is read, not enforced: its
// schema reaches the model whatever keywords it uses.
func TestMessagesToolsTheGrammarCannotHoldAreServedUnderAuto(t *testing.T) {
	f := newFake()
	ts := startServer(t, f, Config{}, nil)
	resp, b := do(t, ts, http.MethodPost, messagesPath, messagesBody(looseTool))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if sys := f.Requests()[0].Messages[0]; sys.Role != "system" || !strings.Contains(sys.Content, `"propertyNames"`) {
		t.Errorf("the model was not shown the tool's schema: %q", sys)
	}
}

func TestMessagesToolUseStreamsInputFragments(t *testing.T) {
	pieces := []string{"Let me check.", "\n<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"ci", "ty\": \"Pa", "ris\"}}\n</tool_call>"}
	script := func() *fakeBackend {
		evs := []engine.Event{firstEvent(30, 0)}
		for _, p := range pieces {
			evs = append(evs, textEvent(p))
		}
		return newFake().Script("stop", engineTimings(30, 0, 20), evs...)
	}
	ts := startServer(t, script(), Config{}, nil)
	resp, body := do(t, ts, http.MethodPost, messagesPath, messagesBody(weatherTool+`,"stream":true`))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var names []string
	var input, text strings.Builder
	for _, ev := range sseEvents(t, body) {
		names = append(names, ev[0])
		var obj struct {
			Index        int
			ContentBlock struct{ Type, ID, Name string } `json:"content_block"`
			Delta        struct {
				Type, Text  string
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			}
		}
		if err := json.Unmarshal([]byte(ev[1]), &obj); err != nil {
			t.Fatal(err)
		}
		switch {
		case ev[0] == "content_block_start" && obj.ContentBlock.Type == "tool_use":
			if obj.Index != 1 || obj.ContentBlock.Name != "get_weather" || !strings.HasPrefix(obj.ContentBlock.ID, "toolu_") {
				t.Errorf("tool_use block %s", ev[1])
			}
		case obj.Delta.Type == "input_json_delta":
			input.WriteString(obj.Delta.PartialJSON)
		case obj.Delta.Type == "text_delta":
			text.WriteString(obj.Delta.Text)
		case ev[0] == "message_delta" && obj.Delta.StopReason != "tool_use":
			t.Errorf("stop reason in %s", ev[1])
		}
	}
	if input.String() != `{"city": "Paris"}` || text.String() != "Let me check." {
		t.Errorf("input fragments add up to %q, text %q", input.String(), text.String())
	}
	wantNames := "message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != wantNames {
		t.Errorf("events\n%s\nwant\n%s", got, wantNames)
	}

	// Whole, the same answer is a text block and a tool_use block whose
	// input is the object.
	ts = startServer(t, script(), Config{}, nil)
	_, body = do(t, ts, http.MethodPost, messagesPath, messagesBody(weatherTool))
	want := `"content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_test","name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use"`
	if !strings.Contains(string(body), want) {
		t.Errorf("whole answer %s\nwant it to hold %s", body, want)
	}
}

// The messages as the backend gets them: system blocks joined, an
// assistant's thinking dropped (as Anthropic drops earlier turns'), its
// tool_use as its call, a mid-conversation system message where it stands, tool results (an error marked so) as
// the convention's tool responses, then the user's text.
func TestMessagesTranslation(t *testing.T) {
	f := newFake()
	ts := startServer(t, f, Config{}, nil)
	body := `{"model":"tiny","max_tokens":100000,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be kind."}],` +
		`"metadata":{"user_id":"u1"},"thinking":{"type":"adaptive"},"temperature":0,"top_k":5,` +
		`"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"The user wants <tool_call>","signature":"c2ln"},{"type":"redacted_thinking","data":"eA=="},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":  "Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18 C"}]},` +
		`{"type":"tool_result","tool_use_id":"toolu_2","content":"down","is_error":true},{"type":"text","text":"thanks"}]},` +
		`{"role":"system","content":[{"type":"text","text":"Today is Tuesday.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be quick."}]}]}`
	resp, b := send(t, ts, http.MethodPost, messagesPath, body, map[string]string{"anthropic-beta": "prompt-caching-2024-07-31", "X-Conversation-Id": "c1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	req := f.Requests()[0]
	if req.Conversation != "c1" {
		t.Errorf("conversation %q, want X-Conversation-Id's c1", req.Conversation)
	}
	want := []engine.Message{
		{Role: "system", Content: "Be brief.\n\nBe kind."},
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"},
		{Role: "user", Content: "<tool_response>\n18 C\n</tool_response>"},
		{Role: "user", Content: "<tool_response>\nError: down\n</tool_response>"},
		{Role: "user", Content: "thanks"},
		{Role: "system", Content: "Today is Tuesday.\n\nBe quick."},
	}
	if fmt.Sprint(req.Messages) != fmt.Sprint(want) {
		t.Errorf("messages\n%q\nwant\n%q", req.Messages, want)
	}
	if req.MaxTokens != 512 || req.Sampling.Temperature != 0 || req.Sampling.TopK != 5 {
		t.Errorf("max tokens %d (want the slot's 512), temperature %v, top_k %d", req.MaxTokens, req.Sampling.Temperature, req.Sampling.TopK)
	}
}

// anthropicError checks an answer is Anthropic's error of status and type
// and returns its message.
func anthropicError(t *testing.T, resp *http.Response, body []byte, status int, typ string) string {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != status || e.Type != "error" || e.Error.Type != typ {
		t.Fatalf("status %d, body %s; want %d and an Anthropic %s", resp.StatusCode, body, status, typ)
	}
	return e.Error.Message
}

func TestMessagesBadRequests(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"no max_tokens", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, "max_tokens is required"},
		{"no model", `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "model is required"},
		{"no messages", `{"model":"tiny","max_tokens":5,"messages":[]}`, "messages must be a non-empty array"},
		{"image", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, "images are not supported"},
		{"document", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "documents are not supported"},
		{"thinking type", messagesBody(`"thinking":{"type":"on"}`), `thinking.type is "on"`},
		{"thinking budget", messagesBody(`"thinking":{"type":"enabled","budget_tokens":512}`), "at least 1024, not 512"},
		{"thinking without budget", messagesBody(`"thinking":{"type":"enabled"}`), "budget_tokens is required"},
		{"thinking past max_tokens", `{"model":"tiny","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}`, "(2000) must be less than max_tokens (2000)"},
		{"thinking from the user", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"hm"}]}]}`, "thinking blocks belong to assistant messages"},
		{"server tool", messagesBody(`"tools":[{"type":"web_search_20250305","name":"web_search"}]`), "server tools are not supported"},
		{"tool without schema", messagesBody(`"tools":[{"name":"f"}]`), "input_schema is required"},
		{"two tools of one name", messagesBody(`"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}],"tool_choice":{"type":"tool","name":"f"}`), `tools[1].name "f" names a tool already named`},
		{"unknown tool choice", messagesBody(weatherTool + `,"tool_choice":{"type":"tool","name":"nope"}`), `"nope"`},
		{"any without tools", messagesBody(`"tool_choice":{"type":"any"}`), "needs tools"},
		{"forced schema the grammar cannot hold", messagesBody(looseTool + `,"tool_choice":{"type":"any"}`), `tools[0].input_schema.properties.metadata uses "propertyNames"`},
		{"temperature", messagesBody(`"temperature":1.5`), "temperature must be in [0, 1]"},
		{"role", `{"model":"tiny","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, `"user", "assistant" or "system"`},
		{"system of images", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"image"}]}]}`, "messages[1].content[0] has type \"image\""},
		{"prefill", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, "prefilled"},
		{"tool_use input", `{"model":"tiny","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]},{"role":"user","content":"x"}]}`, "input must be a JSON object"},
		{"mcp", messagesBody(`"mcp_servers":[{"type":"url","url":"http://x"}]`), "mcp_servers is not supported"},
		{"not JSON", `{"model":`, "not valid JSON"},
		{"wrong type", `{"model":"tiny","max_tokens":"five","messages":[]}`, "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			ts := startServer(t, f, Config{}, nil)
			for _, path := range []string{messagesPath, messagesPath + "/count_tokens"} {
				body := tc.body
				if path != messagesPath && tc.name == "no max_tokens" {
					continue // counting needs none
				}
				resp, b := do(t, ts, http.MethodPost, path, body)
				if msg := anthropicError(t, resp, b, 400, "invalid_request_error"); !strings.Contains(msg, tc.want) {
					t.Errorf("%s: message %q does not name %q", path, msg, tc.want)
				}
			}
			if n := len(f.Requests()); n != 0 {
				t.Errorf("%d requests reached the backend", n)
			}
		})
	}
}

func TestMessagesErrorStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
	}{
		{"queue full is 529", fmt.Errorf("node a: %w", engine.ErrQueueFull), 529, "overloaded_error"},
		{"unknown model", engine.ErrUnknownModel, 404, "not_found_error"},
		{"timeout", engine.ErrTimeout, 504, "timeout_error"},
		{"unavailable", engine.ErrUnavailable, 503, "api_error"},
		{"context length", &engine.ContextLengthError{PromptTokens: 600, Limit: 512}, 400, "invalid_request_error"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				f := newFake()
				f.Err = tc.err
				ts := startServer(t, f, Config{}, nil)
				resp, b := do(t, ts, http.MethodPost, messagesPath, messagesBody(fmt.Sprintf(`"stream":%v`, stream)))
				anthropicError(t, resp, b, tc.status, tc.typ)
				if tc.status == 529 && resp.Header.Get("Retry-After") != "1" {
					t.Errorf("529 without Retry-After: %q", resp.Header.Get("Retry-After"))
				}
			})
		}
	}

	// After the first event an error is the stream's error event.
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("a"))
	f.ErrAfter = fmt.Errorf("node died: %w", engine.ErrUnavailable)
	ts := startServer(t, f, Config{}, nil)
	_, b := do(t, ts, http.MethodPost, messagesPath, messagesBody(`"stream":true`))
	evs := sseEvents(t, b)
	if last := evs[len(evs)-1]; last[0] != "error" || !strings.Contains(last[1], `"type":"api_error"`) {
		t.Errorf("last event %q, want an api_error event", last)
	}
}

// Keys by x-api-key or Bearer; errors before the route are Anthropic's
// on its paths and wherever anthropic-version is sent.
func TestMessagesKeysAndRouteErrors(t *testing.T) {
	f := newFake()
	ts := startServer(t, f, keyedConfig(nil), nil)
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		status  int
		typ     string
	}{
		{"x-api-key", messagesPath, map[string]string{"x-api-key": aliceKey}, 200, ""},
		{"bearer", messagesPath, map[string]string{"Authorization": "Bearer " + bobKey}, 200, ""},
		{"no key", messagesPath, nil, 401, "authentication_error"},
		{"wrong key", messagesPath, map[string]string{"x-api-key": "not-a-valid-key-at-all"}, 401, "authentication_error"},
		{"admin route", "/kvwin/v1/registry", map[string]string{"x-api-key": aliceKey, "anthropic-version": "2023-06-01"}, 403, "permission_error"},
		{"unknown path", messagesPath + "/batches", map[string]string{"x-api-key": aliceKey}, 404, "not_found_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if tc.name == "admin route" {
				method = http.MethodGet
			}
			resp, b := send(t, ts, method, tc.path, messagesBody(""), tc.headers)
			if tc.status == 200 {
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			anthropicError(t, resp, b, tc.status, tc.typ)
		})
	}
	reqs := f.Requests()
	if len(reqs) != 2 || reqs[0].Tenant != "alice" || reqs[1].Tenant != "bob" {
		t.Errorf("tenants %v", reqs)
	}
}

// The tenant limits count Messages generations as every other: alice's
// second at once is Anthropic's 429 rate_limit_error, bob's still runs.
func TestMessagesTenantLimit(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	f.Entered = make(chan engine.Request, 4)
	f.Hold = make(chan struct{})
	cfg := keyedConfig(nil)
	cfg.TenantMaxConcurrent = 1
	ts := startServer(t, f, cfg, nil)
	done := make(chan int, 1)
	go func() {
		resp, _ := send(t, ts, http.MethodPost, messagesPath, messagesBody(""), map[string]string{"x-api-key": aliceKey})
		done <- resp.StatusCode
	}()
	<-f.Entered // alice's first runs (and is held)
	resp, b := send(t, ts, http.MethodPost, messagesPath, messagesBody(""), map[string]string{"x-api-key": aliceKey})
	anthropicError(t, resp, b, 429, "rate_limit_error")
	close(f.Hold)
	if status := <-done; status != 200 {
		t.Errorf("alice's first: %d", status)
	}
	resp, b = send(t, ts, http.MethodPost, messagesPath, messagesBody(""), map[string]string{"x-api-key": bobKey})
	if resp.StatusCode != 200 {
		t.Errorf("bob: %d %s", resp.StatusCode, b)
	}
}

func TestMessagesModelsList(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	version := map[string]string{"anthropic-version": "2023-06-01"}
	_, b := send(t, ts, http.MethodGet, "/v1/models", "", version)
	var page struct {
		Data []struct {
			Type, ID       string
			CreatedAt      time.Time `json:"created_at"`
			MaxInputTokens int       `json:"max_input_tokens"`
		}
		HasMore bool   `json:"has_more"`
		FirstID string `json:"first_id"`
	}
	if err := json.Unmarshal(b, &page); err != nil || len(page.Data) != 1 || page.Data[0].ID != "tiny" ||
		page.Data[0].CreatedAt.IsZero() || page.Data[0].MaxInputTokens != 512 || page.HasMore || page.FirstID != "tiny" {
		t.Errorf("Anthropic list %s (%v)", b, err)
	}
	_, b = send(t, ts, http.MethodGet, "/v1/models/tiny", "", version)
	if !strings.HasPrefix(string(b), `{"type":"model","id":"tiny"`) {
		t.Errorf("Anthropic model %s", b)
	}
	resp, b := send(t, ts, http.MethodGet, "/v1/models/other", "", version)
	anthropicError(t, resp, b, 404, "not_found_error")
	_, b = do(t, ts, http.MethodGet, "/v1/models", "")
	if !strings.HasPrefix(string(b), `{"object":"list"`) {
		t.Errorf("without anthropic-version the OpenAI list: %s", b)
	}
}

// fuzzAnthropicRoute is fuzzRoute for a Messages route, whose errors are
// {"type": "error", "error": {"type", "message"}}.
func fuzzAnthropicRoute(f *testing.F, path string, seeds ...string) {
	fuzzWith(f, path, func(t *testing.T, body []byte, w *httptest.ResponseRecorder) {
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("status %d without Anthropic's error object for %q: %s", w.Code, body, w.Body.Bytes())
		}
	}, seeds...)
}

var messagesSeeds = []string{
	// Many items (issue 45): more messages than the server takes, and one
	// message of as many content blocks.
	`{"model":"tiny","max_tokens":8,"messages":[` + hugeItems(`{"role":"user","content":"x"}`, fuzzMaxItems+16) + `]}`,
	`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":[` + hugeItems(`{"type":"text","text":"x"}`, fuzzMaxItems+16) + `]}]}`,
	messagesBody(""),
	messagesBody(`"stream":true,"stop_sequences":["x",""],"temperature":0.5,"top_p":0.9,"top_k":3,"metadata":{"user_id":"u"}`),
	`{"model":"tiny","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}],"is_error":true}]}]}`,
	`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,{"b":null}]}}]},{"role":"user","content":"r"}],` + weatherTool + `,"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`,
	messagesBody(weatherTool + `,"tool_choice":{"type":"tool","name":"get_weather"},"thinking":{"type":"disabled"}`),
	messagesBody(`"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`),
	`{"model":"tiny","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"a"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"b"}]},{"role":"user","content":"c"},{"role":"system","content":[{"type":"text","text":"d"}]}]}`,
	messagesBody(looseTool + `,"thinking":{"type":"adaptive"}`),
	// Issue 45's shapes: two tools of one name, a forced tool's schema the
	// converter rejects, a tool_choice of no known type.
	messagesBody(`"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}`),
	messagesBody(`"tools":[{"name":"t","input_schema":{"type":"object","properties":{"a":{"type":"string","pattern":"(("}}}}],"tool_choice":{"type":"any"}`),
	messagesBody(`"tool_choice":{"type":"bogus"}`),
}

func FuzzMessagesRequest(f *testing.F) {
	fuzzAnthropicRoute(f, messagesPath, messagesSeeds...)
}

func FuzzMessagesCountTokensRequest(f *testing.F) {
	// Without the two many-item seeds, which FuzzMessagesRequest runs
	// through the same decoder: from them Go's fuzzer made 17 inputs in 30 s
	// on this route (each seed alone is answered at once), and without them
	// tens of thousands a second.
	fuzzAnthropicRoute(f, messagesPath+"/count_tokens", messagesSeeds[2:]...)
}

// A request as Claude Code (2.1.197) sends every turn, in shape: adaptive
// thinking, context_management, output_config's effort, metadata.user_id
// holding JSON, a mid-conversation system message after the user's, a
// tool whose schema the grammar could not enforce, its beta headers and
// ?beta=true. Each of these was once a 400, which refused the agent whole.
func TestMessagesAsClaudeCodeSendsThem(t *testing.T) {
	f := newFake().Script("stop", engineTimings(12, 8, 3), firstEvent(12, 8), textEvent("Hello"))
	ts := startServer(t, f, Config{}, nil)
	body := `{"model":"tiny","max_tokens":32000,"stream":true,` +
		`"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197;"},{"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>\nToday is Tuesday.\n</system-reminder>\n"},{"type":"text","text":"Say hello","cache_control":{"type":"ephemeral"}}]},` +
		`{"role":"system","content":"Available agent types: claude."}],` +
		looseTool + `,` +
		`"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"},"thinking":{"type":"adaptive"},` +
		`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"high"}}`
	resp, b := send(t, ts, http.MethodPost, messagesPath+"?beta=true", body, map[string]string{
		"anthropic-version": "2023-06-01",
		"anthropic-beta":    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,mid-conversation-system-2026-04-07,effort-2025-11-24",
		"x-app":             "cli",
	})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	events := sseEvents(t, b)
	if last := events[len(events)-1]; last[0] != "message_stop" {
		t.Errorf("stream ended with %v", last)
	}
	var roles []string
	for _, m := range f.Requests()[0].Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, " "); got != "system user system" {
		t.Errorf("the backend got roles %q, want the system prompt, the user's message, then the mid-conversation system message", got)
	}
}
