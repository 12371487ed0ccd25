package gguf

import (
	"errors"
	"math"
)

// The agent test model (kvwin model tiny --agent; what `kvwin serve` serves
// by default) is the test model a coding agent can finish a turn on. Its
// weights are not random: they are set by hand so that llama.cpp's own
// forward pass computes a small program (docs/serve.md, "The agent test
// model", has the rules):
//
//   - it answers "Done." and ends (its end-of-turn token), whatever it is
//     asked;
//   - when tools are offered (the prompt holds the <tools> kvwin and
//     Hermes-style templates put the tool list in) and the last user message
//     ends with a call written on one line, <tool_call>{"name": …,
//     "arguments": …}</tool_call>, within its last agentScan tokens, it
//     answers that call, byte for byte, and ends.
//
// Everything happens in the first block; the second only gates the copy.
// Heads of the first block read the token a fixed distance back (a key
// and a query that RoPE turns into a peak at that distance) or a token by
// content (the <tools> marker, on the slowest RoPE pair, which turns less
// than 0.32 rad across the whole context):
//
//	scan   agentScan+12 back: during a call, the ask's byte to copy now
//	next   one nearer: whether the scanned <tool_call> is followed by "{"
//	start  10 back: <|im_start|> there means this is the answer's first step
//	close  13 back: the ask's last token, </tool_call> or not
//	tools  anywhere: whether tools are offered
//
// The first feed-forward turns those into the state of the answer (end,
// "Done.", a pad while scanning up to the call, or copy), the second gates
// the scanned byte's code by "copy", and the output matrix reads the
// state. Pads are a control token, so no client sees them.

// Tokens the agent model adds after the test model's.
const (
	AgentTokenPad   = tinyVocabSize + iota // <|pad|>: control, shown as nothing
	AgentTokenCall                         // <tool_call>
	AgentTokenClose                        // </tool_call>
	AgentTokenTools                        // <tools>
	AgentTokenDone                         // "Done.": the answer
	agentVocabSize
)

var agentTokens = []string{"<|pad|>", "<tool_call>", "</tool_call>", "<tools>", "Done."}

// agentScan is how many tokens at the end of the ask a call may take.
const agentScan = 128

// agentRopeBase makes the fast RoPE pairs sharp enough for the fixed-offset
// heads and the slowest one nearly still across 131,072 positions.
const agentRopeBase = 1e6

// DefaultAgentConfig is the agent model's shape: two blocks, five heads of
// 32 (one per head above), a narrow feed-forward (the program needs 9
// units a block; a wider one only costs time), and a 131,072-token context, enough
// for a coding agent's first request on a byte-level vocabulary.
func DefaultAgentConfig() TinyConfig {
	return TinyConfig{Layers: 2, Embedding: 160, Heads: 5, KVHeads: 5, FeedForward: 256, Context: 131072, Seed: 1, Agent: true}
}

func (c TinyConfig) validateAgent() error {
	switch {
	case c.VocabPath != "" || c.Template != "":
		return errors.New("tiny model: --agent writes its own vocabulary and ChatML template")
	case c.HeadDim() != agentHeadDim || c.Heads != c.KVHeads || c.Heads < agentHeads:
		return errors.New("tiny model: --agent needs heads of 32 dimensions, at least 5, as many key/value heads")
	case c.Layers < 2 || c.FeedForward < agentUnits:
		return errors.New("tiny model: --agent needs at least 2 layers and a feed-forward width of 9")
	case c.Context < 4*agentScan:
		return errors.New("tiny model: --agent needs a context of at least 512")
	}
	return nil
}

// The agent vocabulary: the test model's, then agentTokens (the pad is a
// control token, the others user-defined: llama.cpp matches those in any
// text, so "<tool_call>" in a prompt is one token).
func agentVocab() ([]string, []int32) {
	tokens, types := tinyVocab()
	for i, t := range agentTokens {
		tokens = append(tokens, t)
		types = append(types, map[bool]int32{true: 3, false: 4}[i == 0])
	}
	return tokens, types
}

// Residual dimensions of the program.
const (
	dimBias  = 0  // every token: agentBias
	dimCode  = 1  // 9: the token's id in bits, ±1
	dimFlag  = 10 // one-hot over the token's kind (flag*)
	dimScan  = 20 // 9: the scanned token's bits
	dimEnd   = 29 // the scanned token is <|im_end|>
	dimCall  = 30 // the scanned token is <tool_call>
	dimBrace = 31 // the token after it is "{"
	dimStart = 32 // <|im_start|> 10 back: the answer's first step
	dimClose = 33 // the ask ends with </tool_call>
	dimTools = 34 // tools are offered
	dimSPad  = 35 // the scanned token is a pad: the scan passed the ask
	dimEOS   = 40 // state: end the answer
	dimDone  = 41 // state: say "Done."
	dimPad   = 42 // state: pad while scanning
	dimCopy  = 43 // state: copy the scanned token
	dimOut   = 50 // 9: the scanned token's bits, where copying
	codeBits = 9
)

