package llamacpp

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"kvwin/engine"
)

// A greedy answer read by argmax is the one llama.cpp's sampler chain
// gives, token for token, with the default top-k, top-p and min-p left
// on, with a logit bias, and with log-probabilities asked for.
func TestGreedyArgmaxAnswersAsTheSamplerChain(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 1024})
	ask := func(seed int, full bool) engine.Result {
		fullSampler = full
		defer func() { fullSampler = false }()
		req := greedy(40)
		req.NoCache = true
		req.Messages = []engine.Message{{Role: "user", Content: text(seed, 80+seed*37)}}
		if seed%3 == 1 {
			req.Sampling.LogitBias = map[int]float32{e.vocab / 2: 5, 7: -100}
		}
		req.Logprobs, req.TopLogprobs = seed%2 == 0, 2
		res, err := e.Generate(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for seed := range 8 {
		fast, chain := ask(seed, false), ask(seed, true)
		if len(fast.Tokens) == 0 || !equalInts(fast.Tokens, chain.Tokens) || fast.Text != chain.Text {
			t.Fatalf("prompt %d: argmax gave %v %q, the sampler chain %v %q", seed, fast.Tokens, fast.Text, chain.Tokens, chain.Text)
		}
		for i := range fast.Logprobs {
			if fast.Logprobs[i].Logprob != chain.Logprobs[i].Logprob {
				t.Fatalf("prompt %d token %d: logprob %v, the chain's %v", seed, i, fast.Logprobs[i].Logprob, chain.Logprobs[i].Logprob)
			}
		}
	}
}

// argmax takes the largest logit, the lowest id of equals, and passes
// over NaNs; which sampling reads it.
func TestArgmax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		row  []float32
		want int
	}{
		{[]float32{1, 3, 2}, 1},
		{[]float32{5, 5, 1}, 0},
		{[]float32{nan, -1, -2}, 1},
		{[]float32{-1, inf, 2}, 1},
		{[]float32{nan, nan}, 0},
	} {
		if got := argmax(c.row); got != c.want {
			t.Errorf("argmax(%v) = %d, want %d", c.row, got, c.want)
		}
	}
	// The vectorised scan against the definition, on rows of every length
	// around its lane width and a vocabulary's, with ties, NaNs, infinities
	// and signed zeros where its lanes meet.
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 7, 7}
	for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 128256} {
		for range 40 {
			row := make([]float32, n)
			for i := range row {
				row[i] = float32(rng.NormFloat64())
				if rng.IntN(8) == 0 {
					row[i] = special[rng.IntN(len(special))]
				}
			}
			if rng.IntN(4) == 0 {
				for i := range row {
					row[i] = special[rng.IntN(3)] // NaNs and infinities only
				}
			}
			if got, want := argmax(row), argmaxGo(row); got != want {
				t.Fatalf("%d values: argmax %d (%v), definition %d (%v)", n, got, row[got], want, row[want])
			}
		}
	}
	greedy := engine.Sampling{Temperature: 0, RepeatPenalty: 1, TopK: 40, TopP: 0.95, MinP: 0.05}
	for _, c := range []struct {
		name string
		edit func(*engine.Sampling)
		want bool
	}{
		{"greedy", func(*engine.Sampling) {}, true},
		{"temperature", func(s *engine.Sampling) { s.Temperature = 0.7 }, false},
		{"grammar", func(s *engine.Sampling) { s.Grammar = `root ::= "a"` }, false},
		{"output", func(s *engine.Sampling) { s.Output = &engine.Output{} }, false},
		{"repeat penalty", func(s *engine.Sampling) { s.RepeatPenalty = 1.1 }, false},
		{"presence", func(s *engine.Sampling) { s.PresencePenalty = 0.5 }, false},
		{"frequency", func(s *engine.Sampling) { s.FrequencyPenalty = 0.5 }, false},
	} {
		s := greedy
		c.edit(&s)
		if got := argmaxes(s); got != c.want {
			t.Errorf("%s: argmaxes %v, want %v", c.name, got, c.want)
		}
	}
}

// argmaxGo is argmax's definition, in Go, which the test holds argmax to.
func argmaxGo(row []float32) int {
	best, at := float32(math.Inf(-1)), 0
	for i, v := range row {
		if v > best {
			best, at = v, i
		}
	}
	return at
}
