package llamacpp

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// renderer turns chat messages into prompt tokens.
type renderer interface {
	render(msgs []engine.Message) ([]int, error)
	name() string
}

// newRenderer picks how messages become tokens for this model:
//   - ChatML (the test model's template and many real models'): rendered
//     natively, message by message, with the control tokens inserted as ids
//     and message text tokenized as plain text. Text a client sends can never
//     become a control token, and each message tokenizes the same way every
//     turn, which keeps the cached prefix stable.
//   - another template llama.cpp recognises: llama_chat_apply_template, then
//     tokenized with special tokens parsed, as llama-server does.
//   - no template, or one llama.cpp does not know: ChatML as plain text, with
//     a warning. This is the documented fallback.
func newRenderer(m *llama.Model, tmpl string, log *slog.Logger) renderer {
	if strings.Contains(tmpl, "<|im_start|>") {
		start, errS := m.Tokenize("<|im_start|>", false, true)
		end, errE := m.Tokenize("<|im_end|>", false, true)
		if errS == nil && errE == nil && len(start) == 1 && len(end) == 1 {
			return &chatML{m: m, start: start, end: end}
		}
	}
	if tmpl != "" {
		if _, err := applyTemplate(tmpl, []engine.Message{{Role: "user", Content: "hi"}}); err == nil {
			return &builtin{m: m, tmpl: tmpl}
		}
	}
	log.Warn("chat template not supported; falling back to ChatML as plain text", "template_len", len(tmpl))
	return &chatML{m: m}
}

// chatML renders <|im_start|>role\ncontent<|im_end|>\n per message and
// <|im_start|>assistant\n at the end. start and end are the control tokens;
// nil means the model has none and the markers are plain text.
type chatML struct {
	m          *llama.Model
	start, end []int
}

func (c *chatML) name() string {
	if c.start == nil {
		return "chatml-fallback"
	}
	return "chatml"
}

func (c *chatML) marker(ids []int, text string) ([]int, error) {
	if ids != nil {
		return ids, nil
	}
	return c.m.Tokenize(text, false, false)
}

func (c *chatML) render(msgs []engine.Message) ([]int, error) {
	var out []int
	if c.m.AddBOSToken() {
		bos, err := c.m.Tokenize("", true, false)
		if err != nil {
			return nil, err
		}
		out = append(out, bos...)
	}
	add := func(ids []int, err error) error {
		if err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		out = append(out, ids...)
		return nil
	}
	turn := func(role, content string, closed bool) error {
		if err := add(c.marker(c.start, "<|im_start|>")); err != nil {
			return err
		}
		if err := add(c.m.Tokenize(role+"\n"+content, false, false)); err != nil {
			return err
		}
		if !closed {
			return nil
		}
		if err := add(c.marker(c.end, "<|im_end|>")); err != nil {
			return err
		}
		return add(c.m.Tokenize("\n", false, false))
	}
	for _, msg := range msgs {
		if err := turn(msg.Role, msg.Content, true); err != nil {
			return nil, err
		}
	}
	if err := turn("assistant", "", false); err != nil {
		return nil, err
	}
	return out, nil
}

// builtin renders with llama.cpp's template matcher.
type builtin struct {
	m    *llama.Model
	tmpl string
}

func (b *builtin) name() string { return "llama.cpp" }

func (b *builtin) render(msgs []engine.Message) ([]int, error) {
	text, err := applyTemplate(b.tmpl, msgs)
	if err != nil {
		return nil, err
	}
	return b.m.Tokenize(text, true, true)
}
