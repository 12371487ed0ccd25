package openai

import (
	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// completions serves POST /v1/completions, OpenAI's legacy text completion:
// the prompt is sent to the backend as raw text, without a chat template.
func (s *server) completions(c *gin.Context, t *core.Turn) error {
	var body completionRequest
	req, info, err := s.open(c, t, &body, &body.Params)
	if err != nil {
		return err
	}
	if req.Prompt, req.Tokens, err = core.Prompt(body.Prompt); err != nil {
		return err
	}
	if body.Logprobs != nil {
		if err := core.Logprobs(&req, true, body.Logprobs, "logprobs"); err != nil {
			return err
		}
	}
	if t.Conversation, err = core.ConversationOf(c, body.PromptCacheKey); err != nil {
		return err
	}
	s.generate(c, t, req, s.reply("cmpl-", info, &body.Params, &textFormat{logprobs: req.Logprobs}))
	return nil
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
	reason := core.FinishReason(res)
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
