package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

func seqIDs() func(string) string {
	n := 0
	return func(prefix string) string { n++; return fmt.Sprintf("%s%d", prefix, n) }
}

func TestInputMessages(t *testing.T) {
	call := `<tool_call>
{"name": "f", "arguments": {"x": 1}}
</tool_call>`
	cases := []struct {
		name  string
		input string
		want  []engine.Message
		items int
	}{
		{"string", `"hi"`, []engine.Message{{Role: "user", Content: "hi"}}, 1},
		{"parts and developer", `[{"role":"developer","content":"be brief"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]`,
			[]engine.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "ab"}}, 2},
		{"an answer's text and call are one assistant turn", `[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"output_text","text":"Let me see."}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\": 1}"},{"type":"function_call_output","call_id":"c1","output":"42"}]`,
			[]engine.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "Let me see.\n" + call}, {Role: "user", Content: "<tool_response>\n42\n</tool_response>"}}, 4},
		{"a call alone", `[{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\": 1}"}]`,
			[]engine.Message{{Role: "assistant", Content: call}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, items, err := inputMessages(json.RawMessage(c.input), seqIDs())
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) || len(items) != c.items {
				t.Fatalf("got %q (%d items), want %q (%d)", got, len(items), c.want, c.items)
			}
			for _, it := range items {
				if it.ID == "" {
					t.Fatalf("item %+v has no id", it)
				}
			}
		})
	}
}

