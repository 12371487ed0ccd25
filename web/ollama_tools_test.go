package web

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/toolcall"
)

// ollamaWeatherTool is one tool in Ollama's request shape.
const ollamaWeatherTool = `[{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
	"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"]}}}]`

// A model's call on /api/chat comes back as message.tool_calls with its
// arguments an object, whole in one streamed object, done_reason "stop"
// as Ollama's; text before it stays content (less the whitespace the
// call's header takes, streamed or whole alike); options.tool_choice
// "required" constrains the output to a call of the tools.
func TestOllamaChatToolCall(t *testing.T) {
	call := `<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Paris"}}` + "\n" + `</tool_call>`
	pieces := []string{"Let me look. ", call[:15], call[15:40], call[40:62], call[62:]}
	events := []engine.Event{firstEvent(20, 0)}
	for _, p := range pieces {
		events = append(events, textEvent(p))
	}
	f := newFake().Script(engine.FinishStop, engineTimings(20, 0, 30), events...)
	ts := startServer(t, f, Config{}, nil)
	body := `{"model":"tiny","tools":` + ollamaWeatherTool + `,"options":{"tool_choice":"required"},
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Weather in Paris?"}]`
	wantArgs := oapi.ToolCallFunctionArguments{"city": "Paris"}

	t.Run("stream", func(t *testing.T) {
		resp, raw := do(t, ts, http.MethodPost, "/api/chat", body+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		var content strings.Builder
		var calls []oapi.ToolCall
		var last oapi.ChatResponse
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r oapi.ChatResponse
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if len(r.Message.ToolCalls) > 0 && r.Message.Content != "" {
				t.Errorf("an object carries both calls and content: %s", line)
			}
			content.WriteString(r.Message.Content)
			calls = append(calls, r.Message.ToolCalls...)
			last = r
		}
		if content.String() != "Let me look." || len(calls) != 1 {
			t.Fatalf("content %q, calls %+v: %s", content.String(), calls, raw)
		}
		if calls[0].Function.Name != "get_weather" || !reflect.DeepEqual(calls[0].Function.Arguments, wantArgs) {
			t.Fatalf("call %+v", calls[0])
		}
		if !last.Done || last.DoneReason != "stop" || last.EvalCount != 30 {
			t.Fatalf("last object %+v", last)
		}
		if !strings.Contains(string(raw), `"arguments":{"city":"Paris"}`) {
			t.Fatalf("arguments not an object on the wire: %s", raw)
		}
	})
	t.Run("whole", func(t *testing.T) {
		resp, raw := do(t, ts, http.MethodPost, "/api/chat", body+`,"stream":false}`)
		var r oapi.ChatResponse
		if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		if r.Message.Content != "Let me look." || len(r.Message.ToolCalls) != 1 || r.DoneReason != "stop" ||
			!reflect.DeepEqual(r.Message.ToolCalls[0].Function.Arguments, wantArgs) {
			t.Fatalf("answer %s", raw)
		}
	})

	got := f.Requests()[0]
	out := got.Sampling.Output
	if out == nil || out.Prefix != toolcall.CallOpen || out.Suffix != toolcall.CallClose || !strings.Contains(string(out.Schema), `"const":"get_weather"`) &&
		!strings.Contains(string(out.Schema), `"const": "get_weather"`) {
		t.Fatalf("a required call is not constrained: %+v", out)
	}
	if !strings.Contains(string(out.Schema), `"maxLength":12`) {
		t.Fatalf("the tool's schema lost keywords api.Tool has no field for: %s", out.Schema)
	}
	sys := got.Messages[0]
	if sys.Role != engine.RoleSystem || !strings.HasPrefix(sys.Content, "be brief\n\n# Tools") || !strings.Contains(sys.Content, `"name":"get_weather"`) {
		t.Fatalf("system message %q", sys.Content)
	}
}

