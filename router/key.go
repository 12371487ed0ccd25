package router

import (
	"context"
	"strings"

	"github.com/cespare/xxhash/v2"

	"kvwin/engine"
	"kvwin/kvcache"
)

// key is the prompt of one request as the registry sees it.
type key struct {
	tenant string
	keyer  *kvcache.Keyer // exact keys of the request's tenant
	tokens []int          // exact prompt tokens; nil when no backend could render them
	exact  kvcache.Chain  // block keys of tokens
	approx kvcache.Chain  // block keys of the rendered text, for backends without a tokenizer
	// text is the rendering approx keys, approxKeyer its tenant's keyer.
	text        string
	approxKeyer *kvcache.Keyer
	length      int // prompt length in tokens (estimated without tokens)
	// owner names the request's conversation (its tenant and
	// conversation id, hashed; 0 when it has none): liveness.go tells a
	// conversation's own next turn from a sibling's by it.
	owner uint64
}

// rootBlocks is how deep the root key sits: the first blocks of every chat
// prompt are the template's boilerplate, the same for every conversation, so
// the root is the key of block 16 (tokens 240–255: into the system prompt and
// first message), or of the last block of a shorter prompt. Conversations
// sharing a long system prompt share a root: under ties they gather where
// that prompt is cached, until the hot-spot guard spreads them.
const rootBlocks = 16

// root is the conversation's root for rendezvous hashing.
func (k key) root() uint64 {
	for _, keys := range [][]kvcache.Key{k.exact.Keys, k.approx.Keys} {
		if len(keys) > 0 {
			return uint64(keys[min(len(keys), rootBlocks)-1])
		}
	}
	return 0
}

// key renders req through the first live backend that can, and keys it.
func (r *Router) key(ctx context.Context, req engine.Request, live []*member) (key, error) {
	var k key
	if req.Conversation != "" {
		k.owner = xxhash.Sum64String(req.Tenant + "\x00" + req.Conversation)
	}
	if len(req.Tokens) > 0 {
		k.tokens = req.Tokens
	} else {
		for _, m := range live {
			p, ok := engine.As[engine.Prompter](m.backend)
			if !ok {
				continue
			}
			tokens, err := p.Prompt(ctx, req)
			if err != nil {
				if retryable(err) {
					continue // try the next backend's tokenizer
				}
				return k, err
			}
			k.tokens = tokens
			break
		}
	}
	// Keys are salted by tenant: a tenant's lookups find only its own
	// prefixes, so routing and cached-token counts say nothing of others'.
	k.tenant, k.keyer = req.Tenant, r.exact.ForTenant(req.Tenant)
	if k.tokens != nil && allExact(live) {
		// Approximate keys serve only backends without a tokenizer: with
		// none among the candidates, the text is neither rendered nor
		// hashed (it grows with the conversation, every turn).
		k.exact, k.length = k.keyer.Tokens(k.tokens), len(k.tokens)
		return k, nil
	}
	text := r.promptText(req)
	k.text, k.approxKeyer = text, r.approx.ForTenant(req.Tenant)
	k.approx = k.approxKeyer.Text(text)
	if k.tokens != nil {
		k.exact = k.keyer.Tokens(k.tokens)
		k.length = len(k.tokens)
	} else {
		k.length = engine.EstimateTokens(len(text))
	}
	return k, nil
}

// allExact reports whether every member keys by exact tokens.
func allExact(ms []*member) bool {
	for _, m := range ms {
		if !m.exact {
			return false
		}
	}
	return true
}

// promptText is the request's prompt as text, for approximate keys: the
// rendering of the first backend that renders text for its own estimate
// (engine.TextRenderer: Ollama), so both key it alike; else role and
// content lines.
func (r *Router) promptText(req engine.Request) string {
	for _, m := range r.fleet() {
		if tr, ok := engine.As[engine.TextRenderer](m.backend); ok {
			if text, err := tr.PromptText(req); err == nil {
				return text
			}
		}
	}
	if req.Prompt != "" {
		return req.Prompt
	}
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}