// Token kinds, one flag each, so every embedding has the same norm.
const (
	flagOther = iota
	flagPad
	flagDone
	flagIMStart
	flagIMEnd
	flagCall
	flagBrace
	flagClose
	flagTools
)

const (
	agentHeadDim = 32
	agentHeads   = 5
	agentUnits   = 9 // the most units one block's program uses
	agentBias    = 4.0
	// peakScale is the fixed-offset heads' score per unit of their RoPE
	// sum: the nearest wrong distance scores ≥ 2.07 units lower (pair 0
	// weighted 4, pair 1 2.5, the rest 1), so ≥ 31 lower in the softmax.
	peakScale = 15.0
	// toolsScore is the <tools> head's score for its marker (≥ 0.95 of it
	// after the slow pair's turn), far above ln(131072) ≈ 11.8.
	toolsScore = 45.0
	// gateSlope turns a threshold's half-unit margin into a SiLU input of
	// about ±30: on, linear; off, −30·σ(−30) ≈ 0.
	gateSlope  = 30.0
	copyLogit  = 10.0 // per code bit: a wrong token scores ≥ 2 bits lower
	stateLogit = 20.0
)

// Heads of the first block.
const (
	headScan = iota
	headNext
	headStart
	headClose
	headTools
)

func tokenFlag(tok int) int {
	switch tok {
	case AgentTokenPad:
		return flagPad
	case AgentTokenDone:
		return flagDone
	case TinyTokenIMStart:
		return flagIMStart
	case TinyTokenIMEnd:
		return flagIMEnd
	case AgentTokenCall:
		return flagCall
	case '{':
		return flagBrace
	case AgentTokenClose:
		return flagClose
	case AgentTokenTools:
		return flagTools
	}
	return flagOther
}

// agentNorm is the RMS-normalised value of one unit of an embedding: every
// embedding is agentBias on dimBias, ±1 on the nine code bits and 1 on its
// flag.
func agentNorm(d int) float64 {
	return 1 / math.Sqrt((agentBias*agentBias+codeBits+1)/float64(d)+1e-5)
}

// agentDesign returns the program's weights for config c: per tensor, the
// entries that are not zero, keyed by (out, in). Norm vectors are all ones.
func agentDesign(c TinyConfig) map[string]map[[2]int]float64 {
	w := map[string]map[[2]int]float64{}
	set := func(tensor string, out, in int, v float64) {
		if w[tensor] == nil {
			w[tensor] = map[[2]int]float64{}
		}
		w[tensor][[2]int{out, in}] += v
	}
	for tok := range agentVocabSize {
		set("token_embd.weight", tok, dimBias, agentBias)
		for b := range codeBits {
			set("token_embd.weight", tok, dimCode+b, bitSign(tok, b))
		}
		set("token_embd.weight", tok, dimFlag+tokenFlag(tok), 1)
	}
	agentAttention(c, set)
	agentFeedForward(set)
	for tok := range agentVocabSize {
		for b := range codeBits {
			set("output.weight", tok, dimOut+b, copyLogit*bitSign(tok, b))
		}
	}
	set("output.weight", TinyTokenIMEnd, dimEOS, stateLogit)
	set("output.weight", AgentTokenDone, dimDone, stateLogit)
	set("output.weight", AgentTokenPad, dimPad, stateLogit)
	return w
}

func bitSign(tok, b int) float64 {
	if tok>>b&1 == 1 {
		return 1
	}
	return -1
}

// agentTheta is RoPE pair p's angle per position (llama.cpp's
// base^(-2p/n_rot)).
func agentTheta(p int) float64 {
	return math.Pow(agentRopeBase, -2*float64(p)/agentHeadDim)
}

