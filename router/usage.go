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

// saneTimings returns t with its impossible counts replaced (see above).
// k is the prompt as the router keyed it, req the client's request, tokens
// the generated ids (nil from backends that send none).
func (r *Router) saneTimings(m *member, k key, req engine.Request, t engine.Timings, tokens []int) engine.Timings {
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
		r.log.Warn("backend reported usage that cannot be true; replaced by the gateway's own count",
			"backend", m.name, "prompt_tokens", reported.PromptTokens, "cached_tokens", reported.CachedTokens,
			"generated_tokens", reported.GeneratedTokens, "sent_tokens", k.length, "now_prompt_tokens", t.PromptTokens,
			"now_cached_tokens", t.CachedTokens, "now_generated_tokens", t.GeneratedTokens)
	}
	return t
}

// checkUsage wraps stream so that the first event's timings (which become
// the response headers) are checked like the result's.
func (r *Router) checkUsage(m *member, k key, req engine.Request, stream engine.StreamFunc) engine.StreamFunc {
	if stream == nil {
		return nil
	}
	return func(ev engine.Event) error {
		if ev.First {
			ev.Timings = r.saneTimings(m, k, req, ev.Timings, nil)
		}
		return stream(ev)
	}
}