// Without tool_choice the call is the model's to make: no constraint, and
// a plain answer stays content.
func TestOllamaChatToolsAuto(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(5, 0, 2), firstEvent(5, 0), textEvent("<tool"), textEvent("box> hi"))
	ts := startServer(t, f, Config{}, nil)
	resp, raw := do(t, ts, http.MethodPost, "/api/chat", `{"model":"tiny","tools":`+ollamaWeatherTool+`,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var content strings.Builder
	for _, m := range ollamaLines(t, raw) {
		if _, ok := m["message"].(map[string]any)["tool_calls"]; ok {
			t.Fatalf("a call in %s", raw)
		}
		content.WriteString(m["message"].(map[string]any)["content"].(string))
	}
	if content.String() != "<toolbox> hi" {
		t.Fatalf("content %q", content.String())
	}
	if f.Requests()[0].Sampling.Output != nil {
		t.Fatalf("auto constrained the output")
	}
}

// An assistant's calls and a tool's result in the history reach the model
// as the OpenAI route renders them.
func TestOllamaToolHistory(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(5, 0, 1), firstEvent(5, 0), textEvent("ok"))
	ts := startServer(t, f, Config{}, nil)
	resp, raw := do(t, ts, http.MethodPost, "/api/chat", `{"model":"tiny","stream":false,"tools":`+ollamaWeatherTool+`,"messages":[
		{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
		{"role":"tool","tool_name":"get_weather","content":"18 C"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	msgs := f.Requests()[0].Messages
	want := []engine.Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"},
		{Role: "user", Content: "<tool_response>\n18 C\n</tool_response>"},
	}
	if len(msgs) != 4 || !reflect.DeepEqual(msgs[1:], want) {
		t.Fatalf("messages %+v", msgs)
	}
}

// format "json" and a schema constrain the output on both routes; a
// format that is neither is Ollama's "invalid format", a 400.
func TestOllamaFormat(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(5, 0, 2), firstEvent(5, 0), textEvent(`{"a":1}`))
	ts := startServer(t, f, Config{}, nil)
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	tests := []struct {
		name, path, body string
		want             *engine.Output
	}{
		{"chat json", "/api/chat", `{"model":"tiny","format":"json","messages":[{"role":"user","content":"hi"}]}`, &engine.Output{}},
		{"chat schema", "/api/chat", `{"model":"tiny","stream":false,"format":` + schema + `,"messages":[{"role":"user","content":"hi"}]}`, &engine.Output{Schema: []byte(schema)}},
		{"generate json", "/api/generate", `{"model":"tiny","stream":false,"format":"json","prompt":"hi"}`, &engine.Output{}},
		{"generate schema", "/api/generate", `{"model":"tiny","format":` + schema + `,"prompt":"hi"}`, &engine.Output{Schema: []byte(schema)}},
		{"null", "/api/generate", `{"model":"tiny","format":null,"prompt":"hi"}`, nil},
		{"empty", "/api/chat", `{"model":"tiny","format":"","messages":[{"role":"user","content":"hi"}]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.Requests())
			resp, raw := do(t, ts, http.MethodPost, tt.path, tt.body)
			if resp.StatusCode != 200 || !strings.Contains(string(raw), `{\"a\":1}`) {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			if got := f.Requests()[n].Sampling.Output; !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("output %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Formats and tool choices kvwin cannot honour are 400s in Ollama's shape,
// with the message naming the problem, before the backend is asked.
func TestOllamaFormatAndToolErrors(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(1, 0, 1), textEvent("x"))
	ts := startServer(t, f, Config{}, nil)
	user := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body, want string
	}{
		{"yaml", "/api/chat", `{"model":"tiny","format":"yaml",` + user + `}`,
			`invalid format: "yaml"; expected "json" or a valid JSON Schema object`},
		{"array", "/api/generate", `{"model":"tiny","format":[1],"prompt":"hi"}`,
			`invalid format: [1]; expected "json" or a valid JSON Schema object`},
		{"unenforceable schema", "/api/generate", `{"model":"tiny","format":{"type":"object","not":{}},"prompt":"hi"}`,
			`format uses "not", which kvwin's grammar-constrained decoding does not support`},
		{"remote ref", "/api/chat", `{"model":"tiny","format":{"$ref":"https://example.com/s.json"},` + user + `}`,
			`format has $ref "https://example.com/s.json"; only local references (#/…) are supported`},
		{"bad tool_choice", "/api/chat", `{"model":"tiny","tools":` + ollamaWeatherTool + `,"options":{"tool_choice":"always"},` + user + `}`,
			`options.tool_choice is "always"; it must be "none", "auto" or "required"`},
		{"tool_choice of another tool", "/api/chat", `{"model":"tiny","tools":` + ollamaWeatherTool + `,"options":{"tool_choice":{"type":"function","function":{"name":"f"}}},` + user + `}`,
			`options.tool_choice names "f", which is not among the tools`},
		{"required without tools", "/api/chat", `{"model":"tiny","options":{"tool_choice":"required"},` + user + `}`,
			`options.tool_choice required needs tools`},
		{"tool without a name", "/api/chat", `{"model":"tiny","tools":[{"function":{"description":"x"}}],` + user + `}`,
			`tools[0].function has no name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, raw := do(t, ts, http.MethodPost, tt.path, tt.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			want, _ := json.Marshal(map[string]string{"error": tt.want})
			if strings.TrimSpace(string(raw)) != string(want) {
				t.Fatalf("body %s\nwant %s", raw, want)
			}
		})
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("the backend got %d requests", n)
	}
}

// /api/show says the model calls tools, as /api/chat now does.
func TestOllamaShowSaysTools(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	resp, raw := do(t, ts, http.MethodPost, "/api/show", `{"model":"tiny"}`)
	var show oapi.ShowResponse
	if err := json.Unmarshal(raw, &show); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if got := strings.Join(func() []string {
		var s []string
		for _, c := range show.Capabilities {
			s = append(s, string(c))
		}
		return s
	}(), ","); got != "completion,tools" {
		t.Fatalf("capabilities %q", got)
	}
}
