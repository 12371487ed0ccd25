package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// roleDeveloper is OpenAI's newer name for the system role. kvwin's chat
// templates know only "system", so it is translated at the edge.
const roleDeveloper = "developer"

// chatCompletions serves POST /v1/chat/completions.
func (s *server) chatCompletions(c *gin.Context, t *core.Turn) error {
	var body chatRequest
	req, info, err := s.open(c, t, &body, &body.Params)
	if err != nil {
		return err
	}
	if err := s.CheckItems("messages", len(body.Messages)); err != nil {
		return err
	}
	if err := core.Logprobs(&req, body.Logprobs, body.TopLogprobs, "top_logprobs"); err != nil {
		return err
	}
	tools, err := toolcall.Read(body.Tools, body.ToolChoice)
	if err != nil {
		return err
	}
	if req.Messages, err = chatMessages(body.Messages); err != nil {
		return err
	}
	format, err := toolcall.ReadResponseFormat(body.ResponseFormat)
	if err != nil {
		return err
	}
	if err := toolcall.Apply(t, &req, tools, format); err != nil {
		return err
	}
	if err := s.ApplyWindow(c, t, body.PromptCacheKey, &req); err != nil {
		return err
	}
	s.generate(c, t, req, s.reply("chatcmpl-", info, &body.Params,
		newChatFormat(req.Logprobs, tools.Call, body.ParallelToolCalls != nil && !*body.ParallelToolCalls)))
	return nil
}

// chatMessages translates the client's messages into engine messages.
func chatMessages(in []chatMessage) ([]engine.Message, error) {
	if len(in) == 0 {
		return nil, core.BadInput(core.CodeMissingParameter, "messages", "messages must be a non-empty array")
	}
	out := make([]engine.Message, len(in))
	for i, m := range in {
		role := m.Role
		if role == roleDeveloper {
			role = engine.RoleSystem
		}
		if !engine.ValidRole(role) {
			return nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role is %q; it must be one of system, developer, user, assistant, tool", i, m.Role)
		}
		content, err := messageContent(m.Content, i)
		if err != nil {
			return nil, err
		}
		at := "" // the parameter only a tool call's error names: not built per message per turn
		if len(m.ToolCalls) > 0 {
			at = fmt.Sprintf("messages[%d]", i)
		}
		if out[i], err = toolcall.Message(role, content, m.ToolCalls, at); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// messageContent reads a message's content: a string, null or absent (an
// assistant message that only called tools), or an array of text parts.
// Parts are concatenated as they are, with no separator, so the text the
// model sees is exactly the client's bytes.
func messageContent(raw json.RawMessage, i int) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if s, ok := core.PlainString(raw); ok {
		return string(s), nil
	}
	param := fmt.Sprintf("messages[%d].content", i)
	var text string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", core.BadInput(core.CodeInvalidType, param, "%s is not a valid string", param)
		}
		return text, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", core.BadInput(core.CodeInvalidType, param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", core.BadInput(core.CodeInvalidValue, fmt.Sprintf("%s[%d].type", param, i),
				"%s[%d] has type %q; only \"text\" parts are supported", param, i, p.Type)
		}
		if p.Text == nil {
			return "", core.BadInput(core.CodeMissingParameter, fmt.Sprintf("%s[%d].text", param, i), "%s[%d] has no text", param, i)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// chatFormat renders chat completion objects. When the request offered
// tools, the answer goes through a callParser: calls become tool_calls,
// streamed as OpenAI streams them, and the finish reason "tool_calls".
type chatFormat struct {
	logprobs bool
	calls    *toolcall.Parser // nil without tools
}

var _ format = (*chatFormat)(nil)

// finishToolCalls is the finish reason of an answer that called tools.
const finishToolCalls = "tool_calls"

func newChatFormat(logprobs, tools, single bool) *chatFormat {
	f := &chatFormat{logprobs: logprobs}
	if tools {
		f.calls = &toolcall.Parser{NewID: func() string { return core.NewID("call_") }, Single: single}
	}
	return f
}

func (f *chatFormat) complete(m meta, res engine.Result) any {
	msg := chatOutput{Role: engine.RoleAssistant, Content: &res.Text}
	reason := core.FinishReason(res)
	if f.calls != nil {
		got := f.calls.Feed(res.Text)
		content := got.Content + f.calls.Flush().Content
		msg.Content, msg.ToolCalls = &content, f.calls.Calls
		if len(msg.ToolCalls) > 0 {
			if strings.TrimSpace(content) == "" {
				msg.Content = nil
			}
			if reason == engine.FinishStop {
				reason = finishToolCalls
			}
		}
	}
	return chatCompletion{
		ID: m.id, Object: objectChatCompletion, Created: m.created, Model: m.model,
		Choices: []chatChoice{{
			Message:      msg,
			Logprobs:     chatLogprobsOf(res.Logprobs, f.logprobs),
			FinishReason: reason,
		}},
		Usage: usageOf(res),
	}
}

func (f *chatFormat) chunk(m meta, p part) any {
	ch := chatChunk{ID: m.id, Object: objectChatChunk, Created: m.created, Model: m.model}
	var choice chatChunkChoice
	switch {
	case p.usage != nil:
		ch.Choices, ch.Usage = []chatChunkChoice{}, p.usage
		return ch
	case p.open:
		empty := ""
		choice.Delta = chatDelta{Role: engine.RoleAssistant, Content: &empty}
	case p.finish != "":
		reason := p.finish
		if f.calls != nil {
			if rest := f.calls.Flush().Content; rest != "" {
				choice.Delta.Content = &rest
			}
			if len(f.calls.Calls) > 0 && reason == engine.FinishStop {
				reason = finishToolCalls
			}
		}
		choice.FinishReason = &reason
	case f.calls != nil:
		got := f.calls.Feed(p.text)
		if got.Content != "" {
			choice.Delta.Content = &got.Content
		}
		choice.Delta.ToolCalls = got.Deltas
		choice.Logprobs = chatLogprobsOf(p.logprobs, f.logprobs)
		if got.Content == "" && len(got.Deltas) == 0 && len(p.logprobs) == 0 {
			return nil // held back: nothing to send yet
		}
	default:
		choice.Delta.Content = &p.text
		choice.Logprobs = chatLogprobsOf(p.logprobs, f.logprobs)
	}
	ch.Choices = []chatChunkChoice{choice}
	return ch
}
