package llamacpp

/*
#include <stdint.h>
struct llama_context;
float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// Sampling beyond what the binding's sampler offers. The binding's
// common_sampler reads the logits llama.cpp left in the context's buffer, so
// logit_bias is applied there, in place, before it samples; log-probabilities
// are read from the same row after the bias (they are the distribution the
// request asked the model to sample from, before temperature and
// truncation, as OpenAI reports them).

// liveLogits is row i of the last decoded batch's logits, aliasing
// llama.cpp's buffer: valid until the next decode, only on the loop.
func liveLogits(c *llama.Context, i, n int) []float32 {
	p := C.llama_get_logits_ith((*C.struct_llama_context)(unsafe.Pointer(rawContext(c))), C.int32_t(i))
	if p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), n)
}

// checkLogitBias reports a token id outside the vocabulary.
func checkLogitBias(bias map[int]float32, vocab int) error {
	for tok := range bias {
		if tok < 0 || tok >= vocab {
			return engine.Invalid("logit_bias: token %d outside the vocabulary (0..%d)", tok, vocab-1)
		}
	}
	return nil
}

// sample picks t's next token from the logits at t.logitsAt, applying its
// logit bias first, and returns the token's log-probabilities when the
// request asked for them (nil otherwise). The sampler's penalties and
// grammar rewrite the buffer as they sample, so the row is read before.
// Loop-owned.
func (l *loop) sample(t *task) (int, *engine.TokenLogprob, error) {
	bias, want := t.req.Sampling.LogitBias, t.req.Logprobs
	var row []float32
	if len(bias) > 0 || want {
		row = liveLogits(l.e.lctx, t.logitsAt, l.e.vocab)
	}
	if row != nil {
		for tok, b := range bias {
			row[tok] += b
		}
	}
	var (
		before []float32
		logZ   float32
	)
	if want && row != nil {
		before = append([]float32(nil), row...)
		logZ = logSumExp(before)
	}
	tok, err := l.choose(t)
	if err != nil {
		return 0, nil, err
	}
	if before == nil {
		return tok, nil, nil
	}
	return tok, &engine.TokenLogprob{
		Token: l.pieces[tok], Bytes: []byte(l.pieces[tok]), Logprob: before[tok] - logZ,
		Top: topLogprobs(before, t.req.TopLogprobs, logZ, l.pieces),
	}, nil
}

// choose samples t's next token, or inserts it where its output
// constraint forces it (constrain.go), and advances the sampler's grammar.
func (l *loop) choose(t *task) (int, error) {
	if t.outGrammar != "" && t.con == nil {
		c, err := newConstraint(l, t.outGrammar)
		if err != nil {
			return 0, err
		}
		t.con = c
		n, _, ok := c.close(-1)
		if !ok {
			return 0, engine.Invalid("the output format's shortest completion is not found within %d characters of printable ASCII, so its token limit cannot be kept", maxClose)
		}
		if n > t.maxNew {
			return 0, engine.Invalid("the token limit (max_tokens; num_predict on the Ollama API, n_predict on /completion) is %d but the shortest output the format allows takes %d tokens", t.maxNew, n)
		}
	}
	c := t.con
	if c == nil {
		tok := t.sampler.Sample(l.e.lctx, t.logitsAt)
		t.sampler.Accept(tok, true) // advances the grammar, if any
		return tok, nil
	}
	tok, forced := c.forced()
	if !forced {
		tok = t.sampler.Sample(l.e.lctx, t.logitsAt)
		left := t.maxNew - len(t.generated) // tokens left, this one included
		if !c.isEOG(tok) {
			if n, _, ok := c.close(tok); ok && 1+n > left {
				if _, first, ok := c.close(-1); ok && first >= 0 {
					tok = first // only the close fits now
				}
			}
		}
	}
	t.sampler.Accept(tok, true)
	if !c.isEOG(tok) {
		c.accept(tok)
	}
	return tok, nil
}

// logSumExp is log Σ exp(x), computed stably.
func logSumExp(xs []float32) float32 {
	m := float32(math.Inf(-1))
	for _, x := range xs {
		m = max(m, x)
	}
	var s float64
	for _, x := range xs {
		s += math.Exp(float64(x - m))
	}
	return m + float32(math.Log(s))
}

// topLogprobs returns the k most likely tokens of row, most likely first,
// as log-probabilities given logZ. Insertion into a k-long list: k ≤ 20.
func topLogprobs(row []float32, k int, logZ float32, pieces []string) []engine.TopLogprob {
	if k <= 0 {
		return nil
	}
	top := make([]int, 0, k+1)
	for i, x := range row {
		if len(top) == k && x <= row[top[k-1]] {
			continue
		}
		j := len(top)
		top = append(top, i)
		for j > 0 && row[top[j-1]] < x {
			top[j] = top[j-1]
			j--
		}
		top[j] = i
		if len(top) > k {
			top = top[:k]
		}
	}
	out := make([]engine.TopLogprob, len(top))
	for i, tok := range top {
		out[i] = engine.TopLogprob{Token: pieces[tok], Bytes: []byte(pieces[tok]), Logprob: row[tok] - logZ}
	}
	return out
}
