package web

import (
	"bytes"
	"encoding/json"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
)

// completions serves POST /v1/completions, OpenAI's legacy text completion:
// the prompt is sent to the backend as raw text, without a chat template.
func (s *Server) completions(c *gin.Context, t *Turn) {
	var body completionRequest
	if err := s.decode(c, &body); err != nil {
		s.fail(c, err)
		return
	}
	_, info, err := s.selectBackend(t, body.Model)
	if err != nil {
		s.fail(c, err)
		return
	}
	req, err := body.request(info)
	if err != nil {
		s.fail(c, err)
		return
	}
	if req.Prompt, req.Tokens, err = prompt(body.Prompt); err != nil {
		s.fail(c, err)
		return
	}
	if body.Logprobs != nil {
		if err := logprobs(&req, true, body.Logprobs, "logprobs"); err != nil {
			s.fail(c, err)
			return
		}
	}
	if t.Conversation, err = conversationOf(c, body.PromptCacheKey); err != nil {
		s.fail(c, err)
		return
	}
	s.generate(c, t, req, reply{
		meta:         s.meta("cmpl-", info),
		stream:       body.Stream,
		includeUsage: body.includeUsage(),
		format:       &textFormat{logprobs: req.Logprobs},
	})
}

// prompt reads OpenAI's prompt field for one completion: a string, an
// array holding one string, or an array of token ids (which llama-server
// also accepts, and which engine.Request carries as Tokens). Several prompts
// in one request would mean several choices, which kvwin does not generate.
func prompt(raw json.RawMessage) (string, []int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, badInput(CodeMissingParameter, "prompt", "prompt is required")
	}
	var (
		text    string
		texts   []string
		tokens  []int
		invalid = badInput(CodeInvalidType, "prompt", "prompt must be a string, an array of one string, or an array of token ids")
	)
	switch {
	case raw[0] == '"':
		if json.Unmarshal(raw, &text) != nil {
			return "", nil, invalid
		}
	case json.Unmarshal(raw, &texts) == nil:
		if len(texts) == 0 {
			return "", nil, badInput(CodeMissingParameter, "prompt", "prompt must not be empty")
		}
		if len(texts) != 1 {
			return "", nil, badInput(CodeInvalidValue, "prompt", "prompt holds %d strings; kvwin completes exactly one per request", len(texts))
		}
		text = texts[0]
	case json.Unmarshal(raw, &tokens) == nil:
		if len(tokens) == 0 {
			return "", nil, badInput(CodeMissingParameter, "prompt", "prompt must not be empty")
		}
		return "", tokens, nil
	default:
		return "", nil, invalid
	}
	if text == "" {
		return "", nil, badInput(CodeMissingParameter, "prompt", "prompt must not be empty")
	}
	return text, nil, nil
}

// textFormat renders legacy completion objects. A stream's format counts
// the bytes sent, for logprobs' text offsets.
type textFormat struct {
	logprobs bool
	sent     int
}

var _ format = (*textFormat)(nil)

func (f *textFormat) complete(m meta, res engine.Result) any {
	u := usageOf(res)
	reason := finishReason(res)
	return textCompletion{
		ID: m.id, Object: objectTextCompletion, Created: m.created, Model: m.model,
		Choices: []textChoice{{Text: res.Text, FinishReason: &reason, Logprobs: textLogprobsOf(res.Logprobs, f.logprobs, 0)}},
		Usage:   &u,
	}
}

func (f *textFormat) chunk(m meta, p part) any {
	ch := textCompletion{ID: m.id, Object: objectTextCompletion, Created: m.created, Model: m.model}
	switch {
	case p.usage != nil:
		ch.Choices, ch.Usage = []textChoice{}, p.usage
	case p.open:
		return nil // legacy completions have no role chunk
	case p.finish != "":
		ch.Choices = []textChoice{{FinishReason: &p.finish}}
	default:
		ch.Choices = []textChoice{{Text: p.text, Logprobs: textLogprobsOf(p.logprobs, f.logprobs, f.sent)}}
		for _, lp := range p.logprobs {
			f.sent += len(lp.Bytes)
		}
	}
	return ch
}
