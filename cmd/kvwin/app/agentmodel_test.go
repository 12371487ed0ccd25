package app_test

import (
	"path/filepath"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/gguf"
)

// TestAgentModelEndsAndCallsTools: the agent test model, served by the
// real engine from its GGUF alone, answers "Done." and stops; with tools
// offered it answers the call its ask ends with, as a parsed tool call on
// the OpenAI, Anthropic and Responses routes; after the tool's result it
// answers "Done." again. Every answer ends by the model's own end of turn,
// far inside max_tokens.
func TestAgentModelEndsAndCallsTools(t *testing.T) {
	model := filepath.Join(t.TempDir(), "agent.gguf")
	if err := gguf.WriteTiny(model, gguf.DefaultAgentConfig()); err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, func(f *app.Config) { f.Model, f.Ctx = model, 8192 })
	const call = `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`
	schema := map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": schema}}}

	type chatReply struct {
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	chat := func(msgs []any, withTools bool) chatReply {
		body := map[string]any{"model": "agent", "max_tokens": 400, "temperature": 1, "messages": msgs}
		if withTools {
			body["tools"] = tools
		}
		var r chatReply
		postJSON(t, a.URL()+"/v1/chat/completions", body, &r)
		return r
	}
	user := func(s string) map[string]any { return map[string]any{"role": "user", "content": s} }

	r := chat([]any{user("list the files here")}, true)
	if c := r.Choices[0]; c.Message.Content == nil || *c.Message.Content != "Done." || c.FinishReason != "stop" {
		t.Fatalf("a plain ask: %+v", c)
	}
	r = chat([]any{user(call)}, false)
	if c := r.Choices[0]; c.Message.Content == nil || *c.Message.Content != "Done." || len(c.Message.ToolCalls) != 0 {
		t.Fatalf("a call asked without tools: %+v", c)
	}
	r = chat([]any{user("Please:\n" + call)}, true)
	c := r.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" ||
		c.Message.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` {
		t.Fatalf("a call: %+v", c)
	}
	r = chat([]any{user("Please:\n" + call),
		map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": c.Message.ToolCalls[0].ID, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": c.Message.ToolCalls[0].ID, "content": "sunny, 21 C"}}, true)
	if c := r.Choices[0]; c.Message.Content == nil || *c.Message.Content != "Done." || c.FinishReason != "stop" {
		t.Fatalf("after the tool's result: %+v", c)
	}

	var m struct {
		Content []struct {
			Type, Name string
			Input      map[string]any
		}
		StopReason string `json:"stop_reason"`
	}
	postJSON(t, a.URL()+"/v1/messages", map[string]any{"model": "agent", "max_tokens": 400,
		"tools":    []any{map[string]any{"name": "get_weather", "input_schema": schema}},
		"messages": []any{user(call)}}, &m)
	if m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Input["city"] != "Paris" {
		t.Fatalf("messages: %+v", m)
	}

	var resp struct {
		Status string
		Output []struct{ Type, Name, Arguments string }
	}
	postJSON(t, a.URL()+"/v1/responses", map[string]any{"model": "agent", "input": call,
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": schema}}}, &resp)
	if resp.Status != "completed" || len(resp.Output) != 1 || resp.Output[0].Type != "function_call" || resp.Output[0].Arguments != `{"city": "Paris"}` {
		t.Fatalf("responses: %+v", resp)
	}
	postJSON(t, a.URL()+"/v1/responses", map[string]any{"model": "agent", "input": "hello"}, &resp)
	if resp.Status != "completed" || len(resp.Output) != 1 || resp.Output[0].Type != "message" {
		t.Fatalf("responses, a plain ask: %+v", resp)
	}
}
