package llamaserver

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"kvwin/engine"
	"kvwin/kvcache"
)

// How chat messages become tokens for one server. Two ways, picked from the
// server's chat template:
//
//   - ChatML (the template names <|im_start|>, and the vocabulary has it and
//     <|im_end|> as single control tokens): rendered here, as the embedded
//     engine does, message by message:
//
//     [BOS] per message: <|im_start|> tok(role+"\n"+content) <|im_end|> tok("\n")
//     then:              <|im_start|> tok("assistant\n")
//
//     The markers are control-token ids; message text is tokenized as plain
//     text, so a client cannot smuggle a control token in, and a message
//     tokenizes the same way every turn whatever surrounds it. Each
//     message's ids are cached per tenant, and so is the rendering of a
//     tenant's conversation up to its last turn (kvcache.PromptCache, keyed
//     by the message chain): a new turn tokenizes only its new messages and
//     looks up the rest once.
//     llama.cpp splits text at control tokens before tokenizing, so this is
//     the tokenization of the whole rendered text. A server that parses
//     control-token text whatever parse_special says (the June 2025 build)
//     cannot keep message text plain: there a message holding a ChatML
//     marker's text is refused (400) rather than let it become a marker.
//
//   - any other template: the server renders it (POST /apply-template,
//     every turn: the template is the server's) and the text is tokenized
//     with control tokens parsed, as llama-server's own chat route does.
//     Nothing is cached per message: the text of one message is not
//     separable from the template's. What is cached is the rendering:
//     per tenant and conversation (the message chain), the ids of the text
//     up to the last control token of the previous turn's rendering, so a
//     turn that repeats that text sends /tokenize only the text from that
//     control token on (rendered.go: where the cut may be, and when the
//     whole text is tokenized instead).
type chat struct {
	chatML              bool
	ns                  string // token cache namespace: server, model, template
	bos                 []int  // what add_special puts first; empty if nothing
	start, end, newline []int  // ChatML only
	// parsesAlways: the server parses control-token text whatever
	// parse_special says (the June 2025 build), so message text holding
	// a ChatML marker is refused (render).
	parsesAlways bool
	control      controlIDs // other templates: which ids are control tokens (rendered.go)

	probe         sync.Mutex // guards probed and exact
	probed, exact bool       // whether /tokenize's pieces spell text exactly (piecesExact)
}

// ChatML's markers.
const (
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"
)

// setupChat learns how to render chat for a server with props p: a few
// /tokenize calls, once per model and template.
func (b *Backend) setupChat(ctx context.Context, p Props) (*chat, error) {
	h := fnv.New64a()
	h.Write([]byte(p.ChatTemplate))
	c := &chat{ns: fmt.Sprintf("llamaserver\x00%s\x00%s\x00%x", b.base, p.ModelPath, h.Sum64())}
	var err error
	if c.bos, err = b.TokenizeSpecial(ctx, "", true, false); err != nil {
		return nil, err
	}
	if strings.Contains(p.ChatTemplate, imStart) {
		start, err := b.TokenizeSpecial(ctx, imStart, false, true)
		if err != nil {
			return nil, err
		}
		end, err := b.TokenizeSpecial(ctx, imEnd, false, true)
		if err != nil {
			return nil, err
		}
		if len(start) == 1 && len(end) == 1 {
			if c.newline, err = b.TokenizeSpecial(ctx, "\n", false, false); err != nil {
				return nil, err
			}
			plain, err := b.TokenizeSpecial(ctx, imStart, false, false)
			if err != nil {
				return nil, err
			}
			c.parsesAlways = slices.Equal(plain, start)
			c.chatML, c.start, c.end = true, start, end
			return c, nil
		}
		b.log.Warn("the chat template names ChatML markers the vocabulary lacks; rendering with /apply-template",
			slog.Int("im_start_tokens", len(start)), slog.Int("im_end_tokens", len(end)))
	}
	return c, nil
}

