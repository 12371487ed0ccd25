package window

import (
	"math"
	"testing"

	"kvwin/engine"
)

// uniform returns n units of a user message of user tokens and a reply of
// reply tokens (under byLen), every third user message a question (none if
// statements).
func uniform(n, user, reply int, statements bool) conversation {
	var msgs []engine.Message
	var tokens []int
	for i := 0; i < n; i++ {
		ask := "u"
		if i%3 == 2 && !statements {
			ask = "u?"
		}
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: ask}, engine.Message{Role: engine.RoleAssistant, Content: "a"})
		tokens = append(tokens, user, reply)
	}
	return newConversation(conversation{}, msgs, tokens, 0, 0)
}

// asking makes every third user message of msgs a question, at the same
// length: docs/window.md's share of questions, which the allowance's
// hand-worked figures assume.
func asking(msgs []engine.Message) []engine.Message {
	users := 0
	for i, m := range msgs {
		if m.Role != engine.RoleUser {
			continue
		}
		if users++; users%3 == 0 {
			msgs[i].Content = m.Content[:len(m.Content)-1] + "?"
		}
	}
	return msgs
}

// TestAllowance checks the reuse arithmetic of docs/window.md against
// figures worked by hand: long turns at a small budget leave the questions
// their cap and nothing for a statement's packet; at a large one the
// questions' cap grows with the spare, up to B − L, and statements get
// what that leaves, never more than the statement cap.
func TestAllowance(t *testing.T) {
	tests := []struct {
		name         string
		budget       int
		low          float64
		user, reply  int
		statements   bool // no question in the history
		steps, spare float64
		holds        bool
		question     int
		statement    int
	}{
		// With 17 questions in 51 asks q = (17 + 1)/(51 + 3) = 1/3, the
		// prior's share, in the first four.
		//
		// W̄ = (512+1024−64)/2 = 736; the question zone is 256, and the
		// span min(1024−64−512, 1024−256−512 + 3·64) = 448 either way;
		// σ = 64·512/448; spare = 0.15·736 − 30 − σ = 7.3, short of
		// the questions at the cap, (256+64)/3.
		{"long turns, 1,024", 1024, 0.5, 30, 34, false, 64.0 * 512 / 448, 110.4 - 30 - 64.0*512/448, false, 256, 0},
		// W̄ = 11,776; questions step early from 4,096 tokens of free
		// room, so the span is min(7168, 16384−4096−8192 + 3·20) = 4156;
		// σ = 20·8192/4156; spare = 1766.4 − 10 − σ = 1717.0, past the
		// questions at the cap, (4096+20)/3: their cap grows to
		// 3·spare − 20 = 5130, which takes all of it.
		{"short turns, 16,384", 16384, 0.5, 10, 10, false, 20.0 * 8192 / 4156, 1766.4 - 10 - 20.0*8192/4156, true, 5130, 0},
		// span min(7168, 4096 + 3·64) = 4288; σ = 64·8192/4288; spare
		// 1614.1; the cap grows to 3·spare − 64 = 4778.
		{"long turns, 16,384", 16384, 0.5, 30, 34, false, 64.0 * 8192 / 4288, 1766.4 - 30 - 64.0*8192/4288, true, 4778, 0},
		// Low 3/4: B − L = 4096 is the cap itself, so it cannot grow.
		// W̄ = (12288+16384−1024)/2 = 13824; the zone min(4096, 2048);
		// span min(3072, 2048 + 3·20) = 2108; σ = 20·12288/2108; spare
		// 2073.6 − 10 − σ = 1947.0; questions (4096+20)/3 = 1372; a
		// statement (spare − 1372)·3/2 − 20 = 842.
		{"short turns, 16,384, low 3/4", 16384, 0.75, 10, 10, false, 20.0 * 12288 / 2108, 2073.6 - 10 - 20.0*12288/2108, true, 4096, 842},
		// No question in 51 asks: q = 1/54. The span is min(7168, 4096 +
		// 54·20) = 5176; σ = 20·8192/5176; spare = 1756.4 − σ = 1724.75.
		// The cap grows to B − L = 8192 (54·spare − 20 is far past it);
		// questions spend (8192 + 20)/54 = 152.1, and a statement may
		// take (1724.75 − 152.1)·54/53 − 20 = 1582, beyond the
		// statement cap, B/16 = 1024.
		{"short turns, 16,384, no questions", 16384, 0.5, 10, 10, true, 20.0 * 8192 / 5176, 1766.4 - 10 - 20.0*8192/5176, true, 8192, 1024},
		// At 1,024 with long turns, q = 1/54 lets the questions' cap grow:
		// the span is 448 as above and the spare 7.26, past
		// (256 + 64)/54 = 5.93; the cap grows to 54·7.26 − 64 = 327,
		// below B − L = 512, which takes all of the spare.
		{"long turns, 1,024, no questions", 1024, 0.5, 30, 34, true, 64.0 * 512 / 448, 110.4 - 30 - 64.0*512/448, true, 327, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Settings{Budget: tc.budget, Low: tc.low}.Defaults()
			a := s.allowance(uniform(51, tc.user, tc.reply, tc.statements), 0, 0)
			if a.Ask != float64(tc.user) || a.Exchange != float64(tc.user+tc.reply) {
				t.Errorf("ask %v, exchange %v: want %d, %d", a.Ask, a.Exchange, tc.user, tc.user+tc.reply)
			}
			if math.Abs(a.Steps-tc.steps) > 1e-9 || math.Abs(a.Spare-tc.spare) > 1e-9 {
				t.Errorf("steps %v, spare %v: want %v, %v", a.Steps, a.Spare, tc.steps, tc.spare)
			}
			if a.Holds != tc.holds || a.Question != tc.question {
				t.Errorf("holds %v, question cap %d: want %v, %d", a.Holds, a.Question, tc.holds, tc.question)
			}
			if a.Statement != tc.statement {
				t.Errorf("statement room %d, want %d", a.Statement, tc.statement)
			}
			if limit := s.packetCap(false); a.Statement > limit {
				t.Errorf("statement room %d over the statement cap %d", a.Statement, limit)
			}
			if a.Question > s.Budget-s.low() && a.Question > s.packetCap(true) {
				t.Errorf("question cap %d past B − L = %d", a.Question, s.Budget-s.low())
			}
		})
	}
}

