package router

import (
	"context"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
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

// journalAnswers is a backend whose answers say where its slot journal
// stood at their end, as a kvwin node's do.
type journalAnswers struct {
	*fake
	at kvcache.Cursor
}

func (b *journalAnswers) Generate(ctx context.Context, req engine.Request, stream engine.StreamFunc) (engine.Result, error) {
	res, err := b.fake.Generate(ctx, req, stream)
	res.Journal = b.at
	return res, err
}

// A node's journal report of a turn's own running can be read after the
// turn's answer, when no report came while it ran: the answer says where
// the journal stood at its end, and a report from before that is not the
// load now. Taken as it, the idle node looked busy and the conversation's
// next turn went to another node
// (TestFleetRestoresReturningConversationsFromTheirNodesSnapshots).
func TestAReportFromBeforeAnAnswersEndIsNotTheLoad(t *testing.T) {
	node := &journalAnswers{fake: newFake("a"), at: kvcache.Cursor{Epoch: "e1", After: 10}}
	m, err := newMember(0, node, Config{PrefillTokensPerSecond: 1000, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	m.slots.Store(1)
	req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "hi"}}, Tokens: []int{1, 2, 3}}
	res, _, err := m.generate(context.Background(), req, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Journal != (kvcache.Cursor{}) {
		t.Errorf("the router's result carries the backend's journal position %+v", res.Journal)
	}
	for _, step := range []struct {
		load int
		at   kvcache.Cursor
		want int
		why  string
	}{
		{1, kvcache.Cursor{Epoch: "e1", After: 9}, 0, "the turn's own running, read after its answer"},
		{0, kvcache.Cursor{Epoch: "e1", After: 10}, 0, "the load at the answer's end"},
		{1, kvcache.Cursor{Epoch: "e1", After: 11}, 1, "a turn that began after it (another gateway's)"},
		{2, kvcache.Cursor{Epoch: "e2", After: 3}, 2, "the node restarted: a new epoch"},
	} {
		m.loadReported(step.load, step.at)
		if got := m.inflight(); got != step.want {
			t.Errorf("%s: report %d at %+v gives %d in flight, want %d", step.why, step.load, step.at, got, step.want)
		}
	}

	// A backend that does not say (llama-server): every report counts.
	plain, err := newMember(1, newFake("b"), Config{PrefillTokensPerSecond: 1000, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plain.generate(context.Background(), req, nil, 0); err != nil {
		t.Fatal(err)
	}
	plain.loadReported(1, kvcache.Cursor{Epoch: "e1", After: 9})
	if got := plain.inflight(); got != 1 {
		t.Errorf("a backend whose answers say nothing: %d in flight, want the report's 1", got)
	}
}
