package attention

import (
	"math"
	"math/rand/v2"
	"time"
)

// tinyCPU are prefill coefficients of the order measured for the generated
// test model on one AVX2 core (see recorded_test.go): 4 ms per request,
// 0.2 ms per token, 0.3 µs per (token, attended cell).
var tinyCPU = Coefficients{C0: 0.004, A: 2e-4, B: 3e-7}

// conversationTurns simulates the prefills of one long conversation on a
// shared embedded engine, as kvwin's sink window produces them, and times
// each with truth and multiplicative log-normal noise of sigma.
//
// The shape of the workload, not its numbers, is what matters to the fit:
//   - a continuation turn computes the previous answer and the new ask
//     (70–600 tokens) after the cached conversation;
//   - when the prompt passes 2,048 tokens an eviction step drops it to
//     about 1,200 and recomputes the kept turns after the 256 sink tokens;
//   - every tenth turn misses the cache (another conversation took the
//     slot) and recomputes the whole prompt;
//   - the other slots' cells, which every prefill also attends to in the
//     embedded engine, wander between 0 and 6,000.
//
// It is deterministic for a seed.
func conversationTurns(truth Coefficients, sigma float64, turns int, seed uint64) []Observation {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const sinks, high, low = 256, 2048, 1200
	prompt, others := sinks, 2000
	var obs []Observation
	for turn := range turns {
		others = min(6000, max(0, others+rng.IntN(801)-400))
		added := 50 + rng.IntN(351) + 20 + rng.IntN(181) // last answer + new ask
		var o Observation
		switch {
		case turn == 0 || turn%10 == 9:
			prompt += added
			o = Observation{New: prompt, Context: others}
		case prompt+added > high:
			prompt = low + rng.IntN(200)
			o = Observation{New: prompt - sinks, Context: sinks + others}
		default:
			o = Observation{New: added, Context: prompt + others}
			prompt += added
		}
		noise := math.Exp(sigma * rng.NormFloat64())
		o.Elapsed = time.Duration(truth.Seconds(o.New, o.Context) * noise * 1e9)
		obs = append(obs, o)
	}
	return obs
}

// halves splits obs into alternate turns: even turns to calibrate on, odd
// turns to predict. Alternating keeps both halves spread over the whole
// conversation, as a calibration running alongside a live run would be.
func halves(obs []Observation) (train, test []Observation) {
	for i, o := range obs {
		if i%2 == 0 {
			train = append(train, o)
		} else {
			test = append(test, o)
		}
	}
	return train, test
}
