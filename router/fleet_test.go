package router

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/kvcache"
)

// statusOf is the status of the backend named name, and whether it is listed.
func statusOf(r *Router, name string) (BackendStatus, bool) {
	for _, s := range r.Status() {
		if s.Name == name {
			return s, true
		}
	}
	return BackendStatus{}, false
}

// registered reports whether the registry holds a backend named name.
func registered(r *Router, name string) bool {
	return slices.ContainsFunc(r.reg.Snapshot().Backends, func(b kvcache.BackendStats) bool { return b.Name == name })
}

// TestFleetJoinsAndDrains: a backend added joins once a health check
// passes; one removed takes no new turn, finishes the one in flight, and
// is forgotten once it ended.
func TestFleetJoinsAndDrains(t *testing.T) {
	r, err := New(Config{Dynamic: true, HealthInterval: 20 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := engine.Request{Model: "m", Prompt: "hello", MaxTokens: 2, Slot: -1}
	if _, err := r.Generate(context.Background(), req, nil); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("an empty fleet: %v, want unavailable", err)
	}
	a := enginetest.New(engine.Info{Name: "a", Model: "m", ContextSlot: 512, Slots: 1})
	a.Script("stop", engine.Timings{PromptTokens: 2}, engine.Event{First: true, Text: "x"})
	a.Result = engine.Result{Text: "x", FinishReason: "stop"}
	a.Hold, a.Entered = make(chan struct{}), make(chan engine.Request, 1)
	b := enginetest.New(engine.Info{Name: "b", Model: "m", ContextSlot: 512, Slots: 1})
	if err := r.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(a); err == nil {
		t.Fatal("the same backend added twice")
	}
	waitChange(t, r, "a joins", func() bool { s, ok := statusOf(r, "a"); return ok && s.Healthy })

	// A turn in flight on a when a leaves.
	done := make(chan error, 1)
	go func() {
		res, err := r.Generate(context.Background(), req, nil)
		if err == nil && res.Backend != "a" {
			err = errors.New("the turn went to " + res.Backend)
		}
		done <- err
	}()
	<-a.Entered
	if err := r.Add(b); err != nil {
		t.Fatal(err)
	}
	waitChange(t, r, "b joins", func() bool { s, ok := statusOf(r, "b"); return ok && s.Healthy })
	drained := r.Remove("a")
	if s, ok := statusOf(r, "a"); !ok || !s.Draining || s.InFlight != 1 {
		t.Fatalf("a while its turn runs: %+v (listed %v), want draining with 1 in flight", s, ok)
	}
	for range 3 { // no new turn goes to a
		res, err := r.Generate(context.Background(), req, nil)
		if err != nil || res.Backend != "b" {
			t.Fatalf("a turn while a drains: %v on %q, want b", err, res.Backend)
		}
	}
	select {
	case <-drained:
		t.Fatal("a drained while its turn was in flight")
	default:
	}
	if !registered(r, "a") {
		t.Fatal("a's residency forgotten before its turn ended")
	}
	close(a.Hold)
	if err := <-done; err != nil {
		t.Fatalf("the turn in flight on a: %v", err)
	}
	select {
	case <-drained:
	case <-time.After(3 * time.Minute):
		t.Fatal("a not drained after its last turn ended")
	}
	if _, ok := statusOf(r, "a"); ok || registered(r, "a") {
		t.Errorf("a still listed (%v) or registered (%v) once drained", ok, registered(r, "a"))
	}
	if got := len(a.Requests()); got != 1 {
		t.Errorf("a got %d requests, want the 1 in flight when it left", got)
	}
	select {
	case <-r.Remove("nobody"):
	default:
		t.Error("removing a backend not in the fleet: channel not closed")
	}
	// It may come back under the same name.
	if err := r.Add(a); err != nil {
		t.Fatalf("a rejoins: %v", err)
	}
}
