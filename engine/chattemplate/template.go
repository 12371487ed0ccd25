// Package chattemplate renders a model's Jinja chat template (the GGUF key
// tokenizer.chat_template) into prompt text, split into the template's own
// structure and the messages' text, so a tokenizer can parse control tokens
// in the first and never in the second.
//
// Rendering is done by github.com/ardanlabs/jinja, a pure-Go Jinja engine
// written for GGUF chat templates (HF's extensions: raise_exception, tojson,
// loop variables, namespaces, strftime_now).
package chattemplate

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"

	"kvwin/engine"
)

// ErrRender wraps a template's refusal of a conversation (raise_exception,
// a role it does not support, roles that do not alternate): the request is
// at fault, not the server.
var ErrRender = errors.New("chat template rejected the conversation")

// Config is what a template needs besides its source.
type Config struct {
	Source string // the Jinja text
	BOS    string // the model's BOS token text (bos_token)
	EOS    string // the model's EOS token text (eos_token)
	// Variants are named alternatives (tokenizer.chat_template.NAME), such
	// as "tool_use", used when a request has tools.
	Variants map[string]string
}

// Piece is a run of rendered text: the template's structure, or a
// message's text (Content), which must be tokenized as plain text.
type Piece struct {
	Text    string
	Content bool
}

// Template is a compiled chat template with its variants. It is safe for
// concurrent use.
type Template struct {
	main, toolUse *jinja.Template
	bos, eos      string
	open, close   string // sentinels around message text, unguessable
	// Stable: rendering a conversation with one more turn keeps the
	// earlier rendering as its prefix (checked on a probe at Parse).
	Stable bool
	// ToolCalls: given tools, the template renders them and asks for
	// calls in the <tool_call> convention (Hermes, Qwen).
	ToolCalls bool
}

// Probe is the conversation every template must render at start: three
// turns that alternate, as the strictest templates (Gemma, Mistral) demand.
var Probe = []engine.Message{
	{Role: engine.RoleUser, Content: "Hello."},
	{Role: engine.RoleAssistant, Content: "Hi."},
	{Role: engine.RoleUser, Content: "Bye."},
}

// Parse compiles the template and its variants and renders the probe
// conversation, so a template that cannot work fails at start, naming the
// problem, rather than on a client's request.
func Parse(c Config) (*Template, error) {
	if strings.TrimSpace(c.Source) == "" {
		return nil, errors.New("chat template: empty")
	}
	main, err := jinja.Compile(c.Source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	t := &Template{main: main, bos: c.BOS, eos: c.EOS}
	if src := c.Variants["tool_use"]; src != "" {
		if t.toolUse, err = jinja.Compile(src); err != nil {
			return nil, fmt.Errorf("chat template tool_use: %w", err)
		}
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	t.open = "\uE000" + hex.EncodeToString(nonce) + "\uE001"
	t.close = "\uE002" + hex.EncodeToString(nonce) + "\uE003"

	first, err := t.Text(Probe[:1], nil, true)
	if err != nil {
		return nil, fmt.Errorf("chat template: probe conversation: %w", err)
	}
	all, err := t.Text(Probe, nil, true)
	if err != nil {
		return nil, fmt.Errorf("chat template: probe conversation: %w", err)
	}
	if !strings.Contains(all, Probe[2].Content) {
		return nil, errors.New("chat template: probe conversation: the rendering leaves out the last message's text")
	}
	t.Stable = strings.HasPrefix(all, first)
	probeTools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "kvwin_probe_tool",
		"description": "A probe.", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}}
	if withTools, err := t.Text(Probe[:1], probeTools, true); err == nil {
		t.ToolCalls = strings.Contains(withTools, "kvwin_probe_tool") && strings.Contains(withTools, "<tool_call>")
	}
	return t, nil
}

// pick returns the template for a request: the tool_use variant when there
// are tools and the model has one.
func (t *Template) pick(tools []any) *jinja.Template {
	if len(tools) > 0 && t.toolUse != nil {
		return t.toolUse
	}
	return t.main
}

