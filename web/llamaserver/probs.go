package llamaserver

import (
	"unicode/utf8"

	"kvwin/engine"
	"kvwin/web/core"
)

// nodeProb is one token's entry of /completion's completion_probabilities,
// in the shape of llama-server's newer versions (n_probs without
// post_sampling_probs): its text cut to whole UTF-8 characters, its exact
// bytes, its log-probability and its top alternatives. llama-server also
// sends token ids ("id"); engine events carry none, so kvwin leaves it out.
type nodeProb struct {
	Token       string        `json:"token"`
	Bytes       []int         `json:"bytes"`
	Logprob     float32       `json:"logprob"`
	TopLogprobs []nodeTopProb `json:"top_logprobs"`
}

// nodeTopProb is one alternative of a nodeProb.
type nodeTopProb struct {
	Token   string  `json:"token"`
	Bytes   []int   `json:"bytes"`
	Logprob float32 `json:"logprob"`
}

// nodeProbsOf is lps in llama-server's shape.
func nodeProbsOf(lps []engine.TokenLogprob) []nodeProb {
	out := make([]nodeProb, len(lps))
	for i, lp := range lps {
		p := nodeProb{Token: wholeChars(lp.Bytes), Bytes: core.IntBytes(lp.Bytes), Logprob: lp.Logprob, TopLogprobs: []nodeTopProb{}}
		for _, t := range lp.Top {
			p.TopLogprobs = append(p.TopLogprobs, nodeTopProb{Token: wholeChars(t.Bytes), Bytes: core.IntBytes(t.Bytes), Logprob: t.Logprob})
		}
		out[i] = p
	}
	return out
}

// wholeChars is b up to its first byte that does not start a whole UTF-8
// character, as llama-server cuts a token's text (the bytes field has it
// all).
func wholeChars(b []byte) string {
	n := 0
	for n < len(b) {
		r, size := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		n += size
	}
	return string(b[:n])
}