func TestBadInputNamesTheParameter(t *testing.T) {
	cases := []struct{ body, param string }{
		{`{"input":"x","reasoning":{"effort":"huge"}}`, "reasoning.effort"},
		{`{"input":"x","reasoning":{"summary":"long"}}`, "reasoning.summary"},
		{`{"input":"x","background":true}`, "background"},
		{`{"input":"x","include":["message.output_text.logprobs"]}`, "include[0]"},
		{`{"input":"x","metadata":{"a":1}}`, "metadata"},
		{`{"input":"x","metadata":{` + metadataPairs(17) + `}}`, "metadata"},
		{`{"input":"x","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, "metadata"},
		{`{"input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, "metadata"},
		{`{"input":"x","text":{"verbosity":"loud"}}`, "text.verbosity"},
		{`{"input":"x","temperature":"hot"}`, "temperature"},
	}
	for _, c := range cases {
		var b responsesRequest
		err := decodeResponses(json.RawMessage(c.body), &b)
		var in *core.InputError
		if !errors.As(err, &in) || in.Param() != c.param {
			t.Errorf("%s: %v, want a 400 naming %s", c.body, err, c.param)
		}
	}
	for _, c := range []struct{ input, param string }{
		{`[]`, "input"},
		{`[{"type":"web_search_call"}]`, "input[0].type"},
		{`[{"role":"tool","content":"x"}]`, "input[0].role"},
		{`[{"type":"function_call","name":"f"}]`, "input[0]"},
		{`[{"type":"function_call_output","output":"x"}]`, "input[0].call_id"},
	} {
		_, _, err := inputMessages(json.RawMessage(c.input), seqIDs())
		var in *core.InputError
		if !errors.As(err, &in) || in.Param() != c.param {
			t.Errorf("input %s: %v, want a 400 naming %s", c.input, err, c.param)
		}
	}
	if _, _, err := readResponseTools([]responseTool{{Type: "function", Name: "f"}}, json.RawMessage(`{"type":"function","name":"g"}`)); err == nil {
		t.Error("tool_choice naming a function not among the tools was accepted")
	}
	for _, tc := range []struct {
		tools []responseTool
		param string
	}{
		{[]responseTool{{Type: "function", Name: "f"}, {Type: "function", Name: "f"}}, "tools[1].name"},
		{[]responseTool{{Type: "function", Name: "n.f"}, {Type: "namespace", Name: "n", Tools: []responseTool{{Type: "function", Name: "f"}}}}, "tools[1].tools[0].name"},
	} {
		_, _, err := readResponseTools(tc.tools, nil)
		var in *core.InputError
		if !errors.As(err, &in) || in.Param() != tc.param {
			t.Errorf("two tools of one name: %v, want a 400 naming %s", err, tc.param)
		}
	}
	if _, _, err := readResponseTools(nil, json.RawMessage(`"bogus"`)); err == nil {
		t.Error(`tool_choice "bogus" without tools was accepted`)
	}
	if _, _, err := readResponseTools([]responseTool{{Name: "f"}}, nil); err == nil {
		t.Error("a tool without a type was accepted")
	}
	if _, _, err := readResponseTools([]responseTool{{Type: "web_search"}}, json.RawMessage(`{"type":"web_search"}`)); err == nil {
		t.Error("tool_choice forcing a built-in tool was accepted")
	}
}

// What Codex sends as tools: functions, a namespace of functions, and
// OpenAI's own web_search. The namespace's functions reach the model as
// namespace.name, and its calls come back under their own name and
// namespace; web_search, which kvwin does not run, is offered to no model;
// errors name the tool where the request has it.
func TestNamespacesAndHostedTools(t *testing.T) {
	tools := []responseTool{
		{Type: "function", Name: "exec_command", Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`)},
		{Type: "namespace", Name: "multi_agent_v1", Tools: []responseTool{
			{Type: "function", Name: "close_agent", Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)},
			{Type: "custom", Name: "freeform"},
		}},
		{Type: "web_search"},
	}
	m, names, err := readResponseTools(tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	sys := m.System()
	if !strings.Contains(sys, `"name":"multi_agent_v1.close_agent"`) || !strings.Contains(sys, `"name":"exec_command"`) ||
		strings.Contains(sys, "web_search") || strings.Contains(sys, "freeform") {
		t.Errorf("the model was offered:\n%s", sys)
	}
	var stored []*responseObject
	e := newTestEncoder(true, &stored)
	e.names = names
	o := e.Whole(engine.Result{Text: "<tool_call>\n{\"name\": \"multi_agent_v1.close_agent\", \"arguments\": {\"id\": \"a\"}}\n</tool_call>", FinishReason: engine.FinishStop}).(*responseObject)
	if len(o.Output) != 1 || o.Output[0].Name != "close_agent" || o.Output[0].Namespace != "multi_agent_v1" {
		t.Errorf("output %+v, want close_agent in namespace multi_agent_v1", o.Output)
	}
	// Named by tool_choice with its namespace; in history, by its item.
	if _, _, err := readResponseTools(tools, json.RawMessage(`{"type":"function","name":"close_agent","namespace":"multi_agent_v1"}`)); err != nil {
		t.Errorf("tool_choice naming the namespace's function: %v", err)
	}
	msgs, items, err := inputMessages(json.RawMessage(`[{"type":"reasoning","encrypted_content":"gAAA"},{"type":"function_call","call_id":"c1","name":"close_agent","namespace":"multi_agent_v1","arguments":"{}"}]`), seqIDs())
	if err != nil || len(msgs) != 1 || !strings.Contains(msgs[0].Content, `"name": "multi_agent_v1.close_agent"`) || len(items) != 1 || items[0].Namespace != "multi_agent_v1" {
		t.Errorf("history %q, items %+v, %v: want the call as the model wrote it, the reasoning item dropped", msgs, items, err)
	}
	// A forced call's schema the grammar cannot hold, named in its namespace.
	loose := []responseTool{{Type: "web_search"}, {Type: "namespace", Name: "ns", Tools: []responseTool{
		{Type: "function", Name: "f", Parameters: json.RawMessage(`{"type":"object","propertyNames":{}}`)}}}}
	var in *core.InputError
	if _, _, err := readResponseTools(loose, json.RawMessage(`"required"`)); !errors.As(err, &in) || in.Param() != "tools[1].tools[0].parameters" {
		t.Errorf("%v, want a 400 at tools[1].tools[0].parameters", err)
	}
	dup := []responseTool{{Type: "function", Name: "ns.f"}, loose[1]}
	if _, _, err := readResponseTools(dup, nil); err == nil {
		t.Error("a function named as a namespace's function was accepted")
	}
}

// newTestEncoder is an encoder with tools (or not) that records what it
// stored.
func newTestEncoder(tools bool, stored *[]*responseObject) *responsesEncoder {
	ids := seqIDs()
	e := &responsesEncoder{base: responseObject{ID: "resp_1", Object: objectResponse, Output: []outputItem{}}, newID: ids,
		now: func() time.Time { return time.Unix(100, 0) }, open: -1,
		finish: func(_ engine.Result, o *responseObject) { *stored = append(*stored, o) }}
	if tools {
		e.calls = &toolcall.Parser{NewID: func() string { return ids("call_") }}
	}
	return e
}

// Streamed in any pieces, the events add up to the whole response: the
// same items, text and arguments, and sequence numbers 0, 1, 2, …
func TestStreamedEventsAddUpToTheWholeResponse(t *testing.T) {
	answer := "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	res := engine.Result{Text: answer, FinishReason: engine.FinishStop, Timings: engine.Timings{PromptTokens: 50, CachedTokens: 40, GeneratedTokens: 30}}
	for _, tools := range []bool{false, true} {
		for _, size := range []int{1, 3, 7, len(answer)} {
			var stored []*responseObject
			whole := newTestEncoder(tools, &stored).Whole(res).(*responseObject)
			e := newTestEncoder(tools, &stored)
			evs := e.Open(engine.Event{First: true})
			for i := 0; i < len(answer); i += size {
				evs = append(evs, e.Text(answer[i:min(i+size, len(answer))])...)
			}
			evs = append(evs, e.End(res)...)
			text, args := "", ""
			for i, v := range evs {
				ev := v.(streamEvent)
				if ev.SequenceNumber != i {
					t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
				}
				switch ev.Type {
				case evTextDelta:
					text += *ev.Delta
				case evArgsDelta:
					args += *ev.Delta
				}
			}
			last := evs[len(evs)-1].(streamEvent)
			if last.Type != evCompleted || len(stored) != 2 || last.Response != stored[1] {
				t.Fatalf("tools %v size %d: last event %s, %d stored", tools, size, last.Type, len(stored))
			}
			got := last.Response
			if len(got.Output) != len(whole.Output) || got.Usage.InputTokensDetails.CachedTokens != 40 {
				t.Fatalf("tools %v size %d: streamed %+v, whole %+v", tools, size, got.Output, whole.Output)
			}
			for i := range got.Output {
				g, w := got.Output[i], whole.Output[i]
				if g.Type != w.Type || g.Status != statusCompleted || g.Type == itemMessage && (*g.Content)[0].Text != (*w.Content)[0].Text ||
					g.Type == itemFunctionCall && (*g.Arguments != *w.Arguments || g.Name != w.Name) {
					t.Fatalf("tools %v size %d: item %d streamed %+v, whole %+v", tools, size, i, g, w)
				}
			}
			wantText, wantArgs := answer, ""
			if tools {
				wantText, wantArgs = "Checking.", `{"city": "Paris"}`
			}
			if strings.TrimSpace(text) != wantText || args != wantArgs {
				t.Fatalf("tools %v size %d: deltas %q and %q, want %q and %q", tools, size, text, args, wantText, wantArgs)
			}
		}
	}
}

func TestIncompleteAtTheTokenLimit(t *testing.T) {
	var stored []*responseObject
	o := newTestEncoder(false, &stored).Whole(engine.Result{Text: "abc", FinishReason: engine.FinishLength}).(*responseObject)
	if o.Status != "incomplete" || o.IncompleteDetails == nil || o.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("status %s, details %+v", o.Status, o.IncompleteDetails)
	}
}

// FuzzResponsesRequest: any body is a translation or a 400, never a panic.
func FuzzResponsesRequest(f *testing.F) {
	many := func(item string, n int) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	for _, s := range []string{
		// Many items (issue 45): thousands of input items, and one item of
		// thousands of content parts.
		`{"input":[` + many(`{"role":"user","content":"x"}`, 200) + `]}`,
		`{"input":[{"role":"user","content":[` + many(`{"type":"input_text","text":"x"}`, 200) + `]}]}`,
		`{"input":"hi"}`,
		`{"input":[{"role":"assistant","content":[{"type":"output_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},"text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`,
		`{"input":[{"type":"function_call"}],"include":["x"],"metadata":{"a":"b"}}`,
		`{"input":[{"type":"reasoning"},{"type":"function_call","call_id":"c","name":"f","namespace":"n","arguments":"{}"}],"reasoning":{"summary":"auto"},"include":["reasoning.encrypted_content"],` +
			`"tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"},{"type":"custom","name":"g"}]},{"type":"web_search"}],"tool_choice":{"type":"function","name":"f","namespace":"n"}}`,
		// Issue 45's shapes: names no store can keep, repeated item ids and
		// tool names, metadata past OpenAI's bounds, values out of their sets.
		`{"input":"x","prompt_cache_key":"conv\u0000x","previous_response_id":"resp_\u0000"}`,
		`{"input":[{"id":"m1","role":"user","content":"a"},{"id":"m1","role":"user","content":"b"}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"}]},{"type":"function","name":"n.f"}]}`,
		`{"input":"x","metadata":{"` + strings.Repeat("k", 65) + `":"` + strings.Repeat("v", 513) + `"},"text":{"verbosity":"loud"},"tool_choice":"bogus"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var b responsesRequest
		if err := decodeResponses(json.RawMessage(body), &b); err != nil {
			return
		}
		_ = core.CheckName("prompt_cache_key", b.PromptCacheKey, core.MaxConversationBytes)
		_ = core.CheckName("previous_response_id", b.PreviousResponseID, maxResponseIDBytes)
		_, _, _ = inputMessages(b.Input, seqIDs())
		_, _, _ = readResponseTools(b.Tools, b.ToolChoice)
		_, _ = readTextFormat(b.Text)
	})
}

// metadataPairs is n pairs of metadata's JSON, "k0":"v", "k1":"v", ….
func metadataPairs(n int) string {
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf("%q:\"v\"", fmt.Sprint("k", i))
	}
	return strings.Join(pairs, ",")
}

// What OpenAI's bounds allow is accepted: 16 pairs, 64-character keys,
// 512-character values (characters, not bytes), each verbosity.
func TestMetadataAndVerbosityWithinBounds(t *testing.T) {
	for _, body := range []string{
		`{"input":"x","metadata":{` + metadataPairs(16) + `}}`,
		`{"input":"x","metadata":{"` + strings.Repeat("é", 64) + `":"` + strings.Repeat("é", 512) + `"}}`,
		`{"input":"x","text":{"verbosity":"low"}}`,
		`{"input":"x","text":{"verbosity":"medium"}}`,
		`{"input":"x","text":{"verbosity":"high"}}`,
	} {
		var b responsesRequest
		if err := decodeResponses(json.RawMessage(body), &b); err != nil {
			t.Errorf("%.80s: %v", body, err)
		}
	}
}
