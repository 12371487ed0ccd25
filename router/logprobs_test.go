package router

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"kvwin/engine"
)

// A request for log-probabilities goes to a backend that can report them:
// one that refuses (Ollama) is passed over, not marked down, even when the
// policy ranks it first; when no backend can, the refusal is the answer.
func TestLogprobsGoToABackendThatHasThem(t *testing.T) {
	noLP := fmt.Errorf("a: %w", engine.ErrNoLogprobs)
	t.Run("one refuses: the next serves, every time", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail = noLP
		r := newRouter(t, Config{Policy: PolicyRoundRobin}, a, b)
		for i := range 4 {
			res, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1, Logprobs: true}, nil)
			if err != nil || res.Backend != "b" {
				t.Fatalf("request %d: served by %q, err %v", i, res.Backend, err)
			}
		}
		// Round-robin ranked a first every other request: it was asked
		// and refused, and stays in the fleet for requests without them.
		if a.count() != 2 || !r.members[0].state.Available() {
			t.Fatalf("a asked %d times (want 2), healthy %v", a.count(), r.members[0].state.Available())
		}
	})
	t.Run("all refuse: the refusal", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail, b.fail = noLP, noLP
		r := newRouter(t, Config{}, a, b)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1, Logprobs: true}, nil)
		if !errors.Is(err, engine.ErrNoLogprobs) || errors.Is(err, engine.ErrUnavailable) || a.count()+b.count() != 2 {
			t.Fatalf("err %v after %d tries", err, a.count()+b.count())
		}
	})
	t.Run("one refuses, the other is busy: busy", func(t *testing.T) {
		a, b := newFake("a"), newFake("b")
		a.fail, b.fail = noLP, fmt.Errorf("%w: slots", engine.ErrQueueFull)
		r := newRouter(t, Config{}, a, b)
		_, err := r.Generate(context.Background(), engine.Request{Messages: conv(1, 1), Slot: -1, Logprobs: true}, nil)
		if !errors.Is(err, engine.ErrQueueFull) {
			t.Fatalf("err %v, want queue full", err)
		}
	})
}
