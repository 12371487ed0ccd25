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
		// W̄ = (512+1024−64)/2 = 736; σ = 64·512/448; spare = 0.15·736 − 30 − σ.
		{"long turns, 1,024", 1024, 30, 34, 64.0 * 512 / 448, 110.4 - 30 - 64.0*512/448, 0, true},
		// W̄ = 11,776; σ = 20·8192/7168; spare = 1766.4 − 10 − σ; questions
		// (4096+20)/3; room (spare − questions)·3/2 − 20 = 522.
		{"short turns, 16,384", 16384, 10, 10, 20.0 * 8192 / 7168, 1766.4 - 10 - 20.0*8192/7168, 522, false},
		// σ = 64·8192/7168; questions (4096+64)/3; room 350.
		{"long turns, 16,384", 16384, 30, 34, 64.0 * 8192 / 7168, 1766.4 - 30 - 64.0*8192/7168, 350, false},
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
