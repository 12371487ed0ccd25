package route

import (
	"context"
	"fmt"

	"kvwin/engine"
)

// The oracle of `kvwin bench route`: the prefill a perfect router with an
// unbounded cache would pay for the turns as they ran. Each turn's prompt
// reuses the longest prefix it shares with any earlier turn's prompt
// followed by that turn's answer (what a backend holds after serving it),
// and computes the rest:
//
//	oracle = Σ over turns of (prompt tokens − that longest shared prefix)
//
// No router can do better: a prefix not computed before must be computed
// now, wherever the turn goes. So each policy's prefill divided by the
// oracle says how much its placement costs.

// oracleTokenizer renders a turn's prompt and its answer into the tokens a
// node computes: a kvwin node's llama-server adapter does.
type oracleTokenizer interface {
	engine.Prompter
	engine.Tokenizer
}

// oraclePrefill tokenizes the turns (in the order they ran) and returns the
// oracle's prefill tokens. Turns that failed count for nothing: they have
// no answer to reuse.
func (w Workload) oraclePrefill(ctx context.Context, tok oracleTokenizer, turns []Turn) (int, error) {
	var prompts, held [][]int
	for _, t := range turns {
		if t.Err != nil {
			continue
		}
		msgs := make([]engine.Message, len(t.Messages))
		for i, m := range t.Messages {
			msgs[i] = engine.Message{Role: m["role"], Content: m["content"]}
		}
		p, err := tok.Prompt(ctx, engine.Request{Messages: msgs})
		if err != nil {
			return 0, fmt.Errorf("oracle: render conversation %d turn %d: %w", t.Conv, t.Turn, err)
		}
		a, err := tok.Tokenize(ctx, t.Answer, false)
		if err != nil {
			return 0, fmt.Errorf("oracle: tokenize the answer of conversation %d turn %d: %w", t.Conv, t.Turn, err)
		}
		prompts = append(prompts, p)
		held = append(held, append(append([]int(nil), p...), a...))
	}
	return oracle(prompts, held), nil
}

// oracle sums, over prompts in order, the tokens of each not covered by
// the longest prefix it shares with held[j] for an earlier j.
func oracle(prompts, held [][]int) int {
	total := 0
	for i, p := range prompts {
		best := 0
		for _, h := range held[:i] {
			best = max(best, sharedPrefix(p, h))
		}
		total += len(p) - best
	}
	return total
}

// sharedPrefix is the length of the common prefix of a and b.
func sharedPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
