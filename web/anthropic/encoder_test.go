package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/web/core"
)

func testIDs(prefix string) string { return prefix + "1" }

// streamOf runs pieces through a new encoder as the turn would: Open with
// the first, Text with the rest, End with res; it returns the events.
func streamOf(e *encoder, pieces []string, res engine.Result) []any {
	out := e.Open(engine.Event{First: true, Text: pieces[0]})
	for _, p := range pieces[1:] {
		out = append(out, e.Text(p)...)
	}
	return append(out, e.End(res)...)
}

// inputs adds up each tool_use block's input_json_delta fragments.
func inputs(events []any) (names []string, input map[int]string) {
	input = map[int]string{}
	for _, ev := range events {
		names = append(names, ev.(core.EventNamer).EventName())
		if d, ok := ev.(blockDeltaEvent); ok {
			if j, ok := d.Delta.(inputJSONDelta); ok {
				input[d.Index] += j.PartialJSON
			}
		}
	}
	return names, input
}

func TestEncoderToolCalls(t *testing.T) {
	two := "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}{\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"
	for _, tc := range []struct {
		name     string
		text     string
		single   bool
		finish   string
		blocks   string // the whole answer's content
		reason   string
		fragment map[int]string // streamed input per block index
	}{
		{"two calls", two, false, "stop",
			`[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":"}{"}},{"type":"tool_use","id":"toolu_1","name":"g","input":{}}]`,
			"tool_use", map[int]string{0: `{"a": "}{"}`, 1: `{}`}},
		{"parallel off keeps the first", two, true, "stop",
			`[{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":"}{"}}]`, "tool_use", map[int]string{0: `{"a": "}{"}`}},
		{"a call cut short is input {}", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x", false, "length",
			`[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]`, "max_tokens", map[int]string{0: `{"a": "x`}},
		{"text that is no call", "<tool_cal> is not a call", false, "stop",
			`[{"type":"text","text":"<tool_cal> is not a call"}]`, "end_turn", map[int]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := engine.Result{Text: tc.text, FinishReason: tc.finish, Timings: engine.Timings{PromptTokens: 9, CachedTokens: 4, GeneratedTokens: 5}}
			whole := newEncoder("msg_1", "m", true, tc.single, nil, testIDs).Whole(res).(messageObject)
			raw, _ := core.EncodeJSON(whole.Content)
			content := strings.TrimSpace(string(raw))
			if content != tc.blocks || *whole.StopReason != tc.reason || whole.Usage.InputTokens != 5 || whole.Usage.CacheReadInputTokens != 4 {
				t.Errorf("whole: %s, %s, %+v", content, *whole.StopReason, whole.Usage)
			}
			// Streamed a byte at a time, the fragments add up to the input.
			var pieces []string
			for i := range len(tc.text) {
				pieces = append(pieces, tc.text[i:i+1])
			}
			names, got := inputs(streamOf(newEncoder("msg_1", "m", true, tc.single, nil, testIDs), pieces, res))
			if fmt.Sprint(got) != fmt.Sprint(tc.fragment) {
				t.Errorf("streamed inputs %v, want %v", got, tc.fragment)
			}
			starts, stops := strings.Count(strings.Join(names, " "), "content_block_start"), strings.Count(strings.Join(names, " "), "content_block_stop")
			if starts != stops || names[0] != "message_start" || names[len(names)-1] != "message_stop" {
				t.Errorf("events %v", names)
			}
		})
	}
}

func TestShapeStatuses(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		typ    string
	}{
		{core.BadInput(core.CodeInvalidValue, "x", "bad x"), 400, errInvalidRequest},
		{core.ErrUnauthorized, 401, errAuthentication},
		{core.ErrForbidden, 403, errPermission},
		{engine.ErrUnknownModel, 404, errNotFound},
		{core.ErrUnknownRoute, 404, errNotFound},
		{&http.MaxBytesError{Limit: 10}, 413, errTooLarge},
		{core.ErrTenantLimit, 429, errRateLimit},
		{engine.ErrQueueFull, StatusOverloaded, errOverloaded},
		{core.ErrBodyTimeout, 408, errTimeout},
		{engine.ErrTimeout, 504, errTimeout},
		{engine.ErrClosed, 503, errAPI},
		{errors.New("boom"), 500, errAPI},
	} {
		status, body := Shape(tc.err)
		if status != tc.status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message == "" {
			t.Errorf("%v: %d %+v, want %d %s", tc.err, status, body, tc.status, tc.typ)
		}
	}
}

