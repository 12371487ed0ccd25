package llamacpp

import (
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
// vocabulary (those tokens and the single-character ones): cheap next to a
// decode.

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
// Output. Loop-owned (it needs the piece table).
func newConstraint(l *loop, grammar string) (*constraint, error) {
	c := &constraint{grammar: grammar, pieces: l.pieces, eog: eogTokens(l.e.model, l.e.vocab)}
	byPiece := map[string]int{}
	for i, p := range l.pieces {
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
	ids := make([]uint32, len(l.pieces))
	for i := range ids {
		ids[i] = uint32(i)
	}
	c.full = llama.NewGrammar(grammar, ids, l.pieces, int32s(c.eog))
	if c.full == nil {
		return nil, engine.Invalid("the output grammar does not parse")
	}
	c.all = make([]llama.TokenData, len(l.pieces))
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
	for i := range c.all {
		c.all[i] = llama.TokenData{ID: int32(i)}
	}
	c.full.Apply(c.all)
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
	for i := range c.all {
		c.all[i] = llama.TokenData{ID: int32(i)}
	}
	c.full.Apply(c.all)
	for _, td := range c.all {
		if td.Logit > -1e30 && !c.isEOG(int(td.ID)) {
			return false
		}
	}
	return true
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
}

// maxClose bounds a close's length: no schema kvwin accepts needs more,
// and a grammar that would is reported as no close.
const maxClose = 4096

// close returns the length in tokens of the close after the history plus
// extra (if ≥ 0), and the close's first token; ok is false when no close
// was found (then nothing is forced).
func (c *constraint) close(extra int) (n, first int, ok bool) {
	hist := c.history
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
		return 0, -1, false
	}
	defer g.Free()
	var s jsonScan
	s.feed(c.text)
	for _, t := range hist[len(c.history):] {
		s.feed([]byte(c.pieces[t]))
	}
	for _, t := range hist {
		g.Accept(int32(t))
	}
	allowed := func(tok int) bool {
		td := []llama.TokenData{{ID: int32(tok)}}
		g.Apply(td)
		return td[0].Logit > -1e30
	}
	first = -1
	for n = 0; n < maxClose; n++ {
		if len(c.eog) > 0 && allowed(c.eog[0]) {
			return n, first, true
		}
		tok := c.pick(&s, allowed)
		if tok < 0 {
			return 0, -1, false
		}
		if first < 0 {
			first = tok
		}
		g.Accept(int32(tok))
		s.feed([]byte(c.pieces[tok]))
	}
	return 0, -1, false
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
