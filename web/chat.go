package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
)

// roleDeveloper is OpenAI's newer name for the system role. kvwin's chat
// templates know only "system", so it is translated at the edge.
const roleDeveloper = "developer"

// chatCompletions serves POST /v1/chat/completions.
func (s *Server) chatCompletions(c *gin.Context) {
	var body chatRequest
	if err := s.decode(c, &body); err != nil {
		s.fail(c, err)
		return
	}
	_, info, err := s.selectBackend(c, body.Model)
	if err != nil {
		s.fail(c, err)
		return
	}
	req, err := body.request(info)
	if err != nil {
		s.fail(c, err)
		return
	}
	if req.Messages, err = chatMessages(body.Messages); err != nil {
		s.fail(c, err)
		return
	}
	if err := s.applyWindow(c, body.PromptCacheKey, &req); err != nil {
		s.fail(c, err)
		return
	}
	s.generate(c, info, req, reply{
		meta:         s.meta("chatcmpl-", info),
		stream:       body.Stream,
		includeUsage: body.includeUsage(),
		format:       chatFormat{},
	})
}

// chatMessages translates the client's messages into engine messages.
func chatMessages(in []chatMessage) ([]engine.Message, error) {
	if len(in) == 0 {
		return nil, badInput(CodeMissingParameter, "messages", "messages must be a non-empty array")
	}
	out := make([]engine.Message, len(in))
	for i, m := range in {
		role := m.Role
		if role == roleDeveloper {
			role = engine.RoleSystem
		}
		if !engine.ValidRole(role) {
			return nil, badInput(CodeInvalidValue, fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role is %q; it must be one of system, developer, user, assistant, tool", i, m.Role)
		}
		content, err := messageContent(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
		}
		out[i] = engine.Message{Role: role, Content: content}
	}
	return out, nil
}

// messageContent reads a message's content: a string, null or absent (an
// assistant message that only called tools), or an array of text parts.
// Parts are concatenated as they are, with no separator, so the text the
// model sees is exactly the client's bytes.
func messageContent(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var text string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", badInput(CodeInvalidType, param, "%s is not a valid string", param)
		}
		return text, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badInput(CodeInvalidType, param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", badInput(CodeInvalidValue, fmt.Sprintf("%s[%d].type", param, i),
				"%s[%d] has type %q; only \"text\" parts are supported", param, i, p.Type)
		}
		if p.Text == nil {
			return "", badInput(CodeMissingParameter, fmt.Sprintf("%s[%d].text", param, i), "%s[%d] has no text", param, i)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// chatFormat renders chat completion objects.
type chatFormat struct{}

var _ format = chatFormat{}

func (chatFormat) complete(m meta, res engine.Result) any {
	return chatCompletion{
		ID: m.id, Object: objectChatCompletion, Created: m.created, Model: m.model,
		Choices: []chatChoice{{
			Message:      chatOutput{Role: engine.RoleAssistant, Content: res.Text},
			FinishReason: finishReason(res),
		}},
		Usage: usageOf(res),
	}
}

func (chatFormat) chunk(m meta, p part) any {
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
		choice.FinishReason = &p.finish
	default:
		choice.Delta.Content = &p.text
	}
	ch.Choices = []chatChunkChoice{choice}
	return ch
}
