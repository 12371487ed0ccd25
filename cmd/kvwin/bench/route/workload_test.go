package route

import (
	"context"
	"os"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/llamaserver"
)

// TestMain removes the test model the servers of this binary shared.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

func smallRouteWorkload() Workload {
	return Workload{Groups: 2, PerGroup: 3, Turns: 6, SystemBytes: 800, UserBytes: 80, AnswerBytes: 160,
		Concurrency: 1, Seed: 3}
}

// The workload's nodes are sized so that its longest prompt fits the
// window budget a gateway derives from their context.
func TestRouteWorkloadSizesItsNodes(t *testing.T) {
	w := DefaultWorkload()
	ctx := w.NodeContext()
	if budget := ctx - app.OutputReserve(ctx); budget < w.maxPromptTokens() || ctx%512 != 0 {
		t.Fatalf("ctx %d, budget %d for prompts up to %d tokens", ctx, budget, w.maxPromptTokens())
	}
	// Today's workload (3 groups × 4 conversations × 6 turns) reaches 3565
	// tokens on its sixth turns, beyond the 3072-token budget of 4096.
	if w.Groups*w.PerGroup*w.Turns != 72 || w.maxPromptTokens() < 3565 || ctx <= 4096 {
		t.Fatalf("workload %+v: bound %d, ctx %d", w, w.maxPromptTokens(), ctx)
	}
}

// Prefix routing computes about the minimum (each turn's new message, each
// system prompt once per node: the answers were generated where the
// conversation lives); round-robin recomputes history and answers wherever
// a turn lands away from its conversation's node.
func TestPrefixRoutingComputesAThirdOfRoundRobinsPrefill(t *testing.T) {
	w := smallRouteWorkload()
	results := map[string]Result{}
	for _, policy := range []string{"prefix", "round-robin"} {
		gw, nodes := apptest.StartFleet(t, 3, policy)
		res := w.Run(context.Background(), gw.URL(), policy, nil)
		if res.Errors > 0 || res.Requests != w.Groups*w.PerGroup*w.Turns {
			t.Fatalf("%s: %d requests, %d errors", policy, res.Requests, res.Errors)
		}
		tok, err := llamaserver.New(llamaserver.Config{BaseURL: nodes[0].URL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Close()
		if res.OraclePrefill, err = w.oraclePrefill(context.Background(), tok, res.Turns); err != nil {
			t.Fatal(err)
		}
		results[policy] = res
		t.Logf("%-12s prefill %6d tokens (oracle %d), cached share %.2f, TTFT p50 %.0f ms p90 %.0f ms", policy, res.PrefillTokens,
			res.OraclePrefill, res.CachedShare, res.TTFTP50, res.TTFTP90)
	}
	p, rr := results["prefix"], results["round-robin"]
	if 3*p.PrefillTokens > rr.PrefillTokens {
		t.Fatalf("prefix computed %d prefill tokens, round-robin %d: want ≤ 1/3", p.PrefillTokens, rr.PrefillTokens)
	}
	// The oracle is a lower bound no policy beats, and prefix routing one
	// request at a time comes close to it.
	for _, r := range results {
		if r.OraclePrefill <= 0 || r.PrefillTokens < r.OraclePrefill {
			t.Fatalf("%s: prefill %d below its oracle %d", r.Policy, r.PrefillTokens, r.OraclePrefill)
		}
	}
	if float64(p.PrefillTokens) > 1.15*float64(p.OraclePrefill) {
		t.Fatalf("prefix prefill %d is more than 1.15× the oracle's %d", p.PrefillTokens, p.OraclePrefill)
	}
	// Requests go one at a time, so the hot-spot guard never fires: every
	// follow-up turn lands where its conversation's previous turn ran.
	home := map[int]string{}
	for _, tr := range p.Turns {
		if prev, ok := home[tr.Conv]; ok && tr.Backend != prev {
			t.Fatalf("conversation %d turn %d went to %s, its prefix is on %s", tr.Conv, tr.Turn, tr.Backend, prev)
		}
		home[tr.Conv] = tr.Backend
	}
}