// TestCutRoomFollowsAllowance: a statement's packet room is what the reuse
// allowance leaves (none for 20-token turns at 400 tokens, none where the
// questions take the spare, some at 16,384 with Low 3/4, where they cannot
// grow, and some where the history has no questions); a question's is its cap where reuse does not hold it, the grown
// cap where it does, within the free room, and then the fill may take all
// of it.
func TestCutRoomFollowsAllowance(t *testing.T) {
	for _, tc := range []struct {
		budget, n, size int
		low             float64
		statementRoom   bool
		question        int  // the question's cap
		grows           bool // past it, by the spare
		fills           bool
		statements      bool // no question in the history
	}{
		{400, 61, 20, 0.5, false, 100, false, false, false},
		{16384, 9001, 4, 0.5, false, 4096, true, true, false},
		{16384, 9001, 4, 0.75, true, 4096, false, true, false},
		// A history of statements leaves the questions' cap at B − L
		// with spare to go round: the statements get some of it.
		{16384, 9001, 4, 0.5, true, 4096, true, true, true},
	} {
		p := mustPolicy(t, PolicyMemory, Settings{Budget: tc.budget, Low: tc.low})
		msgs := chat(tc.n, tc.size)
		if !tc.statements {
			msgs = asking(msgs)
		}
		msgs[len(msgs)-1].Content = "the build went there."
		cut, err := p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if cut.Step == 0 {
			t.Fatalf("budget %d: nothing evicted; the fixture must outgrow it", tc.budget)
		}
		if got := cut.PacketRoom > 0; got != tc.statementRoom {
			t.Errorf("budget %d, low %v: statement room %d, want room %v", tc.budget, tc.low, cut.PacketRoom, tc.statementRoom)
		}
		if cut.PacketFree != cut.PacketRoom || cut.FillRoom != 0 {
			t.Errorf("budget %d: statement's best hit may take %d past its room %d, fill %d", tc.budget, cut.PacketFree, cut.PacketRoom, cut.FillRoom)
		}
		msgs[len(msgs)-1].Content = "where did the build go?"
		cut, err = p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		free := tc.budget - cut.KeptTokens
		switch {
		case tc.grows && (cut.PacketRoom <= tc.question || cut.PacketRoom > free):
			t.Errorf("budget %d: question room %d, want past the cap %d, within the free %d", tc.budget, cut.PacketRoom, tc.question, free)
		case !tc.grows && cut.PacketRoom != min(tc.question, free):
			t.Errorf("budget %d, low %v: question room %d, want min(%d, free %d)", tc.budget, tc.low, cut.PacketRoom, tc.question, free)
		}
		if got := cut.FillRoom == cut.PacketRoom; got != tc.fills || !tc.fills && cut.FillRoom != 0 {
			t.Errorf("budget %d: fill room %d of %d, want all of it %v", tc.budget, cut.FillRoom, cut.PacketRoom, tc.fills)
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
		msgs := asking(chat(n, size))
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

// TestDefaultK: the packet's turn bound follows the budget, a turn for
// every four tokens of it, so that short chat messages are bounded by the
// room and not by K.
func TestDefaultK(t *testing.T) {
	for budget, want := range map[int]int{1024: 256, 12288: 3072, 2: 1} {
		if got := (Settings{Budget: budget}).Defaults().K; got != want {
			t.Errorf("budget %d: K %d, want %d", budget, got, want)
		}
	}
	if got := (Settings{Budget: 12288, K: 10}).Defaults().K; got != 10 {
		t.Errorf("a K set: %d, want 10", got)
	}
}
