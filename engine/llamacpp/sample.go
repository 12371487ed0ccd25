package llamacpp

/*
#include <math.h>
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
struct llama_context;
float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);

// kvwin_argmax is the index of row's largest value, the lowest of equals,
// NaNs passed over, 0 when no value is above -inf: argmaxGo's answer, eight
// lanes at a time where the build has AVX2 (max_ps returns its second
// operand when the first is NaN, so NaNs never become the maximum).
static int32_t kvwin_argmax(const float *row, int32_t n) {
	float best = -INFINITY;
	int32_t i = 0;
#ifdef __AVX2__
	__m256 m = _mm256_set1_ps(-INFINITY);
	for (; i + 8 <= n; i += 8) {
		m = _mm256_max_ps(_mm256_loadu_ps(row + i), m);
	}
	float lanes[8];
	_mm256_storeu_ps(lanes, m);
	for (int j = 0; j < 8; j++) {
		if (lanes[j] > best) best = lanes[j];
	}
#endif
	for (; i < n; i++) {
		if (row[i] > best) best = row[i];
	}
	if (best == -INFINITY) {
		return 0;
	}
	i = 0;
#ifdef __AVX2__
	__m256 b = _mm256_set1_ps(best);
	for (; i + 8 <= n; i += 8) {
		int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + i), b, _CMP_EQ_OQ));
		if (mask) {
			return i + __builtin_ctz(mask);
		}
	}
#endif
	for (; i < n; i++) {
		if (row[i] == best) return i;
	}
	return 0;
}
*/
import "C"

import (
	"errors"
	"math"
	"time"
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
// errDeferred: the choice is settled later, off the loop (constrain.go).
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
	start := time.Now()
	tok, err := l.choose(t)
	if t.req.Sampling.Grammar != "" || t.con != nil {
		if took := time.Since(start); took > maxTokenGrammarWork && err == nil {
			return 0, nil, engine.Invalid("the grammar took %v of work for one token; the limit on per-token grammar work is %v", took.Round(time.Millisecond), maxTokenGrammarWork)
		}
	}
	if errors.Is(err, errDeferred) {
		t.deferred.before, t.deferred.logZ = before, logZ
		return 0, nil, err
	}
	if err != nil {
		return 0, nil, err
	}
	return tok, l.logprob(t, tok, before, logZ), nil
}

// logprob is tok's log-probability entry, from the row before sampling.
func (l *loop) logprob(t *task, tok int, before []float32, logZ float32) *engine.TokenLogprob {
	if before == nil {
		return nil
	}
	return &engine.TokenLogprob{
		Token: l.pieces[tok], Bytes: []byte(l.pieces[tok]), Logprob: before[tok] - logZ,
		Top: topLogprobs(before, t.req.TopLogprobs, logZ, l.pieces),
	}
}

// choose samples t's next token, or inserts it where its output
// constraint forces it (constrain.go), and advances the sampler's grammar.
// A sampled token whose close is not known yet has it computed by a
// worker goroutine (errDeferred): the loop goes on with other slots and
// settles the token when the close is ready.
func (l *loop) choose(t *task) (int, error) {
	c := t.con
	row := liveLogits(l.e.lctx, t.logitsAt, l.e.vocab)
	grammar := c != nil || t.req.Sampling.Grammar != ""
	if grammar && !allFinite(row) {
		// Sampled from NaN, a grammar's choice is any token, one the
		// grammar refuses among them, and accepting that aborts the
		// process. The whole row is read: a grammar's own pass over it
		// costs far more.
		return 0, errNotFinite
	}
	if c == nil {
		var tok int
		if row != nil && argmaxes(t.req.Sampling) {
			tok = argmax(row)
		} else {
			tok = t.sampler.Sample(l.e.lctx, t.logitsAt)
		}
		if !grammar && row != nil && !allFinite(row[tok:tok+1]) {
			return 0, errNotFinite // garbage in, garbage out: stop instead
		}
		t.sampler.Accept(tok, true) // advances the grammar, if any
		return tok, nil
	}
	tok, forced := c.forced()
	if !forced {
		tok = t.sampler.Sample(l.e.lctx, t.logitsAt)
		if !c.isEOG(tok) && !c.follows(tok) {
			t.deferred = &deferredToken{tok: tok}
			hist, text := c.history[:len(c.history):len(c.history)], c.text[:len(c.text):len(c.text)]
			ctx := t.ctx
			l.workers.Add(1)
			go func() {
				defer l.workers.Done()
				seq, ok := c.closeFrom(ctx, hist, text, tok)
				r := closeResult{t: t, seq: seq, ok: ok}
				select {
				case l.worked <- r:
				case <-ctx.Done():
					// The loop may be asleep waiting for this very result
					// (every active task awaiting a close): wake it, so it
					// reaps the task. A full channel wakes it anyway, and
					// a loop that has stopped drains nothing: never block.
					select {
					case l.worked <- r:
					default:
					}
				}
			}()
			return 0, errDeferred
		}
	}
	return l.commit(t, tok, nil), nil
}

