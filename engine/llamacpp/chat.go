package llamacpp

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
	"kvwin/engine/chattemplate"
	"kvwin/kvcache"
)

// renderer turns chat messages into prompt tokens.
type renderer interface {
	// render renders msgs for tenant; padSinks > 0 pads after the first
	// padSinks messages to a multiple of block tokens (where the template
	// allows). tools are the request's tools, for a template that renders
	// them. A prefix of msgs rendered for the tenant's earlier turns comes
	// from the prompt cache: the tokens are the same either way.
	// The tokenizer's time on text no cache held is added to sp (nil: not
	// measured).
	render(tenant string, msgs []engine.Message, tools []any, padSinks, block int, sp *spent) ([]int, error)
	name() string
	// count is one message's share of a rendered prompt, in tokens, for
	// tenant (whose caches it uses: see tokenSpace).
	count(tenant string, m engine.Message) int
}

// newRenderer picks how messages become tokens for this model:
//   - a template that renders exactly as ChatML does, on a model whose
//     vocabulary has ChatML's control tokens (the test model, many real
//     models): rendered natively, message by message, with the control
//     tokens inserted as ids and message text tokenized as plain text, so
//     each message tokenizes the same way every turn;
//   - any other template: rendered by Jinja (jinjaRenderer), its structure
//     tokenized with control tokens parsed and message text without;
//   - no template: ChatML, with a warning (the documented fallback).
//
// A template that does not compile or cannot render a probe conversation is
// an error: the engine does not start with a prompt format it cannot keep.
func newRenderer(m *llama.Model, tmpl string, variants map[string]string, cache *kvcache.TokenCache, prompts *kvcache.PromptCache, id string, log *slog.Logger) (renderer, error) {
	start, errS := m.Tokenize("<|im_start|>", false, true)
	end, errE := m.Tokenize("<|im_end|>", false, true)
	hasChatML := errS == nil && errE == nil && len(start) == 1 && len(end) == 1
	if strings.TrimSpace(tmpl) == "" {
		log.Warn("model has no chat template; rendering chats as ChatML")
		if hasChatML {
			return newChatML(m, start, end, cache, prompts, id)
		}
		return newChatML(m, nil, nil, cache, prompts, id)
	}
	bos, eos := specialTexts(m)
	t, err := chattemplate.Parse(chattemplate.Config{Source: tmpl, BOS: bos, EOS: eos, Variants: variants})
	if err != nil {
		return nil, fmt.Errorf("model's %w", err)
	}
	chatml := isChatML(t)
	if hasChatML && chatml {
		return newChatML(m, start, end, cache, prompts, id)
	}
	r, err := newJinjaRenderer(m, t, bos, cache, prompts, id, log)
	if err == nil {
		r.chatml = chatml
	}
	return r, err
}