func agentAttention(c TinyConfig, set func(string, int, int, float64)) {
	u := agentNorm(c.Embedding)
	nb := agentBias * u
	const q, k, v, o = "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight"
	root := math.Sqrt(agentHeadDim) // llama.cpp scales scores by 1/√head_dim
	offset := func(h, back int) {
		for p := range agentHeadDim / 2 {
			a := peakScale * root * []float64{4, 2.5}[min(p, 1)]
			if p > 1 {
				a = peakScale * root
			}
			th := agentTheta(p) * float64(back)
			set(q, h*agentHeadDim+2*p, dimBias, a*math.Cos(th)/nb)
			set(q, h*agentHeadDim+2*p+1, dimBias, -a*math.Sin(th)/nb)
			set(k, h*agentHeadDim+2*p, dimBias, 1/nb)
		}
	}
	read := func(h, j, flag, dst int) {
		set(v, h*agentHeadDim+j, dimFlag+flag, 1/u)
		set(o, dst, h*agentHeadDim+j, 1)
	}
	offset(headScan, agentScan+12)
	for b := range codeBits {
		set(v, headScan*agentHeadDim+b, dimCode+b, 1/u)
		set(o, dimScan+b, headScan*agentHeadDim+b, 1)
	}
	read(headScan, codeBits, flagIMEnd, dimEnd)
	read(headScan, codeBits+1, flagCall, dimCall)
	read(headScan, codeBits+2, flagPad, dimSPad)
	offset(headNext, agentScan+11)
	read(headNext, 0, flagBrace, dimBrace)
	offset(headStart, 10)
	read(headStart, 0, flagIMStart, dimStart)
	offset(headClose, 13)
	read(headClose, 0, flagClose, dimClose)
	slow := headTools*agentHeadDim + agentHeadDim - 2
	set(q, slow, dimBias, toolsScore*root/0.95/nb)
	set(k, slow, dimFlag+flagTools, 1/u)
	read(headTools, 0, flagTools, dimTools)
}

// agentUnit is one threshold of the first feed-forward: it adds to dst
// while Σ weight·feature + bias > 0 (features 0 or 1, margins ½).
type agentUnit struct {
	dst    int
	bias   float64
	weight map[int]float64
}

// The state of the next token. p: the current token is a pad, q: it is
// "Done.", s: first step, t: tools offered, c: the ask ends with a call,
// m1, m2: the scanned token is <tool_call> and "{" follows, e: the scanned
// token is <|im_end|>, sp: it is a pad (the scan has passed the ask).
// Copying (o) is every other current token.
var agentUnits1 = func() []agentUnit {
	p, q, s, t, c := dimFlag+flagPad, dimFlag+flagDone, dimStart, dimTools, dimClose
	m1, m2, e, sp := dimCall, dimBrace, dimEnd, dimSPad
	return []agentUnit{
		{dimEOS, -0.5, map[int]float64{q: 1}},                             // after "Done."
		{dimEOS, -0.5, map[int]float64{p: -1, s: -1, q: -1, e: 1}},        // copied the call's last token
		{dimDone, -0.5, map[int]float64{s: 2, t: -1, c: -1}},              // first step, no call asked
		{dimDone, -1.5, map[int]float64{p: 1, sp: 1}},                     // scanned the ask, found no call
		{dimPad, -0.5, map[int]float64{p: 2, m1: -1, m2: -1, sp: -2}},     // still scanning
		{dimPad, -4.5, map[int]float64{s: 2, t: 2, c: 2, m1: -1, m2: -1}}, // first step of a call
		{dimCopy, -2.5, map[int]float64{p: 1, m1: 1, m2: 1}},              // the call starts
		{dimCopy, -4.5, map[int]float64{s: 1, t: 1, c: 1, m1: 1, m2: 1}},  // it starts at once
		{dimCopy, 0.5, map[int]float64{p: -1, s: -1, q: -1, e: -1}},       // copying
	}
}()

func agentFeedForward(set func(string, int, int, float64)) {
	for k, un := range agentUnits1 {
		set("blk.0.ffn_gate.weight", k, dimBias, gateSlope*un.bias/agentBias)
		for dim, wt := range un.weight {
			set("blk.0.ffn_gate.weight", k, dim, gateSlope*wt)
		}
		set("blk.0.ffn_up.weight", k, dimBias, 1/agentBias)
		// About 1 on dst when on (the unit's output is about
		// gateSlope·margin/rms², rms ≈ 0.5).
		set("blk.0.ffn_down.weight", un.dst, k, 1/(gateSlope*0.5*4))
	}
	for b := range codeBits {
		set("blk.1.ffn_gate.weight", b, dimCopy, gateSlope)
		set("blk.1.ffn_gate.weight", b, dimBias, -0.5*gateSlope/agentBias)
		set("blk.1.ffn_up.weight", b, dimScan+b, 1)
		set("blk.1.ffn_down.weight", dimOut+b, b, 1/(gateSlope*0.5*4))
	}
}
