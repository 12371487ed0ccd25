package router

import (
	"context"
	"fmt"
	"kvwin/internal/ident"
	"slices"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/engine/llamaserver/llamaservertest"
	"kvwin/kvcache"
)

// branchFleet is a router over three fake llama-servers of two slots.
type branchFleet struct {
	r     *Router
	fakes map[string]*llamaservertest.Server
}

func newBranchFleet(t *testing.T, rules llamaservertest.Rules, cfg Config) branchFleet {
	t.Helper()
	fl := branchFleet{fakes: map[string]*llamaservertest.Server{}}
	var backends []engine.Backend
	for i := range 3 {
		f := llamaservertest.Start(llamaservertest.Config{Slots: 2, Rules: rules})
		t.Cleanup(f.Close)
		name := fmt.Sprintf("ls%d", i)
		b, err := llamaserver.New(llamaserver.Config{BaseURL: f.URL(), Name: name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		if _, err := b.LoadProps(context.Background()); err != nil {
			t.Fatal(err)
		}
		fl.fakes[name], backends = f, append(backends, b)
	}
	r, err := New(cfg, backends, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	fl.r = r
	return fl
}

// computed is what the fleet's servers have computed so far.
func (fl branchFleet) computed() int {
	n := 0
	for _, f := range fl.fakes {
		n += f.Counts().Computed
	}
	return n
}

// send runs msgs and returns the answer and the prompt tokens the fleet
// computed for it.
func (fl branchFleet) send(t *testing.T, msgs []engine.Message) (engine.Result, int) {
	t.Helper()
	return fl.sendAs(t, "", msgs)
}

// sendAs is send for the conversation named conv ("" unnamed).
func (fl branchFleet) sendAs(t *testing.T, conv string, msgs []engine.Message) (engine.Result, int) {
	t.Helper()
	before := fl.computed()
	res, err := fl.r.Generate(context.Background(), engine.Request{Messages: msgs, MaxTokens: 40, Slot: -1, Keep: -1, Owner: ident.Owner{Tenant: "alice", Conversation: conv}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res, fl.computed() - before
}

func branchSystem(g int) string {
	return strings.Repeat(fmt.Sprintf("system prompt of group %d. ", g), 40)[:900]
}

// A retry, a regenerate and an edit of the last message are branches of
// the chain their slot holds: each stays on that slot and computes only
// what differs, while a newcomer sharing the system prompt still takes a
// free slot rather than the conversation's (its chain is not the
// newcomer's own), on either build's slot rules. On a gateway with keys,
// whose tenant pins choose the slot (tenancy.go), the branches stay all
// the same (a newcomer of the same tenant is given the tenant's slot that
// holds a tenth of its prompt there, as tenancy.go says).
func TestBranchesStayWhereTheirChainIs(t *testing.T) {
	for _, f := range []struct {
		name  string
		rules llamaservertest.Rules
		cfg   Config
	}{
		{"2025-06", llamaservertest.Rules2025, Config{}},
		{"2026-08", llamaservertest.Rules2026, Config{}},
		{"2026-08, tenants isolated", llamaservertest.Rules2026, Config{IsolateTenants: true}},
	} {
		t.Run(f.name, func(t *testing.T) {
			fl := newBranchFleet(t, f.rules, f.cfg)
			msgs := []engine.Message{{Role: "system", Content: branchSystem(0)}, {Role: "user", Content: "first question, asked at some length"}}
			first, _ := fl.send(t, msgs)
			msgs = append(msgs, engine.Message{Role: "assistant", Content: first.Text}, engine.Message{Role: "user", Content: "second question"})
			home, _ := fl.send(t, msgs)
			steps := []struct {
				name string
				msgs []engine.Message
				most int // prompt tokens it may compute
			}{
				{"the same request again", msgs, 1},
				{"an edit of the last message", append(slices.Clone(msgs[:len(msgs)-1]), engine.Message{Role: "user", Content: "second question, put otherwise"}), 64},
				{"the edited request again", append(slices.Clone(msgs[:len(msgs)-1]), engine.Message{Role: "user", Content: "second question, put otherwise"}), 1},
			}
			for _, s := range steps {
				res, computed := fl.send(t, s.msgs)
				if res.Backend != home.Backend || res.Slot != home.Slot || computed > s.most {
					t.Errorf("%s: on %s slot %d, computed %d; want %s slot %d, at most %d", s.name, res.Backend, res.Slot, computed, home.Backend, home.Slot, s.most)
				}
			}
			sibling := []engine.Message{{Role: "system", Content: branchSystem(0)}, {Role: "user", Content: "a newcomer's question"}}
			if res, _ := fl.send(t, sibling); !f.cfg.IsolateTenants && res.Backend == home.Backend && res.Slot == home.Slot {
				t.Errorf("a newcomer sharing the system prompt took the conversation's slot while slots stood free")
			}
		})
	}
}

// A retry leaves its backend only when the same predicted time to first
// token says recomputing its prompt elsewhere answers sooner: behind a
// short queue it stays, behind a long one it moves.
func TestARetryLeavesOnlyForASoonerFirstToken(t *testing.T) {
	fl := newBranchFleet(t, llamaservertest.Rules2026, Config{})
	msgs := []engine.Message{{Role: "system", Content: branchSystem(1)}, {Role: "user", Content: "a question"}}
	home, _ := fl.send(t, msgs)
	m := fl.r.members[slices.IndexFunc(fl.r.members, func(m *member) bool { return m.name == home.Backend })]
	for _, c := range []struct {
		queued time.Duration
		stays  bool
	}{{time.Millisecond, true}, {time.Minute, false}} {
		now := fl.r.cfg.Now()
		due := m.prefills.enqueue(now, c.queued)
		res, computed := fl.send(t, msgs)
		m.prefills.finish(now, due)
		if stayed := res.Backend == home.Backend && res.Slot == home.Slot && computed <= 1; stayed != c.stays {
			t.Errorf("behind %v of prefill on %s: the retry went to %s slot %d, computing %d; want it to stay: %v", c.queued, home.Backend, res.Backend, res.Slot, computed, c.stays)
		}
	}
}

// Liveness tells a chain's own branches from a sibling's prompt: a prompt
// repeating the chain's first prompt (a retry of its first turn: all its
// blocks and as long) or, past it, holding every block before its last
// turn (an edit of its last message) is a branch; one sharing only the
// system prompt is not, nor one sharing the first prompt's blocks but not
// the tokens after them. A retry observed keeps its chain's depth and
// fork. Prompts of 16-token blocks and a few tokens more.
func TestLivenessTellsABranchFromASibling(t *testing.T) {
	var l liveness
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loc := kvcache.Location{Backend: "n", Slot: 0}
	sys, u1, a1, u2, a2 := []kvcache.Key{1, 2}, kvcache.Key(3), kvcache.Key(4), kvcache.Key(5), kvcache.Key(6)
	p1 := append(slices.Clone(sys), u1)
	l.observe(loc, p1, append(slices.Clone(p1), a1), 3*16+5, 0, 0, now)
	for _, c := range []struct {
		name           string
		shared, length int
		want           bool
	}{
		{"the same prompt", 3, 3*16 + 5, true},
		{"its blocks, then other tokens", 3, 3*16 + 9, false},
		{"the system prompt", 2, 3*16 + 5, false},
	} {
		if got := l.branches(loc, c.shared, c.length, 0); got != c.want {
			t.Errorf("first turn: %s is a branch: %v, want %v", c.name, got, c.want)
		}
	}
	p2 := append(slices.Clone(p1), a1, u2)
	now = now.Add(time.Minute)
	l.observe(loc, p2, append(slices.Clone(p2), a2), 5*16+3, 4, 0, now)
	for _, c := range []struct {
		name           string
		shared, length int
		want           bool
	}{
		{"the same prompt", 5, 5*16 + 3, true},
		{"its last message edited", 4, 5*16 + 9, true},
		{"the first exchange's blocks", 3, 5*16 + 3, false},
		{"the system prompt", 2, 5*16 + 3, false},
	} {
		if got := l.branches(loc, c.shared, c.length, 0); got != c.want {
			t.Errorf("second turn: %s is a branch: %v, want %v", c.name, got, c.want)
		}
	}
	// The second turn again, answered otherwise.
	l.observe(loc, p2, append(slices.Clone(p2), 7), 5*16+3, 5, 0, now.Add(time.Second))
	if h := l.last[loc]; h.depth != 1 || h.fork != 4 || l.cont != 1 {
		t.Errorf("after a retry: depth %d, fork %d, %d continuations; want 1, 4, 1", h.depth, h.fork, l.cont)
	}
}

// A conversation's next turn whose previous answer the client replaced
// with text of its own shares exactly the previous prompt with its slot,
// then goes on: the shape of a sibling that shares a chain's whole prompt.
// Named (the client's conversation id), it is the conversation's own turn
// and stays on its slot, computing what follows the shared prompt; unnamed,
// the router cannot tell it from a sibling and leaves the chain to its
// owner while slots are free, as before.
func TestAReplacedAnswerStaysWithItsNamedConversation(t *testing.T) {
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprint("named=", named), func(t *testing.T) {
			fl := newBranchFleet(t, llamaservertest.Rules2026, Config{})
			conv := ""
			if named {
				conv = "c1"
			}
			msgs := []engine.Message{{Role: "system", Content: branchSystem(1)}, {Role: "user", Content: "first question, asked at some length"}}
			first, whole := fl.sendAs(t, conv, msgs)
			msgs = append(msgs, engine.Message{Role: "assistant", Content: "an answer the client wrote itself, not the one generated"},
				engine.Message{Role: "user", Content: "second question"})
			next, computed := fl.sendAs(t, conv, msgs)
			stayed := next.Backend == first.Backend && next.Slot == first.Slot
			if named && (!stayed || computed >= whole/4) {
				t.Fatalf("named: on %s slot %d computing %d (the first turn computed %d); want %s slot %d, computing only what follows the shared prompt",
					next.Backend, next.Slot, computed, whole, first.Backend, first.Slot)
			}
			if !named && (stayed || computed < whole) {
				t.Fatalf("unnamed: on %s slot %d computing %d; the sibling rule should have kept it off %s slot %d while slots are free",
					next.Backend, next.Slot, computed, first.Backend, first.Slot)
			}
			t.Logf("named %v: first turn %d tokens, the next %d on %s slot %d", named, whole, computed, next.Backend, next.Slot)
		})
	}
}