// isChatML reports whether t renders a conversation, with and without a
// system message, exactly as ChatML does.
func isChatML(t *chattemplate.Template) bool {
	// The assistant's reasoning tags catch templates that strip reasoning
	// from earlier turns (Qwen 3), which native ChatML would keep.
	conv := []engine.Message{{Role: "system", Content: "S."}, {Role: "user", Content: "U."}, {Role: "assistant", Content: "<think>T.</think>A."}, {Role: "user", Content: "V."}}
	for _, msgs := range [][]engine.Message{conv, conv[1:]} {
		got, err := t.Text(msgs, nil, true)
		if err != nil {
			return false
		}
		var want strings.Builder
		for _, m := range msgs {
			want.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		want.WriteString("<|im_start|>assistant\n")
		if got != want.String() {
			return false
		}
	}
	return true
}

// chatML renders <|im_start|>role\ncontent<|im_end|>\n per message and
// <|im_start|>assistant\n at the end. start and end are the control tokens;
// nil means the model has none and the markers are plain text.
type chatML struct {
	m          *llama.Model
	start, end []int
	// cache holds each message's tokens, so a conversation's unchanged
	// history is not tokenized again every turn; nil disables it.
	cache *kvcache.TokenCache
	id    string // the tokenizer's identity in cache keys
	// The fixed pieces, tokenized once: a tokenize call through cgo costs
	// more than a short message's cached tokens, and render needs these
	// for every message. bos is empty when the model adds none; open and
	// close are the markers as render adds them (the control tokens, or
	// the markers' text tokenized as plain text); nl is "\n".
	bos, open, close, nl []int
	// prompts holds rendered conversation prefixes; nil disables it.
	prompts *kvcache.PromptCache
}

func newChatML(m *llama.Model, start, end []int, cache *kvcache.TokenCache, prompts *kvcache.PromptCache, id string) (*chatML, error) {
	c := &chatML{m: m, start: start, end: end, cache: cache, prompts: prompts, id: id, open: start, close: end}
	var err error
	tok := func(text string, addSpecial bool) []int {
		if err != nil {
			return nil
		}
		var ids []int
		if ids, err = m.Tokenize(text, addSpecial, false); err != nil {
			err = fmt.Errorf("tokenize %q: %w", text, err)
		}
		return ids
	}
	if m.AddBOSToken() {
		c.bos = tok("", true)
	}
	if c.open == nil {
		c.open = tok("<|im_start|>", false)
	}
	if c.close == nil {
		c.close = tok("<|im_end|>", false)
	}
	c.nl = tok("\n", false)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// spent is what one rendering spent tokenizing text no cache held.
type spent struct{ tokenize time.Duration }

// since adds the time since start to sp's tokenizing time.
func (sp *spent) since(start time.Time) {
	if sp != nil {
		sp.tokenize += time.Since(start)
	}
}

// tokenSpace is the token cache's namespace of a tenant under a renderer:
// each tenant's message tokens are cached apart, so whether a text was
// tokenized before (which the tokenize phase of Server-Timing shows) says
// nothing of another tenant's messages.
func tokenSpace(id, tenant string) string { return id + "\x00" + tenant }

// text tokenizes role+"\n"+content, through the tenant's cache, appending to
// dst.
func (c *chatML) text(dst []int, tenant, role, content string, sp *spent) ([]int, error) {
	if c.cache != nil {
		if out, ok := c.cache.Append(dst, tokenSpace(c.id, tenant), role, content); ok {
			return out, nil
		}
	}
	start := time.Now()
	ids, err := c.m.Tokenize(role+"\n"+content, false, false)
	sp.since(start)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if c.cache != nil {
		c.cache.Put(tokenSpace(c.id, tenant), role, content, ids)
	}
	return append(dst, ids...), nil
}

// count returns a message's tokens as render adds them: markers, role and
// content, and the newline after the end marker.
func (c *chatML) count(tenant string, m engine.Message) int {
	ids, err := c.text(nil, tenant, m.Role, m.Content, nil)
	if err != nil {
		return engine.EstimateTokens(len(m.Role) + len(m.Content))
	}
	start, end := max(len(c.start), 1), max(len(c.end), 1)
	if c.start == nil {
		start, end = 4, 4 // the markers as plain text, about
	}
	return start + len(ids) + end + 1
}

func (c *chatML) name() string {
	if c.start == nil {
		return "chatml-fallback"
	}
	return "chatml"
}

// render renders msgs after the longest prefix of them the prompt cache
// holds for the tenant. ChatML renders message by message, each message's
// tokens following from the tokens before it alone (the sink padding
// included), so a cached prefix is exactly what rendering it again gives.
// It stores this turn's messages and the history before its last message,
// which the conversation's next turn (a reply and a new ask added, or the
// last message edited) continues.
func (c *chatML) render(tenant string, msgs []engine.Message, _ []any, padSinks, block int, sp *spent) ([]int, error) {
	keys := chainKeys(c.prompts, tenant, c.id+"\x00"+c.name(), msgs, strconv.Itoa(padSinks), strconv.Itoa(block))
	var out []int
	from := 0
	p, k := longestPrefix(c.prompts, keys, func(*kvcache.Prefix) bool { return true })
	if p != nil {
		out, from = p.AppendTo(make([]int, 0, p.Len()+32*(len(msgs)-k))), k
	} else {
		out = append(make([]int, 0, 64*len(msgs)), c.bos...)
	}
	history := -1 // out's length after all but the last message
	var err error
	for i := from; i < len(msgs); i++ {
		if i == len(msgs)-1 {
			history = len(out)
		}
		msg := msgs[i]
		out = append(out, c.open...)
		if out, err = c.text(out, tenant, msg.Role, msg.Content, sp); err != nil {
			return nil, err
		}
		out = append(append(out, c.close...), c.nl...)
		if i+1 == padSinks && block > 1 && len(out)%block != 0 && len(c.nl) == 1 {
			// Newlines between messages: the filler a ChatML model reads
			// as nothing.
			for len(out)%block != 0 {
				out = append(out, c.nl[0])
			}
		}
	}
	if c.prompts != nil && from < len(msgs) {
		all := c.prompts.Put(keys[len(msgs)], out, kvcache.Signature{}, 0, p)
		if history > 0 && from < len(msgs)-1 {
			c.prompts.Put(keys[len(msgs)-1], out[:history], kvcache.Signature{}, 0, all)
		}
	}
	out = append(out, c.open...)
	return c.text(out, tenant, "assistant", "", sp)
}

// chainKeys are the prompt cache's keys of every prefix of msgs: keys[k]
// names msgs[:k] for tenant under renderer and settings. nil without a
// cache.
func chainKeys(prompts *kvcache.PromptCache, tenant, renderer string, msgs []engine.Message, settings ...string) []kvcache.ChainKey {
	if prompts == nil {
		return nil
	}
	return engine.PromptKeys(tenant, kvcache.Root(tenant, renderer, settings...), msgs)
}

// longestPrefix is the prompt cache's Longest; nil without a cache.
func longestPrefix(prompts *kvcache.PromptCache, keys []kvcache.ChainKey, usable func(*kvcache.Prefix) bool) (*kvcache.Prefix, int) {
	if prompts == nil || keys == nil {
		return nil, 0
	}
	return prompts.Longest(keys, usable)
}
