package router

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"kvwin/engine"
)

// TestObserveReportsDecisionsAndFailovers: each routed turn is reported
// once, with the backend ranked first, those that failed and the one that
// answered.
func TestObserveReportsDecisionsAndFailovers(t *testing.T) {
	a, b := newFake("a"), newFake("b")
	a.fail = fmt.Errorf("%w: connection refused", engine.ErrUnavailable)
	var mu sync.Mutex
	var got []Decision
	r := newRouter(t, Config{Policy: PolicyRoundRobin, Observe: func(d Decision) {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}}, a, b)
	generate(t, r, conv(1, 1)) // a ranked first (round robin starts there), fails; b answers
	generate(t, r, conv(2, 1)) // a is down now: b alone
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d decisions, want 2", len(got))
	}
	d := got[0]
	if d.First != "a" || !slices.Equal(d.Failed, []string{"a"}) || d.Chosen != "b" || d.Candidates != 2 || d.PromptTokens == 0 || d.Err != "" {
		t.Fatalf("first decision %+v", d)
	}
	if d := got[1]; d.First != "b" || len(d.Failed) != 0 || d.Chosen != "b" || d.Candidates != 1 {
		t.Fatalf("second decision %+v", d)
	}
}
