package gguf

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// agentSim is the agent model's forward pass in float64, written from
// llama.cpp's llama graph (RMS norm, RoPE on adjacent pairs, causal
// attention scaled by 1/√head_dim, SwiGLU), on the weights as stored (f16).
// It checks the program's margins on prompts far longer and more varied
// than the engine tests can afford; the engine tests check the real thing.
type agentSim struct {
	c      TinyConfig
	w      map[string][][]float64 // [out][in]
	ks, vs [][]float64            // the first block's keys and values so far
}

func newAgentSim(c TinyConfig) *agentSim {
	s := &agentSim{c: c, w: map[string][][]float64{}}
	for _, t := range c.tensorsFor(agentVocabSize) {
		if !t.matrix {
			continue
		}
		in, out := int(t.shape[0]), int(t.shape[1])
		m := make([][]float64, out)
		for i := range m {
			m[i] = make([]float64, in)
		}
		for at, v := range agentDesign(c)[t.name] {
			m[at[0]][at[1]] = float64(float16.Fromfloat32(float32(v)).Float32())
		}
		s.w[t.name] = m
	}
	return s
}

func rmsNorm(x []float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r
	}
	return out
}

func matVec(m [][]float64, x []float64) []float64 {
	out := make([]float64, len(m))
	for i, row := range m {
		for j, v := range row {
			if v != 0 {
				out[i] += v * x[j]
			}
		}
	}
	return out
}