// A prompt over what the window or the context holds is told in
// Anthropic's words, which Claude Code reads to compact its history.
func TestContextErrorsInAnthropicsWords(t *testing.T) {
	err := fmt.Errorf("window: %w", &engine.ContextLengthError{PromptTokens: 77266, Limit: 31744, Window: true, Reason: "the newest message …"})
	status, body := Shape(err)
	if want := "prompt is too long: 77266 tokens > 31744 maximum"; status != 400 || body.Error.Type != errInvalidRequest || body.Error.Message != want {
		t.Fatalf("%d %+v, want 400 %s %q", status, body, errInvalidRequest, want)
	}
}

// Hostile or odd content: every shape is read or refused with a 400
// naming where, never a panic.
func TestEngineMessagesEdges(t *testing.T) {
	for _, tc := range []struct {
		name, system, messages string
		want                   string // the messages' roles and contents, or the error's param
	}{
		{"string system", `"s"`, `[{"role":"user","content":"u"}]`, "system:s user:u"},
		{"null system", `null`, `[{"role":"user","content":"u"}]`, "user:u"},
		{"empty blocks", ``, `[{"role":"user","content":[]}]`, "user:"},
		{"system of images", `[{"type":"image"}]`, `[{"role":"user","content":"u"}]`, "param system[0].type"},
		{"system a number", `7`, `[{"role":"user","content":"u"}]`, "param system"},
		{"content missing", ``, `[{"role":"user"}]`, "param messages[0].content"},
		{"text without text", ``, `[{"role":"user","content":[{"type":"text"}]}]`, "param messages[0].content[0].text"},
		{"tool_result without id", ``, `[{"role":"user","content":[{"type":"tool_result","content":"r"}]}]`, "param messages[0].content[0].tool_use_id"},
		{"tool_result of images", ``, `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}]`, "param messages[0].content[0].content[0].type"},
		{"tool_result in an assistant turn", ``, `[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"a"}]},{"role":"user","content":"u"}]`, "param messages[0].content[0].type"},
		{"tool_use without a name", ``, `[{"role":"assistant","content":[{"type":"tool_use","input":{}}]},{"role":"user","content":"u"}]`, "param messages[0].content[0].name"},
		{"thinking block", ``, `[{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"a"}]},{"role":"user","content":"u"}]`, "assistant:a user:u"},
		{"thinking alone", ``, `[{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"}]},{"role":"user","content":"u"}]`, "assistant: user:u"},
		{"system mid-conversation", `"s"`, `[{"role":"user","content":"u"},{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"x"},{"role":"user","content":"v"}]`, "system:s user:u system:a\n\nb assistant:x user:v"},
		{"system without content", ``, `[{"role":"user","content":"u"},{"role":"system"}]`, "param messages[1].content"},
		{"thinking from the user", ``, `[{"role":"user","content":[{"type":"thinking","thinking":"hm"}]}]`, "param messages[0].content[0].type"},
		{"text around results", ``, `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"x"},{"type":"text","text":"b"},{"type":"text","text":"c"}]}]`,
			"user:a user:<tool_response>\n\n</tool_response> user:b\n\nc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []message
			if err := json.Unmarshal([]byte(tc.messages), &msgs); err != nil {
				t.Fatal(err)
			}
			out, err := engineMessages(json.RawMessage(tc.system), msgs)
			var in *core.InputError
			if errors.As(err, &in) {
				if got := "param " + in.Param(); got != tc.want {
					t.Errorf("error %q at %s, want %s", err, in.Param(), tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range out {
				got = append(got, m.Role+":"+m.Content)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("got %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}

// notRendering is a backend whose Prompter cannot render (a gateway over
// Ollamas), with a message counter.
type notRendering struct{ engine.Backend }

func (notRendering) Prompt(context.Context, engine.Request) ([]int, error) {
	return nil, fmt.Errorf("no backend can: %w", engine.ErrNotSupported)
}
func (notRendering) CountMessage(m engine.Message) int { return len(m.Content) }

func TestCountFallsBackToTheMessageCounter(t *testing.T) {
	n, err := count(context.Background(), notRendering{}, engine.Request{Messages: []engine.Message{{Content: "abc"}, {Content: "de"}}})
	if err != nil || n != 5 {
		t.Fatalf("count %d, %v; want the messages' 5", n, err)
	}
}
