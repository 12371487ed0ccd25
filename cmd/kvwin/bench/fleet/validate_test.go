package fleet

import (
	"context"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/cmd/kvwin/bench/route"
)

// The simulator configured as three real kvwin nodes (two slots each,
// snapshots off, cost model fitted from their own timings) and bench route
// on those nodes, the same turns in the same order: the prefill tokens
// agree within 15%.
func TestSimulatorAgreesWithRealKvwinNodesOnPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes on the test model")
	}
	w := route.Workload{Groups: 2, PerGroup: 3, Turns: 4, SystemBytes: 800, UserBytes: 150, AnswerBytes: 100, Concurrency: 1, Seed: 3}
	nodeCtx := w.NodeContext()
	var urls []string
	for range 3 {
		n := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.NoSnapshots = 2, nodeCtx, true })
		urls = append(urls, n.URL())
	}
	v, err := Validate(context.Background(), w, "prefix", urls, 2, nodeCtx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("real: prefill %d, cached share %.3f, ttft p50 %.1f ms; simulated: prefill %d, hit rate %.3f, ttft p50 %.1f ms (model %+v)",
		v.Real.PrefillTokens, v.Real.CachedShare, v.Real.TTFTP50, v.Simulated.PrefillTokens, v.Simulated.HitRate, v.Simulated.TTFTP50, v.Model)
	for _, l := range v.Turns {
		t.Log(l)
	}
	if v.Real.Errors > 0 || v.Simulated.Errors > 0 || v.Simulated.Turns != w.Groups*w.PerGroup*w.Turns {
		t.Fatalf("errors: %d real, %d simulated; %d simulated turns", v.Real.Errors, v.Simulated.Errors, v.Simulated.Turns)
	}
	if r := v.PrefillRatio(); r < 0.85 || r > 1.15 {
		t.Fatalf("simulated prefill %d is %.2f× the real %d, want within 15%%", v.Simulated.PrefillTokens, r, v.Real.PrefillTokens)
	}
}
