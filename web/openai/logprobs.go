package openai

import (
	"kvwin/engine"
	"kvwin/web/core"
)

// OpenAI's two logprobs shapes, from the engine's.

// chatLogprobsOf is chat's logprobs object; nil when none were asked for.
func chatLogprobsOf(lps []engine.TokenLogprob, asked bool) *chatLogprobs {
	if !asked {
		return nil
	}
	out := &chatLogprobs{Content: make([]tokenLogprob, len(lps))}
	for i, lp := range lps {
		tl := tokenLogprob{Token: lp.Token, Logprob: lp.Logprob, Bytes: core.IntBytes(lp.Bytes), TopLogprobs: []topLogprob{}}
		for _, top := range lp.Top {
			tl.TopLogprobs = append(tl.TopLogprobs, topLogprob{Token: top.Token, Logprob: top.Logprob, Bytes: core.IntBytes(top.Bytes)})
		}
		out.Content[i] = tl
	}
	return out
}

// textLogprobsOf is the legacy completions' logprobs object, text offsets
// counted from offset; nil when none were asked for.
func textLogprobsOf(lps []engine.TokenLogprob, asked bool, offset int) *textLogprobs {
	if !asked {
		return nil
	}
	out := &textLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, lp.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, lp.Logprob)
		top := make(map[string]float32, len(lp.Top))
		for _, t := range lp.Top {
			top[t.Token] = t.Logprob
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(lp.Bytes)
	}
	return out
}
