package router

import (
	"kvwin/engine"
)

// Usage a backend reports reaches clients (usage, X-Kvwin-* headers) and
// the registry, so it is checked against what the router knows of the
// prompt before it is believed. A count that cannot be true is logged and
// replaced by the router's own:
//
//   - prompt tokens: for a backend sent exact token ids, exactly their
//     number; for any backend, not negative and not more than a slot holds;
//   - cached tokens: between 0 and the prompt tokens;
//   - generated tokens: not negative, and not more than max_tokens asked.

//
// What a tenant is told is then capped: a backend that does not keep
// tenants apart (llama-server, Ollama, a node without our admin key) may
// reuse another tenant's prefix and say so; what the tenant is told is
// capped at its own registry prefix there (whole blocks). A gateway of one
// tenant has no other to tell of: it reports the backend's count exactly.
// The registry and the cost model learn the checked counts, uncapped.
//
// Every count of cached tokens a turn reports passes through one usage.

// usage checks and caps the counts one attempt on m reports. k is the
// prompt as the router keyed it, req the client's request, c the
// candidate m was for the turn.
type usage struct {
	r      *Router
	m      *member
	k      key
	req    engine.Request
	c      candidate
	capped bool // what the tenant is told is capped at its own prefix
}

// usageOf is the accounting of a turn on candidate c (member m).
func (r *Router) usageOf(m *member, c candidate, k key, req engine.Request) usage {
	return usage{r: r, m: m, k: k, req: req, c: c, capped: !m.backend.Info().Tenants && r.cfg.SoleTenant == ""}
}

// forTenant is the checked t as the tenant is told it: cached tokens capped at
// its own prefix where u is capped.
func (u usage) forTenant(t engine.Timings) engine.Timings {
	if u.capped {
		t.CachedTokens = u.c.capCached(t)
	}
	return t
}

// stream wraps stream so that the first event's timings (which become the
// response headers) are checked like the result's, and every event's
// cached tokens are told as the tenant may know them.
func (u usage) stream(stream engine.StreamFunc) engine.StreamFunc {
	if stream == nil {
		return nil
	}
	return func(ev engine.Event) error {
		if ev.First {
			ev.Timings = u.checked(ev.Timings, nil)
		}
		ev.Timings = u.forTenant(ev.Timings)
		return stream(ev)
	}
}

// capCached caps a backend's reported reuse at the tenant's own prefix
// there: in tokens for exact chains; for approximate ones (bytes of text)
// the same share of the prompt the backend counted, since the gateway's
// token estimate of a text is not the backend's.
func (c candidate) capCached(t engine.Timings) int {
	limit := c.tenantUnits
	if c.promptUnits > 0 && c.tenantUnits < c.promptUnits {
		limit = int(int64(c.tenantUnits) * int64(t.PromptTokens) / int64(c.promptUnits))
	}
	if c.promptUnits > 0 && c.tenantUnits >= c.promptUnits {
		limit = t.PromptTokens
	}
	return max(0, min(t.CachedTokens, limit))
}

// checked returns t with its impossible counts replaced (see above); tokens
// are the generated ids (nil from backends that send none).
func (u usage) checked(t engine.Timings, tokens []int) engine.Timings {
	m, k, req := u.m, u.k, u.req
	reported := t
	limit := int(m.ctx.Load())
	switch {
	case k.tokens != nil && m.exact && t.PromptTokens != len(k.tokens):
		t.PromptTokens = len(k.tokens)
	case t.PromptTokens < 0, limit > 0 && t.PromptTokens > limit:
		t.PromptTokens = min(k.length, max(limit, 1))
	}
	t.CachedTokens = max(0, min(t.CachedTokens, t.PromptTokens))
	if t.GeneratedTokens < 0 || req.MaxTokens > 0 && t.GeneratedTokens > req.MaxTokens {
		t.GeneratedTokens = len(tokens)
		if req.MaxTokens > 0 {
			t.GeneratedTokens = min(t.GeneratedTokens, req.MaxTokens)
		}
	}
	if t != reported {
		u.r.log.Warn("backend reported usage that cannot be true; replaced by the gateway's own count",
			"backend", m.name, "prompt_tokens", reported.PromptTokens, "cached_tokens", reported.CachedTokens,
			"generated_tokens", reported.GeneratedTokens, "sent_tokens", k.length, "now_prompt_tokens", t.PromptTokens,
			"now_cached_tokens", t.CachedTokens, "now_generated_tokens", t.GeneratedTokens)
	}
	return t
}