// data is the template's context, as Hugging Face's apply_chat_template
// passes it. Tools are decoded values, or JSON text (json.RawMessage) whose
// key order is kept.
func (t *Template) data(msgs []engine.Message, tools []any, addGen bool, wrap func(string) string) (map[string]jinja.Value, error) {
	// Built as the engine's values directly, which is what FromGoValue of
	// a map[string]any per message gives (keys in sorted order) without
	// reflecting over it: a long conversation's messages are converted
	// every turn.
	ms := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v := jinja.NewDict()
		d := v.AsDict()
		d.Set("content", jinja.NewString(wrap(m.Content)))
		d.Set("role", jinja.NewString(m.Role))
		ms[i] = v
	}
	d := map[string]jinja.Value{
		"messages":              jinja.NewList(ms),
		"add_generation_prompt": jinja.NewBool(addGen),
		"bos_token":             jinja.NewString(t.bos),
		"eos_token":             jinja.NewString(t.eos),
	}
	if len(tools) > 0 {
		items := make([]jinja.Value, len(tools))
		for i, tool := range tools {
			v, err := toolValue(tool)
			if err != nil {
				return nil, fmt.Errorf("%w: tools[%d]: %w", ErrRender, i, err)
			}
			items[i] = v
		}
		d["tools"] = jinja.NewList(items)
	}
	return d, nil
}

// Text renders the conversation as plain text: what the reference
// implementation (transformers' apply_chat_template) produces.
func (t *Template) Text(msgs []engine.Message, tools []any, addGen bool) (string, error) {
	data, err := t.data(msgs, tools, addGen, func(s string) string { return s })
	if err != nil {
		return "", err
	}
	out, err := t.pick(tools).RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	return out, nil
}

// Render renders the conversation as pieces whose texts concatenate to
// Text's rendering. Message text is marked Content. ok is false when the
// template cuts or transforms message text beyond trimming it: the pieces
// then only approximate the reference, and part of a message's text may
// sit in a structure piece.
func (t *Template) Render(msgs []engine.Message, tools []any, addGen bool) (pieces []Piece, ok bool, err error) {
	for _, m := range msgs {
		if strings.Contains(m.Content, t.open) || strings.Contains(m.Content, t.close) {
			// Unguessable, so only a bug reaches here.
			return nil, false, fmt.Errorf("%w: message text holds the renderer's sentinel", ErrRender)
		}
	}
	data, err := t.data(msgs, tools, addGen, func(s string) string {
		if s == "" {
			return s // nothing to protect; keeps "if content" tests true to the original
		}
		return t.open + s + t.close
	})
	if err != nil {
		return nil, false, err
	}
	marked, err := t.pick(tools).RenderValues(data)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrRender, err)
	}
	pieces, balanced := t.split(marked)
	plain, err := t.Text(msgs, tools, addGen)
	if err != nil {
		return nil, false, err
	}
	if aligned, ok := align(pieces, plain); ok && balanced {
		return aligned, true, nil
	}
	return pieces, false, nil
}

// RenderChatML is Render for a template that writes ChatML
// (<|im_start|>role\ncontent<|im_end|>\n per message, <|im_start|>assistant\n
// to generate), without running the template: the same pieces, written
// directly. The caller has checked that t renders as ChatML does; tools are
// not rendered (a template that renders them is not ChatML's). ok is always
// true: the text is never cut.
func (t *Template) RenderChatML(msgs []engine.Message, addGen bool) (pieces []Piece, ok bool, err error) {
	pieces, err = t.AppendChatML(make([]Piece, 0, 2*len(msgs)+1), msgs, false, addGen)
	return pieces, err == nil, err
}