// argmaxes reports whether sampling s is choosing the largest logit: at
// temperature 0, with no grammar and no penalty, llama.cpp's chain (top-k,
// top-p and min-p each keep the largest; temperature 0 keeps only it) ends
// in the row's largest logit, so it is read here instead, without copying
// and sorting the vocabulary (a 128k-token vocabulary's chain costs about
// a millisecond a token, the scan a tenth of one). Ties, which the chain
// breaks by its sort's order, go to the lowest id.
func argmaxes(s engine.Sampling) bool {
	return s.Temperature <= 0 && s.Grammar == "" && s.Output == nil && !fullSampler &&
		(s.RepeatPenalty == 0 || s.RepeatPenalty == 1) && s.PresencePenalty == 0 && s.FrequencyPenalty == 0
}

// fullSampler, when set (by tests), sends every choice through llama.cpp's
// sampler chain.
var fullSampler bool

// argmax is the id of row's largest logit, the lowest of equals; NaNs are
// passed over (a row of them gives 0, which the caller finds not finite).
// It runs in C, vectorised: Go's scan of a 128k-token vocabulary took
// 0.15-0.3 ms a token, more than the rest of choosing it.
func argmax(row []float32) int {
	if len(row) == 0 {
		return 0
	}
	return int(C.kvwin_argmax((*C.float)(unsafe.Pointer(&row[0])), C.int32_t(len(row))))
}

// errNotFinite ends an answer whose logits llama.cpp computed as NaN or
// infinite: no token can be sampled from them (compute.go has the one
// cause seen).
var errNotFinite = errors.New("llamacpp: the model computed logits that are not finite numbers (NaN or infinite) for this token; the answer was stopped")

// allFinite reports whether every logit of row is a finite number.
func allFinite(row []float32) bool {
	for _, v := range row {
		if v-v != 0 { // NaN or ±Inf
			return false
		}
	}
	return true
}

// commit keeps tok, or the close's first token when tok's close (res)
// does not fit the tokens left, and advances the grammars. Loop-owned.
func (l *loop) commit(t *task, tok int, res *closeResult) int {
	c := t.con
	left := t.maxNew - len(t.generated) // tokens left, this one included
	switch {
	case c.isEOG(tok):
	case res != nil && res.ok && 1+len(res.seq) > left:
		if c.closeSeq == nil { // unknown since a forced token left the close
			c.closeSeq, _ = c.closeFrom(t.ctx, c.history, c.text, -1)
		}
		if len(c.closeSeq) > 0 {
			if tok != c.closeSeq[0] {
				c.cut = true
			}
			tok, c.closeSeq = c.closeSeq[0], c.closeSeq[1:] // only the close fits now
		}
	case res != nil:
		c.closeSeq = nil
		if res.ok {
			c.closeSeq = res.seq
		}
	case c.follows(tok):
		c.closeSeq = c.closeSeq[1:]
	default:
		c.closeSeq = nil
	}
	t.sampler.Accept(tok, true)
	if !c.isEOG(tok) {
		c.accept(tok)
	}
	return tok
}

// settle finishes a token whose close a worker computed. Loop-owned.
func (l *loop) settle(r closeResult) {
	t := r.t
	if t.slot < 0 || l.slots[t.slot].task != t || t.deferred == nil {
		return // the task ended meanwhile
	}
	d := t.deferred
	t.deferred = nil
	tok := l.commit(t, d.tok, &r)
	l.accept(t, tok, l.logprob(t, tok, d.before, d.logZ))
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
