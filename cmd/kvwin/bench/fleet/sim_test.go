package fleet

import (
	"context"
	"testing"
)

func smallOptions(kind string, policies ...string) Options {
	w := DefaultWorkload()
	w.Conversations = 300
	return Options{Nodes: 8, Slots: 4, Kind: kind, Policies: policies, Loads: []float64{0.2}, Workload: w, Model: DefaultNodeModel()}
}

// Every turn of every conversation is routed and answered, and no policy
// computes less than the oracle.
func TestEveryTurnIsAnsweredAndNoPolicyBeatsTheOracle(t *testing.T) {
	o := smallOptions(KindLlamaServer, AllPolicies()...)
	convs, err := o.Workload.generate()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, c := range convs {
		want += c.turns()
	}
	rows, err := Bench(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Logf("%+v", r)
		if r.Turns != want || r.Errors != 0 {
			t.Errorf("%s: %d turns, %d errors; want %d turns, none failed", r.Policy, r.Turns, r.Errors, want)
		}
		if r.PrefillTokens < r.OraclePrefill || r.OraclePrefill == 0 {
			t.Errorf("%s: prefill %d below the oracle's %d", r.Policy, r.PrefillTokens, r.OraclePrefill)
		}
	}
}
