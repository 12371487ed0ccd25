package fleet

import (
	"context"
	"testing"
	"time"
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

// On both kinds of node, kvwin's prefix policy computes no more prefill
// than any other policy, and its TTFT p90 is the best within 5%. On kvwin
// nodes, which seed a slot from another, the router once left the slot to
// the node for good (the least recently used idle one, whoever's chain it
// held): 6.4× the oracle's prefill here, more than SGLang's and Dynamo's.
func TestPrefixRoutingComputesLeastOnEitherKindOfNode(t *testing.T) {
	for _, kind := range []string{KindLlamaServer, KindKvwin} {
		rows, err := Bench(context.Background(), smallOptions(kind, AllPolicies()...))
		if err != nil {
			t.Fatal(err)
		}
		var prefix Row
		for _, r := range rows {
			if r.Policy == "prefix" {
				prefix = r
			}
		}
		for _, r := range rows {
			t.Logf("%s %s: prefill %.2f× the oracle's, ttft p90 %.0f ms", kind, r.Policy, float64(r.PrefillTokens)/float64(r.OraclePrefill), r.TTFTP90)
			if r.PrefillTokens < prefix.PrefillTokens {
				t.Errorf("%s nodes: %s computes %d prefill tokens, prefix %d", kind, r.Policy, r.PrefillTokens, prefix.PrefillTokens)
			}
			if prefix.TTFTP90 > 1.05*r.TTFTP90 {
				t.Errorf("%s nodes: prefix's ttft p90 %.0f ms, %s's %.0f ms", kind, prefix.TTFTP90, r.Policy, r.TTFTP90)
			}
		}
	}
}

// Before the router's liveness weighs chains, a kvwin node chooses its
// own slot, the least recently used idle one, whoever's chain it holds;
// but while some node has an empty slot the router plans the turn: b,
// sharing a's first 96 tokens, goes to the empty node rather than to a's,
// whose only slot holds a's chain while a thinks, and a's next turn
// computes only what is new.
func TestAnEmptySlotIsTakenBeforeAThinkingConversationsOnKvwinNodes(t *testing.T) {
	a := &conversation{stream: seq(1, 200), promptEnd: []int{100, 140}, answerEnd: []int{120, 160},
		think: []time.Duration{30 * time.Second, 0}}
	b := &conversation{stream: append(seq(1, 96), seq(100_000, 100)...), promptEnd: []int{110}, answerEnd: []int{130},
		think: []time.Duration{0}, start: 15 * time.Second}
	cfg := Config{Nodes: 2, Slots: 1, Context: 4096, Kind: KindKvwin, Policy: "prefix", Model: DefaultNodeModel()}
	out, err := run(context.Background(), cfg, []*conversation{a, b})
	if err != nil {
		t.Fatal(err)
	}
	turns := map[[2]int]*turnRecord{}
	for _, r := range out.turns {
		if r.err != nil {
			t.Fatal(r.err)
		}
		turns[[2]int{r.ci, r.index}] = r
	}
	a0, a1, b0 := turns[[2]int{0, 0}], turns[[2]int{0, 1}], turns[[2]int{1, 0}]
	if b0.backend == a0.backend {
		t.Errorf("b ran on %s, the node holding a's chain; want the empty one", b0.backend)
	}
	// a's second turn: 140 tokens of prompt, 119 held (its first prompt
	// and answer but the last token).
	if a1.backend != a0.backend || a1.computed != 140-119 {
		t.Errorf("a's second turn on %s (first on %s) computed %d tokens, want %d on its node", a1.backend, a0.backend, a1.computed, 140-119)
	}
}
