package router

import (
	"context"
	"testing"
	"time"

	"kvwin/engine"
)

// A backend's journal reports its load by another connection than the
// answers', so the report that a turn ended can come after the client's
// next request: the router takes its own ended turn off a report that came
// while the turn ran, and leaves a report from before it (another
// gateway's turns) as it is.
func TestOwnEndedTurnLeavesTheReportedLoad(t *testing.T) {
	m, err := newMember(0, newFake("a"), Config{PrefillTokensPerSecond: 1000, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	m.slots.Store(1)
	req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "hi"}}, Tokens: []int{1, 2, 3}}
	run := func(during func()) {
		t.Helper()
		if _, _, err := m.generate(context.Background(), req, func(ev engine.Event) error {
			if ev.First {
				during()
			}
			return nil
		}, 0); err != nil {
			t.Fatal(err)
		}
	}

	// The journal said so while the turn ran: the turn was its load.
	run(func() { m.remoteReported(1) })
	if got := m.inflight(); got != 0 {
		t.Fatalf("after the turn the report counted: %d in flight, want 0", got)
	}
	if w := m.wait(); w != 0 {
		t.Fatalf("after the turn the report counted: wait %v, want 0", w)
	}

	// Another gateway's turn, reported before this one began, is still
	// running when this one ends.
	m.remoteReported(1)
	run(func() {})
	if got := m.inflight(); got != 1 {
		t.Fatalf("another gateway's turn reported before: %d in flight, want 1", got)
	}

	// Two reports while it ran (its start, then another gateway's turn
	// too): one turn comes off, not two.
	m.remoteReported(0)
	run(func() { m.remoteReported(1); m.remoteReported(2) })
	if got := m.inflight(); got != 1 {
		t.Fatalf("two reports during the turn: %d in flight, want 1", got)
	}
}
