package fleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"kvwin/attention"
	"kvwin/cmd/kvwin/bench/route"
	"kvwin/engine"
	"kvwin/engine/llamaserver"
)

// Validation: the same workload through `kvwin bench route` on real kvwin
// nodes and through the simulator configured as those nodes (their slots,
// their context, and a cost model fitted from the timings they showed).

// Validation is the two runs side by side.
type Validation struct {
	Real      route.Result
	Simulated Row
	Model     NodeModel
	// Turns compares them turn by turn, in the order sent: conversation,
	// turn, and per side the backend and the cached tokens.
	Turns []string
}

// PrefillRatio is the simulated prefill tokens over the real ones.
func (v Validation) PrefillRatio() float64 {
	return float64(v.Simulated.PrefillTokens) / float64(max(v.Real.PrefillTokens, 1))
}

// TTFTRatio is the simulated TTFT p50 over the real one.
func (v Validation) TTFTRatio() float64 { return v.Simulated.TTFTP50 / max(v.Real.TTFTP50, 1e-9) }

// Validate runs w with policy through bench route against the kvwin nodes
// at urls (slots each, started with --no-snapshots), then replays its
// turns, tokenized by the first node, through the simulator configured as
// those nodes.
func Validate(ctx context.Context, w route.Workload, policy string, urls []string, slots, nodeCtx int) (Validation, error) {
	results, err := route.Bench(ctx, w, route.Options{Policies: []string{policy}, Backends: urls})
	if err != nil {
		return Validation{}, err
	}
	v := Validation{Real: results[0]}
	tok, err := llamaserver.New(llamaserver.Config{BaseURL: urls[0]}, nil)
	if err != nil {
		return v, err
	}
	defer tok.Close()
	turns := slices.Clone(v.Real.Turns)
	slices.SortStableFunc(turns, func(a, b route.Turn) int { return a.Sent.Compare(b.Sent) })
	var replayed []ReplayTurn
	var obs []attention.Observation
	var decode time.Duration
	decoded := 0
	for _, t := range turns {
		if t.Err != nil {
			return v, fmt.Errorf("validate: conversation %d turn %d failed on the real nodes: %w", t.Conv, t.Turn, t.Err)
		}
		msgs := make([]engine.Message, len(t.Messages))
		for i, m := range t.Messages {
			msgs[i] = engine.Message{Role: m["role"], Content: m["content"]}
		}
		p, err := tok.Prompt(ctx, engine.Request{Messages: msgs})
		if err != nil {
			return v, err
		}
		a, err := tok.Tokenize(ctx, t.Answer, false)
		if err != nil {
			return v, err
		}
		replayed = append(replayed, ReplayTurn{Conv: t.Conv, Prompt: p, Answer: a})
		obs = append(obs, attention.Observation{New: max(t.Prompt-t.Cached, 1), Context: t.Cached, Elapsed: t.TTFT})
		decode += t.Total - t.TTFT
		decoded += max(len(a)-1, 1)
	}
	if v.Model, err = Calibrate(obs, NodeModel{StepBase: decode / time.Duration(max(decoded, 1))}); err != nil {
		return v, fmt.Errorf("validate: fitting the nodes' prefill: %w", err)
	}
	// The real gateway's names for its backends (bench route's counting
	// proxies) and the model's name: the router's keys and its rendezvous
	// ties hash them, so the simulated router breaks ties as the real one.
	cfg := Config{Nodes: len(urls), Slots: slots, Context: nodeCtx, Kind: KindKvwin, Policy: policy, Model: v.Model,
		ModelName: tok.Info().Model}
	for _, t := range turns {
		if !slices.Contains(cfg.Names, t.Backend) {
			cfg.Names = append(cfg.Names, t.Backend)
		}
	}
	for i := len(cfg.Names); i < len(urls); i++ {
		cfg.Names = append(cfg.Names, fmt.Sprintf("unused%d", i))
	}
	out, err := replay(ctx, cfg, replayed, w.Concurrency)
	if err != nil {
		return v, err
	}
	v.Simulated = summarize(out.turns, cfg, 0)
	for i, t := range turns {
		if i < len(out.turns) {
			s := out.turns[i]
			v.Turns = append(v.Turns, fmt.Sprintf("conv %d turn %d: real %s cached %d of %d; simulated %s (conv %d turn %d) cached %d of %d",
				t.Conv, t.Turn, t.Backend, t.Cached, t.Prompt, s.backend, s.ci, s.index+1, s.cached, s.promptLen))
		}
	}
	return v, nil
}
