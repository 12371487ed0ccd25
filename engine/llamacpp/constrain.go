package llamacpp

import (
	"context"
	"errors"
	"sync"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// JSON output (engine.Output) always completes within the request's token
// budget. The sampler's grammar (llama.cpp's, from the schema) keeps every
// token valid; a constraint on top of it, owned by the loop, decides where
// the model is not asked at all:
//
//   - a forced token (the grammar allows exactly one: the tool-call
//     wrapper, keys, a const name) is inserted, not sampled;
//   - before each sampled token it computes a close: a way to finish the
//     document from here, chosen by a fixed rule (close the string, the
//     object, the array; else the first character the grammar allows), so
//     the close from the next state is the rest of this one. A sampled
//     token is kept only if its own close still fits the tokens left;
//     otherwise the close's first token is taken instead. The close is
//     counted in single-character tokens, at least as many as the model's
//     tokenizer would need, so the bound holds for any vocabulary.
//
// Invariant: after each token, (tokens generated) + (its close) ≤ the
// budget. It holds at the start (checked: a budget below the shortest
// document is a 400) and each step keeps it.
//
// The grammar state cannot be copied through the binding, so a close is
// computed on a fresh grammar replaying the tokens so far, over a small
// vocabulary (those tokens and the single-character ones). That costs a
// parse of the grammar, so it is done as little as possible and never on
// the engine loop: the close from the current state is kept (closeSeq), a
// token that follows it needs no new one, and the close after any other
// sampled token is computed by a worker goroutine while the loop decodes
// the other slots (sample.go). The constraint and the first close are
// made when the request arrives, on the caller's goroutine (newTask).

// constraint is one task's budget keeper. Loop-owned.
type constraint struct {
	grammar string
	pieces  []string
	chars   []int // single-character tokens of printable ASCII, tab and newline, in byte order
	eog     []int
	history []int // tokens accepted so far
	text    []byte
	full    *llama.Grammar // over the whole vocabulary, in step with history
	all     []llama.TokenData
	applied bool // all holds full's verdicts for the current state
	// closeSeq is the close from the current state, as tokens; nil when
	// not known (after a forced token that is not its first).
	closeSeq []int
	// cut: the token limit forced the close in place of a sampled token;
	// the output is whole but what the model was writing was cut, so it
	// finishes as FinishLength, never as a complete answer.
	cut bool
}

// deferredToken is a sampled token waiting for its close, with what its
// log-probabilities are computed from.
type deferredToken struct {
	tok    int
	before []float32
	logZ   float32
}

// closeResult is a close computed off the loop for t's deferred token.
type closeResult struct {
	t   *task
	seq []int
	ok  bool
}

// errDeferred: the token is settled when its close is ready.
var errDeferred = errors.New("llamacpp: token deferred")

// follows reports whether tok is the first token of the known close.
func (c *constraint) follows(tok int) bool {
	return len(c.closeSeq) > 0 && c.closeSeq[0] == tok
}

// closers are the characters a close prefers, outside and inside a string.
var (
	closersOut = []byte{'}', ']', '"', '0', ','}
	closersIn  = []byte{'"'}
)

// eogCache holds each model's end-of-generation tokens.
var eogCache sync.Map // *llama.Model → []int

func eogTokens(m *llama.Model, vocab int) []int {
	if v, ok := eogCache.Load(m); ok {
		return v.([]int)
	}
	var out []int
	for i := range vocab {
		if m.TokenIsEog(i) {
			out = append(out, i)
		}
	}
	eogCache.Store(m, out)
	return out
}

// newConstraint prepares the budget keeper of a grammar built from an
// Output, with its first close: a 400 when that does not fit maxNew.
// Called with the model in use (newTask).
func newConstraint(ctx context.Context, e *Engine, grammar string, maxNew int) (*constraint, error) {
	c := &constraint{grammar: grammar, pieces: e.pieces, eog: eogTokens(e.model, e.vocab)}
	byPiece := map[string]int{}
	for i, p := range e.pieces {
		if len(p) == 1 {
			if _, dup := byPiece[p]; !dup {
				byPiece[p] = i
			}
		}
	}
	for b := byte('\t'); b <= '~'; b++ {
		if id, ok := byPiece[string(b)]; ok && (b >= ' ' || b == '\n' || b == '\t') {
			c.chars = append(c.chars, id)
		}
	}
	ids := make([]uint32, len(e.pieces))
	for i := range ids {
		ids[i] = uint32(i)
	}
	c.full = llama.NewGrammar(grammar, ids, e.pieces, int32s(c.eog))
	if c.full == nil {
		return nil, engine.Invalid("the output grammar does not parse")
	}
	c.all = make([]llama.TokenData, len(e.pieces))
	seq, ok := c.closeFrom(ctx, nil, nil, -1)
	if !ok {
		c.free()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, engine.Invalid("the output format's shortest completion is not found within %d characters of printable ASCII, so its token limit cannot be kept", maxClose)
	}
	if len(seq) > maxNew {
		c.free()
		return nil, engine.Invalid("the token limit (max_tokens; num_predict on the Ollama API, n_predict on /completion) is %d but the shortest output the format allows takes %d tokens", maxNew, len(seq))
	}
	c.closeSeq = seq
	return c, nil
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// free releases the grammars.
func (c *constraint) free() {
	if c.full != nil {
		c.full.Free()
		c.full = nil
	}
}

// forced returns the one token the grammar allows next, if exactly one
// is allowed and it is not end-of-generation.
func (c *constraint) forced() (int, bool) {
	c.applyAll()
	only := -1
	for _, td := range c.all {
		if td.Logit > -1e30 {
			if only >= 0 {
				return 0, false
			}
			only = int(td.ID)
		}
	}
	if only < 0 || c.isEOG(only) {
		return 0, false
	}
	return only, true
}

// complete reports whether the output is whole: the grammar allows
// nothing but end-of-generation.
func (c *constraint) complete() bool {
	c.applyAll()
	for _, td := range c.all {
		if td.Logit > -1e30 && !c.isEOG(int(td.ID)) {
			return false
		}
	}
	return true
}

// applyAll marks in c.all the tokens the grammar allows now: one pass
// over the vocabulary per state, shared by complete (after a token) and
// forced (before the next).
func (c *constraint) applyAll() {
	if c.applied {
		return
	}
	for i := range c.all {
		c.all[i] = llama.TokenData{ID: int32(i)}
	}
	c.full.Apply(c.all)
	c.applied = true
}

func (c *constraint) isEOG(tok int) bool {
	for _, e := range c.eog {
		if e == tok {
			return true
		}
	}
	return false
}

// accept records a chosen token (which the grammar allowed).
func (c *constraint) accept(tok int) {
	c.history = append(c.history, tok)
	c.text = append(c.text, c.pieces[tok]...)
	c.full.Accept(int32(tok))
	c.applied = false
}

// maxClose bounds a close's length: no schema kvwin accepts needs more,
// and a grammar that would is reported as no close.
const maxClose = 4096

// closeFrom returns the close after hist (whose text is text) plus extra
// (if ≥ 0), as tokens; ok is false when no close was found within
// maxClose, or ctx ended. It reads only what never changes after
// newConstraint, so a worker goroutine may run it.
func (c *constraint) closeFrom(ctx context.Context, hist []int, text []byte, extra int) (seq []int, ok bool) {
	if extra >= 0 {
		hist = append(hist[:len(hist):len(hist)], extra)
	}
	vocab := map[int]bool{}
	for _, t := range hist {
		vocab[t] = true
	}
	for _, t := range c.chars {
		vocab[t] = true
	}
	for _, t := range c.eog {
		vocab[t] = true
	}
	ids := make([]uint32, 0, len(vocab))
	pieces := make([]string, 0, len(vocab))
	for t := range vocab {
		ids = append(ids, uint32(t))
		pieces = append(pieces, c.pieces[t])
	}
	g := llama.NewGrammar(c.grammar, ids, pieces, int32s(c.eog))
	if g == nil {
		return nil, false
	}
	defer g.Free()
	var s jsonScan
	s.feed(text)
	if extra >= 0 {
		s.feed([]byte(c.pieces[extra]))
	}
	for _, t := range hist {
		g.Accept(int32(t))
	}
	allowed := func(tok int) bool {
		td := []llama.TokenData{{ID: int32(tok)}}
		g.Apply(td)
		return td[0].Logit > -1e30
	}
	seq = []int{}
	for range maxClose {
		if ctx.Err() != nil {
			return nil, false
		}
		if len(c.eog) > 0 && allowed(c.eog[0]) {
			return seq, true
		}
		tok := c.pick(&s, allowed)
		if tok < 0 {
			return nil, false
		}
		seq = append(seq, tok)
		g.Accept(int32(tok))
		s.feed([]byte(c.pieces[tok]))
	}
	return nil, false
}

// pick chooses a close's next token: a closer if the grammar allows one,
// else the first single-character token it allows.
func (c *constraint) pick(s *jsonScan, allowed func(int) bool) int {
	closers := closersOut
	if s.inString {
		closers = closersIn
	}
	if !s.escaped {
		for _, b := range closers {
			if tok := c.char(b); tok >= 0 && allowed(tok) {
				return tok
			}
		}
	}
	for _, tok := range c.chars {
		if allowed(tok) {
			return tok
		}
	}
	return -1
}

// char is the single-character token of b, or -1.
func (c *constraint) char(b byte) int {
	for _, tok := range c.chars {
		if c.pieces[tok][0] == b {
			return tok
		}
	}
	return -1
}

// jsonScan follows whether text is inside a JSON string.
type jsonScan struct {
	inString, escaped bool
}

func (s *jsonScan) feed(b []byte) {
	for _, ch := range b {
		switch {
		case s.escaped:
			s.escaped = false
		case s.inString && ch == '\\':
			s.escaped = true
		case ch == '"':
			s.inString = !s.inString
		}
	}
}