func rope(x []float64, pos int) {
	for h := 0; h < len(x); h += agentHeadDim {
		for p := range agentHeadDim / 2 {
			th := float64(pos) * agentTheta(p)
			a, b := x[h+2*p], x[h+2*p+1]
			x[h+2*p], x[h+2*p+1] = a*math.Cos(th)-b*math.Sin(th), a*math.Sin(th)+b*math.Cos(th)
		}
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// next returns the logits after the last token of toks. Only the first
// block's attention is non-zero, so every position's keys and values come
// from its embedding alone.
func (s *agentSim) next(toks []int) []float64 {
	d := s.c.Embedding
	last := len(toks) - 1
	emb := func(tok int) []float64 { return s.w["token_embd.weight"][tok] }
	xq := rmsNorm(emb(toks[last]))
	q := matVec(s.w["blk.0.attn_q.weight"], xq)
	rope(q, last)
	for j := len(s.ks); j < len(toks); j++ {
		xn := rmsNorm(emb(toks[j]))
		k := matVec(s.w["blk.0.attn_k.weight"], xn)
		rope(k, j)
		s.ks = append(s.ks, k)
		s.vs = append(s.vs, matVec(s.w["blk.0.attn_v.weight"], xn))
	}
	attn := make([]float64, d)
	for h := range s.c.Heads {
		lo := h * agentHeadDim
		scores := make([]float64, len(toks))
		vals := s.vs
		best := math.Inf(-1)
		for j := range toks {
			var sc float64
			for i := lo; i < lo+agentHeadDim; i++ {
				sc += q[i] * s.ks[j][i]
			}
			scores[j] = sc / math.Sqrt(agentHeadDim)
			best = max(best, scores[j])
		}
		var sum float64
		for j := range scores {
			scores[j] = math.Exp(scores[j] - best)
			sum += scores[j]
		}
		for j := range scores {
			for i := lo; i < lo+agentHeadDim; i++ {
				attn[i] += scores[j] / sum * vals[j][i]
			}
		}
	}
	x := append([]float64(nil), emb(toks[last])...)
	for i, v := range matVec(s.w["blk.0.attn_output.weight"], attn) {
		x[i] += v
	}
	for l := range s.c.Layers {
		p := "blk." + string(rune('0'+l)) + "."
		xn := rmsNorm(x)
		g, u := matVec(s.w[p+"ffn_gate.weight"], xn), matVec(s.w[p+"ffn_up.weight"], xn)
		for i := range g {
			g[i] = silu(g[i]) * u[i]
		}
		for i, v := range matVec(s.w[p+"ffn_down.weight"], g) {
			x[i] += v
		}
	}
	return matVec(s.w["output.weight"], rmsNorm(x))
}

// agentTokenize splits text as llama.cpp does for this vocabulary: the
// user-defined tokens wherever they occur, every other byte a token.
func agentTokenize(text string) []int {
	var out []int
	for text != "" {
		matched := false
		for i, t := range agentTokens[1:] {
			if strings.HasPrefix(text, t) {
				out = append(out, AgentTokenCall+i)
				text = text[len(t):]
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, int(text[0]))
			text = text[1:]
		}
	}
	return out
}

// chatML renders messages (role, content pairs) with the generation prompt.
func chatML(msgs ...string) []int {
	toks := []int{TinyTokenEndOfText}
	for i := 0; i < len(msgs); i += 2 {
		toks = append(toks, TinyTokenIMStart)
		toks = append(toks, agentTokenize(msgs[i]+"\n"+msgs[i+1])...)
		toks = append(toks, TinyTokenIMEnd)
		toks = append(toks, agentTokenize("\n")...)
	}
	toks = append(toks, TinyTokenIMStart)
	return append(toks, agentTokenize("assistant\n")...)
}

// generate decodes greedily until <|im_end|> or limit tokens, and returns
// the visible text, the tokens, and the smallest margin between the chosen
// token's logit and the next best.
func (s *agentSim) generate(t *testing.T, toks []int, limit int) (string, []int, float64) {
	var text strings.Builder
	var out []int
	margin := math.Inf(1)
	s.ks, s.vs = nil, nil
	for range limit {
		logits := s.next(toks)
		best, second := 0, -1
		for i := range logits {
			if logits[i] > logits[best] {
				best = i
			}
		}
		for i := range logits {
			if i != best && (second < 0 || logits[i] > logits[second]) {
				second = i
			}
		}
		margin = min(margin, logits[best]-logits[second])
		out = append(out, best)
		if best == TinyTokenIMEnd {
			return text.String(), out, margin
		}
		switch {
		case best < 256:
			text.WriteByte(byte(best))
		case best > AgentTokenPad:
			text.WriteString(agentTokens[best-AgentTokenPad])
		}
		toks = append(toks, best)
	}
	t.Fatalf("no end of turn in %d tokens: %q", limit, text.String())
	return "", nil, 0
}

const toolsSystem = "You are terse.\n\n# Tools\n\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"Bash\"}}\n</tools>\n\nFor each function call, return a json object within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"

func TestAgentModelAnswersAndEnds(t *testing.T) {
	s := newAgentSim(DefaultAgentConfig())
	call := `<tool_call>{"name": "Bash", "arguments": {"command": "ls -la"}}</tool_call>`
	cases := []struct {
		name string
		msgs []string
		want string
	}{
		{"plain ask", []string{"user", "list the files here"}, "Done."},
		{"tools, plain ask", []string{"system", toolsSystem, "user", "list the files here"}, "Done."},
		{"call without tools", []string{"user", call}, "Done."},
		{"call", []string{"system", toolsSystem, "user", call}, call},
		{"call after text", []string{"system", toolsSystem, "user", "Please run this:\n" + call}, call},
		{"two calls", []string{"system", toolsSystem, "user", call + "\n" + call}, call + "\n" + call},
		{"call, then its result", []string{"system", toolsSystem, "user", call, "assistant", call,
			"user", "<tool_response>\nREADME.md\n</tool_response>"}, "Done."},
		{"call cut at the front", []string{"system", toolsSystem, "user",
			`<tool_call>{"name": "Bash", "arguments": {"command": "` + strings.Repeat("x", 200) + `"}}</tool_call>`}, "Done."},
		{"compact call", []string{"system", toolsSystem, "user", `<tool_call>{"name":"f","arguments":{}}</tool_call>`},
			`<tool_call>{"name":"f","arguments":{}}</tool_call>`},
	}
	for _, tc := range cases {
		got, toks, margin := s.generate(t, chatML(tc.msgs...), 2*agentScan)
		if got != tc.want {
			t.Errorf("%s: answered %q, want %q (tokens %v)", tc.name, got, tc.want, toks)
		}
		if margin < 20 {
			t.Errorf("%s: the chosen token led the next by only %.1f", tc.name, margin)
		}
	}
}

// TestAgentModelHoldsOnLongPrompts: a call at the end of a long prompt of
// random text (every byte, the markers among them) is still copied whole,
// and a plain ask still answered "Done.".
func TestAgentModelHoldsOnLongPrompts(t *testing.T) {
	if testing.Short() {
		t.Skip("long prompts")
	}
	s := newAgentSim(DefaultAgentConfig())
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 20000 {
		if rng.IntN(50) == 0 {
			b.WriteString(agentTokens[1+rng.IntN(4)])
		}
		b.WriteByte(byte(rng.IntN(256)))
	}
	call := `<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>`
	got, _, margin := s.generate(t, chatML("system", toolsSystem+b.String(), "user", call), 2*agentScan)
	if got != call || margin < 20 {
		t.Errorf("after 20k random bytes: %q (margin %.1f)", got, margin)
	}
	got, _, margin = s.generate(t, chatML("system", toolsSystem+b.String(), "user", "hello"), 4)
	if got != "Done." || margin < 20 {
		t.Errorf("after 20k random bytes, a plain ask: %q (margin %.1f)", got, margin)
	}
}