// AppendChatML appends to dst the pieces RenderChatML gives for msgs where
// they follow earlier messages: after says a rendering ended with the text
// of the message before msgs, whose "<|im_end|>\n" is still to be written
// (the first piece then begins with it). A rendering of a conversation is
// therefore the rendering of its first k messages through the k-th one's
// text, followed by AppendChatML of the rest with after set: a turn renders
// only its new messages.
func (t *Template) AppendChatML(dst []Piece, msgs []engine.Message, after, addGen bool) ([]Piece, error) {
	var structure strings.Builder
	if after {
		structure.WriteString("<|im_end|>\n")
	}
	for _, m := range msgs {
		if strings.Contains(m.Content, t.open) || strings.Contains(m.Content, t.close) {
			// Render would find the text cut; refused the same way.
			return nil, fmt.Errorf("%w: message text holds the renderer's sentinel", ErrRender)
		}
		structure.WriteString("<|im_start|>")
		structure.WriteString(m.Role)
		structure.WriteString("\n")
		if m.Content != "" {
			dst = append(dst, Piece{Text: structure.String()}, Piece{Text: m.Content, Content: true})
			structure.Reset()
		}
		structure.WriteString("<|im_end|>\n")
	}
	if addGen {
		structure.WriteString("<|im_start|>assistant\n")
	}
	if structure.Len() > 0 {
		dst = append(dst, Piece{Text: structure.String()})
	}
	return dst, nil
}

// split cuts a marked rendering into pieces. A sentinel without its pair
// (the template cut message text) is dropped, and balanced is false: part
// of a message's text may then sit in a structure piece.
func (t *Template) split(s string) (out []Piece, balanced bool) {
	balanced = strings.Count(s, t.open) == strings.Count(s, t.close)
	add := func(text string, content bool) {
		if text == "" {
			return
		}
		if n := len(out); n > 0 && out[n-1].Content == content {
			out[n-1].Text += text
			return
		}
		out = append(out, Piece{Text: text, Content: content})
	}
	for s != "" {
		i := strings.Index(s, t.open)
		if i < 0 {
			balanced = balanced && !strings.Contains(s, t.close)
			add(strings.ReplaceAll(s, t.close, ""), false)
			break
		}
		balanced = balanced && !strings.Contains(s[:i], t.close)
		add(strings.ReplaceAll(s[:i], t.close, ""), false)
		s = s[i+len(t.open):]
		j := strings.Index(s, t.close)
		if j < 0 {
			balanced = false
			add(strings.ReplaceAll(s, t.open, ""), true)
			break
		}
		balanced = balanced && !strings.Contains(s[:j], t.open)
		add(strings.ReplaceAll(s[:j], t.open, ""), true)
		s = s[j+len(t.close):]
	}
	return out, balanced
}

// align matches pieces to the plain rendering, where templates apply
// filters such as trim to the marked text (the markers shield the text from
// them): each content piece becomes the form of its text that the plain
// rendering holds at that place.
func align(pieces []Piece, plain string) ([]Piece, bool) {
	out := make([]Piece, 0, len(pieces))
	var try func(k int, rest string) bool
	try = func(k int, rest string) bool {
		if k == len(pieces) {
			return rest == ""
		}
		p := pieces[k]
		if !p.Content {
			if !strings.HasPrefix(rest, p.Text) {
				return false
			}
			out = append(out, p)
			if try(k+1, rest[len(p.Text):]) {
				return true
			}
			out = out[:len(out)-1]
			return false
		}
		seen := map[string]bool{}
		for _, c := range []string{p.Text, strings.TrimSpace(p.Text), strings.TrimLeft(p.Text, " \t\n\r"), strings.TrimRight(p.Text, " \t\n\r")} {
			if seen[c] || !strings.HasPrefix(rest, c) {
				continue
			}
			seen[c] = true
			out = append(out, Piece{Text: c, Content: true})
			if try(k+1, rest[len(c):]) {
				return true
			}
			out = out[:len(out)-1]
		}
		return false
	}
	if !try(0, plain) {
		return nil, false
	}
	// Drop content pieces that trimmed to nothing and merge neighbours.
	merged := out[:0:0]
	for _, p := range out {
		if p.Text == "" {
			continue
		}
		if n := len(merged); n > 0 && merged[n-1].Content == p.Content {
			merged[n-1].Text += p.Text
			continue
		}
		merged = append(merged, p)
	}
	return merged, true
}
