package window

import (
	"math"
	"testing"

	"kvwin/engine"
)

// uniform returns n units of a user message of user tokens and a reply of
// reply tokens (under byLen).
func uniform(n, user, reply int) conversation {
	var msgs []engine.Message
	var tokens []int
	for i := 0; i < n; i++ {
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "u"}, engine.Message{Role: engine.RoleAssistant, Content: "a"})
		tokens = append(tokens, user, reply)
	}
	return newConversation(msgs, tokens)
}

// TestAllowance checks the reuse arithmetic of the package doc against
// figures worked by hand: long turns at a small budget leave nothing for a
// statement's packet, short or long turns at a large one leave some, never
// more than the statement cap.
func TestAllowance(t *testing.T) {
	tests := []struct {
		name               string
		budget             int
		user, reply        int
		steps, spare       float64
		statement          int
		wantNoStatementPkt bool
	}{
		// W̄ = (512+1024−64)/2 = 736; the question zone is 256, and the
		// span min(1024−64−512, 1024−256−512 + 3·64) = 448 either way;
		// σ = 64·512/448; spare = 0.15·736 − 30 − σ.
		{"long turns, 1,024", 1024, 30, 34, 64.0 * 512 / 448, 110.4 - 30 - 64.0*512/448, 0, true},
		// W̄ = 11,776; questions step early from 4,096 tokens of free
		// room, so the span is min(7168, 16384−4096−8192 + 3·20) = 4156;
		// σ = 20·8192/4156; spare = 1766.4 − 10 − σ; questions
		// (4096+20)/3; room (spare − questions)·3/2 − 20 = 497.
		{"short turns, 16,384", 16384, 10, 10, 20.0 * 8192 / 4156, 1766.4 - 10 - 20.0*8192/4156, 497, false},
		// span min(7168, 4096 + 3·64) = 4288; σ = 64·8192/4288; questions
		// (4096+64)/3; room 277.
		{"long turns, 16,384", 16384, 30, 34, 64.0 * 8192 / 4288, 1766.4 - 30 - 64.0*8192/4288, 277, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Settings{Budget: tc.budget}.Defaults()
			a := s.allowance(uniform(50, tc.user, tc.reply), 0, 0)
			if a.Ask != float64(tc.user) || a.Exchange != float64(tc.user+tc.reply) {
				t.Errorf("ask %v, exchange %v: want %d, %d", a.Ask, a.Exchange, tc.user, tc.user+tc.reply)
			}
			if math.Abs(a.Steps-tc.steps) > 1e-9 || math.Abs(a.Spare-tc.spare) > 1e-9 {
				t.Errorf("steps %v, spare %v: want %v, %v", a.Steps, a.Spare, tc.steps, tc.spare)
			}
			if a.Statement != tc.statement {
				t.Errorf("statement room %d, want %d", a.Statement, tc.statement)
			}
			if limit := s.packetCap(false); a.Statement > limit {
				t.Errorf("statement room %d over the statement cap %d", a.Statement, limit)
			}
		})
	}
}

// TestCutStatementRoomFollowsAllowance: a statement's packet room is what
// the reuse allowance leaves (none for 20-token turns at 400 tokens, some
// for 4-token turns at 16,384); a question's keeps the question cap.
func TestCutStatementRoomFollowsAllowance(t *testing.T) {
	for _, tc := range []struct {
		budget, n, size int
		wantRoom        bool
	}{
		{400, 61, 20, false},
		{16384, 9001, 4, true},
	} {
		p := mustPolicy(t, PolicyMemory, Settings{Budget: tc.budget})
		msgs := chat(tc.n, tc.size)
		msgs[len(msgs)-1].Content = "the build went there."
		cut, err := p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if cut.Step == 0 {
			t.Fatalf("budget %d: nothing evicted; the fixture must outgrow it", tc.budget)
		}
		if got := cut.PacketRoom > 0; got != tc.wantRoom {
			t.Errorf("budget %d, %d-token turns: statement room %d, want room %v", tc.budget, tc.size, cut.PacketRoom, tc.wantRoom)
		}
		if cut.PacketFree != cut.PacketRoom {
			t.Errorf("budget %d: statement's best hit may take %d past its room %d", tc.budget, cut.PacketFree, cut.PacketRoom)
		}
		msgs[len(msgs)-1].Content = "where did the build go?"
		cut, err = p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(tc.budget/4, tc.budget-cut.KeptTokens); cut.PacketRoom != want {
			t.Errorf("budget %d: question room %d, want min(cap, free) = %d", tc.budget, cut.PacketRoom, want)
		}
	}
}

// TestQuestionStepsWhereItsRoomIsShort: a question that finds less free
// room than the question zone steps the window early, so its packet has
// the question cap; a statement in its place does not, and the turns
// after the question keep the step (the cut is a function of the messages).
func TestQuestionStepsWhereItsRoomIsShort(t *testing.T) {
	const budget, size = 1024, 20
	p := mustPolicy(t, PolicyMemory, Settings{Budget: budget})
	zone := Settings{Budget: budget}.Defaults().questionZone()
	found := false
	for n := 61; n < 400 && !found; n += 2 {
		msgs := chat(n, size)
		msgs[n].Content = "the build went east now" // as long as the question below
		stmt, err := p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if stmt.Step == 0 || stmt.StepAt == n || budget-stmt.KeptTokens >= zone {
			continue // not a turn where the window is short of the zone
		}
		found = true
		msgs[n].Content = "where did the build go?"
		q, err := p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if q.Step != stmt.Step+1 || q.StepAt != n {
			t.Fatalf("%d messages: question cut steps %d at %d, want %d at %d", n+1, q.Step, q.StepAt, stmt.Step+1, n)
		}
		if q.KeptTokens > budget/2 || q.PacketRoom != budget/4 {
			t.Errorf("question cut keeps %d tokens, room %d: want at most %d kept and the cap %d", q.KeptTokens, q.PacketRoom, budget/2, budget/4)
		}
		next := append(msgs, engine.Message{Role: engine.RoleAssistant, Content: "assistant reply here"},
			engine.Message{Role: engine.RoleUser, Content: "ok, thanks for that."})
		after, err := p.Cut(next, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if after.Start != q.Start || after.Step != q.Step {
			t.Errorf("the turn after: start %d, step %d; want the question's %d, %d", after.Start, after.Step, q.Start, q.Step)
		}
	}
	if !found {
		t.Fatal("no conversation length left a statement short of the zone")
	}
}
