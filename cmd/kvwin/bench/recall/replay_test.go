package recall

import (
	"context"
	"testing"

	"kvwin/engine"
	"kvwin/window"
)

// TestReplayCost: a turn's cached tokens are those of the longest common
// prefix, in whole messages, of its window and the previous window followed
// by the previous answer.
func TestReplayCost(t *testing.T) {
	c := Conversation{SpeakerA: "A", SpeakerB: "B"}
	for _, text := range []string{"u0 hello there", "a0 hi", "u1 how are things", "a1 fine", "u2 and now"} {
		sp := "A"
		if text[0] == 'a' {
			sp = "B"
		}
		c.Turns = append(c.Turns, Turn{Speaker: sp, Text: text})
	}
	count := counter(c)
	// The window is the history verbatim, except that the ask at turn 2
	// carries a packet and the one at turn 4 drops the first message.
	build := func(msgs []engine.Message) ([]piece, error) {
		var out []piece
		for i, m := range msgs {
			if len(msgs) == 5 && i == 0 {
				continue
			}
			if len(msgs) == 3 && i == 2 {
				m.Content = "packet " + m.Content
			}
			out = append(out, piece{m, count(m)})
		}
		return out, nil
	}
	got, err := replay(context.Background(), build, c)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(i int) float64 {
		return float64(count(engine.Message{Role: roleOf(c, i), Content: c.Turns[i].Text}))
	}
	packed := float64(count(engine.Message{Role: engine.RoleUser, Content: "packet " + c.Turns[2].Text}))
	// Turn 0: nothing before. Turn 2: [u0, a0] cached, u1 with its packet
	// is new. Turn 4: the window starts at a0, unlike [u0 ...]: nothing.
	wantWindows := tok(0) + (tok(0) + tok(1) + packed) + (tok(1) + tok(2) + tok(3) + tok(4))
	wantCached := tok(0) + tok(1)
	if got.turns != 3 || got.windows != wantWindows || got.cached != wantCached {
		t.Fatalf("replay = %+v; want 3 turns, windows %v, cached %v", got, wantWindows, wantCached)
	}
}

func roleOf(c Conversation, i int) string {
	if c.Turns[i].Speaker == c.SpeakerA {
		return engine.RoleUser
	}
	return engine.RoleAssistant
}

// TestBaselineAndCost: the bm25 reference keeps recency for half the budget
// and matches for the other half; sink reuses almost its whole window each
// turn, sliding far less; shares are fractions.
func TestBaselineAndCost(t *testing.T) {
	c := loadTiny(t)
	rows, err := Evaluate(context.Background(), []Conversation{c}, Options{
		Policies: []string{window.PolicySliding, window.PolicySink, PolicyBM25}, Budgets: []int{160}})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Row{}
	for _, r := range rows {
		by[r.Policy] = r
		if r.CachedShare < 0 || r.CachedShare > 1 || r.UncachedPerTurn < 0 || r.Recall < 0 || r.Recall > 1 {
			t.Errorf("%s: shares out of range: %+v", r.Policy, r)
		}
	}
	if !(by["sink"].CachedShare > by["sliding"].CachedShare) || by["sink"].CachedShare < 0.5 {
		t.Errorf("cached share: sink %.2f, sliding %.2f", by["sink"].CachedShare, by["sliding"].CachedShare)
	}
	if by[PolicyBM25].Recall <= by["sink"].Recall || by[PolicyBM25].PromptTokens > 160 {
		t.Errorf("bm25: recall %.2f (sink %.2f), prompt %.0f", by[PolicyBM25].Recall, by["sink"].Recall, by[PolicyBM25].PromptTokens)
	}
	msgs := messages(c, c.Questions[0].Question)
	b := bm25Window(msgs, counter(c), speakerOf(c), 160)
	recent := 0
	for _, m := range msgs[b.Start : len(msgs)-1] {
		recent += counter(c)(m)
	}
	if recent > 80 || recent+counter(c)(msgs[b.Start-1]) <= 80 {
		t.Errorf("recency keeps %d tokens from %d: want the most that fit 80", recent, b.Start)
	}
	if len(b.Packet) == 0 {
		t.Error("the bm25 packet is empty")
	}
	for _, p := range b.Packet {
		if p >= b.Start {
			t.Errorf("packet turn %d is not an evicted turn (recency starts at %d)", p, b.Start)
		}
	}
}
