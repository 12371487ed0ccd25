package llamaserver

import (
	"math"

	"kvwin/engine"
)

// Token probabilities, asked of /completion with n_probs and answered in
// completion_probabilities: one entry per generated token, in each streamed
// partial (the tokens of its text) or, not streamed, all in the final
// object. The entry's shape changed across llama.cpp versions; both are
// read:
//
//	newer: {"id", "token", "bytes": [..], "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}, …]}
//	       (with post_sampling_probs: "prob" and "top_probs" instead)
//	older: {"content", "probs": [{"tok_str", "prob"}, …]}
//
// Newer servers report the distribution before sampling (a softmax of the
// logits, as the embedded engine and OpenAI do) when post_sampling_probs is
// false, which kvwin sends; older ones report the sampler's probabilities,
// which at temperature 0 are the same softmax. llama-server's logit_bias
// is a sampler, so its probabilities are those before the bias, where the
// embedded engine's include it.

// probEntry is one generated token's entry of completion_probabilities, in
// either shape.
type probEntry struct {
	Token       *string   `json:"token"`
	Content     *string   `json:"content"` // older servers' token text
	Bytes       []int     `json:"bytes"`
	Logprob     *float64  `json:"logprob"`
	Prob        *float64  `json:"prob"`
	TopLogprobs []probAlt `json:"top_logprobs"`
	TopProbs    []probAlt `json:"top_probs"` // post_sampling_probs
	Probs       []probAlt `json:"probs"`     // older servers
}

// probAlt is one alternative of an entry, in either shape.
type probAlt struct {
	Token   *string  `json:"token"`
	TokStr  *string  `json:"tok_str"` // older servers
	Bytes   []int    `json:"bytes"`
	Logprob *float64 `json:"logprob"`
	Prob    *float64 `json:"prob"`
}

// unlikely is the log-probability of a chosen token an older server did
// not list among its top n (it reports no other): OpenAI's -9999, "too
// unlikely to say".
const unlikely = -9999

// nProbs is the n_probs asked for req: its top alternatives, and at least
// one, since a server gives a token's own probability only with its
// alternatives (0 asks for none at all).
func nProbs(req engine.Request) int {
	if !req.Logprobs {
		return 0
	}
	return max(req.TopLogprobs, 1)
}

// logprobsOf maps a chunk's entries to the engine's, keeping top
// alternatives of each (the request's TopLogprobs; the server was asked
// for at least one).
func logprobsOf(entries []probEntry, top int) []engine.TokenLogprob {
	if len(entries) == 0 {
		return nil
	}
	out := make([]engine.TokenLogprob, len(entries))
	for i, e := range entries {
		alts := e.TopLogprobs
		switch {
		case alts == nil && e.TopProbs != nil:
			alts = e.TopProbs
		case alts == nil:
			alts = e.Probs
		}
		text := e.Token
		if text == nil {
			text = e.Content
		}
		tl := engine.TokenLogprob{Bytes: bytesOf(text, e.Bytes)}
		tl.Token = string(tl.Bytes)
		switch lp, ok := logprobOf(e.Logprob, e.Prob); {
		case ok:
			tl.Logprob = lp
		default:
			// An older server: the chosen token's probability is its
			// entry among the alternatives, if it is there.
			tl.Logprob = unlikely
			for _, a := range alts {
				if string(a.bytes()) == tl.Token {
					tl.Logprob, _ = logprobOf(a.Logprob, a.Prob)
					break
				}
			}
		}
		for _, a := range alts[:min(len(alts), top)] {
			lp, _ := logprobOf(a.Logprob, a.Prob)
			b := a.bytes()
			tl.Top = append(tl.Top, engine.TopLogprob{Token: string(b), Bytes: b, Logprob: lp})
		}
		out[i] = tl
	}
	return out
}

// bytes is an alternative's text as bytes.
func (a probAlt) bytes() []byte {
	text := a.Token
	if text == nil {
		text = a.TokStr
	}
	return bytesOf(text, a.Bytes)
}

// bytesOf is a token's bytes: the server's bytes field when it has one
// (its text is cut to whole UTF-8 characters, so a token holding part of
// a character is only whole there), else its text.
func bytesOf(text *string, raw []int) []byte {
	if len(raw) > 0 {
		out := make([]byte, len(raw))
		for i, c := range raw {
			out[i] = byte(c)
		}
		return out
	}
	if text == nil {
		return []byte{}
	}
	return []byte(*text)
}

// logprobOf is a log-probability from either field: logprob as it is, or
// the natural log of prob. A probability of 0 is float32's lowest, as
// llama-server writes it; nothing is -Inf or NaN, which JSON cannot carry.
// ok is false when neither field is set.
func logprobOf(logprob, prob *float64) (float32, bool) {
	var v float64
	switch {
	case logprob != nil:
		v = *logprob
	case prob != nil:
		v = math.Log(*prob)
	default:
		return 0, false
	}
	if math.IsNaN(v) || v < -math.MaxFloat32 {
		return -math.MaxFloat32, true
	}
	return float32(min(v, 0)), true
}