// render turns messages into prompt tokens (see chat). It blocks on the
// server for what is not cached.
func (b *Backend) render(ctx context.Context, c *chat, tenant string, msgs []engine.Message) ([]int, error) {
	for i, m := range msgs {
		if !engine.ValidRole(m.Role) {
			return nil, engine.Invalid("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	if !c.chatML {
		return b.renderTemplate(ctx, c, tenant, msgs)
	}
	if c.parsesAlways {
		for i, m := range msgs {
			for _, marker := range []string{imStart, imEnd} {
				if strings.Contains(m.Content, marker) {
					return nil, engine.Invalid("messages[%d] holds the control-token text %q, which this server parses as a control token in any text", i, marker)
				}
			}
		}
	}
	// The longest prefix of msgs an earlier turn of tenant's rendered: a
	// ChatML prompt is its messages' renderings one after another, so the
	// cached prefix is what rendering it again gives, and a turn costs its
	// new messages (and a hash of each message), not a lookup of each.
	keys := engine.PromptKeys(tenant, kvcache.Root(tenant, c.ns, "chatml"), msgs)
	var out []int
	from := 0
	p, k := b.prompts.Longest(keys, func(*kvcache.Prefix) bool { return true })
	if p != nil {
		out, from = p.AppendTo(make([]int, 0, p.Len()+64*(len(msgs)-k+1))), k
	} else {
		out = slices.Clone(c.bos)
	}
	ns := c.tenantNS(tenant)
	history := -1 // out's length after all but the last message
	var err error
	for i := from; i < len(msgs); i++ {
		if i == len(msgs)-1 {
			history = len(out)
		}
		out = append(out, c.start...)
		if out, err = b.messageTokens(ctx, ns, out, msgs[i].Role, msgs[i].Content); err != nil {
			return nil, err
		}
		out = append(out, c.end...)
		out = append(out, c.newline...)
	}
	// This turn's messages, and the history before its last one, which the
	// next turn continues (a reply and a new ask added, or the ask edited).
	if from < len(msgs) {
		all := b.prompts.Put(keys[len(msgs)], out, kvcache.Signature{}, 0, p)
		if history > 0 && from < len(msgs)-1 {
			b.prompts.Put(keys[len(msgs)-1], out[:history], kvcache.Signature{}, 0, all)
		}
	}
	// The generation prompt is "assistant\n" after a start marker: the
	// text of an empty assistant message, so it is cached the same way.
	out = append(out, c.start...)
	return b.messageTokens(ctx, ns, out, engine.RoleAssistant, "")
}

// tenantNS is the token cache's namespace for tenant's messages: one
// tenant's cached message never answers another's lookup, so how soon a
// message is counted or rendered (a /tokenize call or not) says nothing of
// what other tenants sent.
func (c *chat) tenantNS(tenant string) string { return c.ns + "\x00" + tenant }

// messageTokens appends the ids of role+"\n"+content to dst, from the cache
// under ns (chat.tenantNS) or from /tokenize (then offered to the cache).
func (b *Backend) messageTokens(ctx context.Context, ns string, dst []int, role, content string) ([]int, error) {
	if out, ok := b.tokens.Append(dst, ns, role, content); ok {
		return out, nil
	}
	ids, err := b.TokenizeSpecial(ctx, role+"\n"+content, false, false)
	if err != nil {
		return nil, err
	}
	b.tokens.Put(ns, role, content, ids)
	return append(dst, ids...), nil
}

// renderTemplate renders with the server's template and tokenizes the text,
// the part an earlier turn of tenant's did not tokenize already
// (tokenizeRendered). Templates differ on whether their text starts with
// the BOS marker, so the text is tokenized without adding one and BOS is
// put first only if missing: never twice.
func (b *Backend) renderTemplate(ctx context.Context, c *chat, tenant string, msgs []engine.Message) ([]int, error) {
	const path = "/apply-template"
	var out struct {
		Prompt *string `json:"prompt"`
	}
	in := struct {
		Messages []engine.Message `json:"messages"`
	}{msgs}
	if err := b.call(ctx, http.MethodPost, path, in, &out); err != nil {
		return nil, err
	}
	if out.Prompt == nil {
		return nil, unavailable(http.MethodPost+" "+b.base+path, "the answer has no prompt")
	}
	ids, err := b.tokenizeRendered(ctx, c, tenant, *out.Prompt, msgs)
	if err != nil {
		return nil, err
	}
	if len(c.bos) > 0 && !slices.Equal(ids[:min(len(ids), len(c.bos))], c.bos) {
		ids = append(slices.Clone(c.bos), ids...)
	}
	return ids, nil
}

var (
	_ engine.MessageCounter      = (*Backend)(nil)
	_ engine.ConversationCounter = (*Backend)(nil)
)

// CountMessage returns the tokens message m takes in a rendered prompt (its
// markers, role and text), so a gateway's window plans with the server's
// own tokenizer. Without a tenant it shares the cache of tenant "" only;
// a window counts through CountMessages, under its tenant. When the
// server cannot be asked, or its template is not ChatML, it estimates
// from the bytes.
func (b *Backend) CountMessage(m engine.Message) int {
	return b.CountMessages("", []engine.Message{m})[0]
}

// CountMessages counts msgs as CountMessage does, each from tenant's share
// of the per-message token cache that rendering the turn then reads, so
// the prompt costs no second /tokenize (engine.ConversationCounter).
func (b *Backend) CountMessages(tenant string, msgs []engine.Message) []int {
	st := b.snapshot()
	if st == nil || st.chat == nil || !st.chat.chatML {
		out := make([]int, len(msgs))
		for i, m := range msgs {
			out[i], _ = b.countMessage(tenant, m)
		}
		return out
	}
	// A window counts every message of a conversation each turn. The
	// counts of the longest prefix of msgs counted before for tenant come
	// from the prompt cache (a hash of each message, one lookup), the
	// rest from the per-message token cache (a lookup each, with no
	// context, timer or copy of its ids), or the server. Looking every
	// message up was most of a gateway's window phase at 242 messages.
	keys := engine.PromptKeys(tenant, kvcache.Root(tenant, st.chat.ns, "chatml-counts"), msgs)
	ns, markers := st.chat.tenantNS(tenant), st.chat.markers()
	out, _ := b.prompts.Counts(keys, len(msgs), func(i int) (int, bool) {
		m := msgs[i]
		if n, ok := b.tokens.Len(ns, m.Role, m.Content); ok {
			return markers + n, true
		}
		return b.countMessage(tenant, m)
	})
	return out
}

// countMessage is CountMessage under tenant's namespace; exact is false
// for an estimate from the bytes (the server could not be asked).
func (b *Backend) countMessage(tenant string, m engine.Message) (n int, exact bool) {
	estimate := engine.EstimateTokens(len(m.Role)+len(m.Content)) + engine.MessageOverhead
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
	defer cancel()
	st, err := b.current(ctx, true)
	if err != nil || !st.chat.chatML {
		return estimate, false
	}
	ids, err := b.messageTokens(ctx, st.chat.tenantNS(tenant), nil, m.Role, m.Content)
	if err != nil {
		return estimate, false
	}
	return st.chat.markers() + len(ids), true
}

// markers is the tokens a ChatML message takes besides its role and text.
func (c *chat) markers() int { return len(c.start) + len(c.end) + len(c.newline) }
