package web

import (
	"testing"

	"kvwin/engine"
)

// A primed counter answers the known counts for the request's messages in
// order, and asks the real counter for anything else.
func TestPrimedCounter(t *testing.T) {
	msgs := []engine.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}}
	calls := 0
	real := func(m engine.Message) int { calls++; return 100 + len(m.Content) }
	c := primed(msgs, []int{7, 8, 9}, real)
	other := engine.Message{Role: "user", Content: "packet"}
	for i, want := range []struct {
		m engine.Message
		n int
	}{{msgs[0], 7}, {msgs[1], 8}, {other, 106}, {msgs[2], 9}, {msgs[0], 101}} {
		if got := c(want.m); got != want.n {
			t.Errorf("call %d (%v): %d, want %d", i, want.m, got, want.n)
		}
	}
	if calls != 2 {
		t.Errorf("the real counter was called %d times, want 2", calls)
	}
	if got := primed(msgs, []int{1}, real)(msgs[0]); got != 101 {
		t.Errorf("counts of the wrong length were used: %d", got)
	}
}
