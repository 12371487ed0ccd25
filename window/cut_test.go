package window

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"kvwin/engine"
)

// byLen counts one token per byte, so tests can size messages exactly.
func byLen(m engine.Message) int { return len(m.Content) }

// chat returns a system prompt and n messages alternating user/assistant,
// each of the given size in bytes (and so tokens under byLen).
func chat(n, size int) []engine.Message {
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: strings.Repeat("s", size)}}
	for i := 0; i < n; i++ {
		role := engine.RoleUser
		if i%2 == 1 {
			role = engine.RoleAssistant
		}
		body := fmt.Sprintf("%s%d ", role, i)
		msgs = append(msgs, engine.Message{Role: role, Content: body + strings.Repeat("x", max(size-len(body), 1))})
	}
	return msgs
}

func mustPolicy(t *testing.T, name string, s Settings) Policy {
	t.Helper()
	p, err := NewPolicy(name, s)
	if err != nil {
		t.Fatalf("NewPolicy(%s): %v", name, err)
	}
	return p
}

func TestCutShapes(t *testing.T) {
	s := Settings{Budget: 400, Block: 16, Low: 0.5, Packets: PacketsLedger}
	tests := []struct {
		name       string
		policy     string
		msgs       []engine.Message
		wantSinks  int
		wantStart  int
		wantStep   int
		wantPad    int
		wantAsks   int
		wantKeptLE int
	}{
		// 1 system + 9 messages of 20 tokens = 200: fits, nothing evicted.
		{"sink fits", PolicySink, chat(9, 20), 3, 3, 0, 0, 0, 400},
		{"memory fits", PolicyMemory, chat(9, 20), 3, 3, 0, 0, 0, 400},
		{"full fits", PolicyFull, chat(9, 20), 0, 0, 0, 0, 0, 400},
		// 1 system + 39 messages of 20 = 800 tokens against 400.
		{"sink steps", PolicySink, chat(39, 20), 3, 27, 2, 4, 0, 400},
		// One step per user message once past the budget: a unit is two messages.
		{"sliding slides", PolicySliding, chat(39, 20), 1, 21, 10, 0, 0, 400},
		// Whole up to 400; then steps at messages 20, 27 and 34 (P = 25 per ask):
		// after the step at 34, 64 + (35-c)·20 ≤ 200 gives c = 29, and the
		// asks since are 35, 37 and 39.
		{"memory steps", PolicyMemory, chat(39, 20), 3, 29, 3, 4, 3, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cut, err := mustPolicy(t, tc.policy, s).Cut(tc.msgs, byLen)
			if err != nil {
				t.Fatal(err)
			}
			if cut.Sinks != tc.wantSinks || cut.Start != tc.wantStart || cut.Step != tc.wantStep || cut.SinkPad != tc.wantPad || len(cut.Asks) != tc.wantAsks {
				t.Errorf("cut = sinks %d start %d step %d pad %d asks %v; want sinks %d start %d step %d pad %d asks %d",
					cut.Sinks, cut.Start, cut.Step, cut.SinkPad, cut.Asks, tc.wantSinks, tc.wantStart, tc.wantStep, tc.wantPad, tc.wantAsks)
			}
			if cut.KeptTokens > tc.wantKeptLE {
				t.Errorf("kept %d tokens, budget %d", cut.KeptTokens, tc.wantKeptLE)
			}
			if cut.Start < len(tc.msgs)-1 && cut.Start > cut.Sinks && tc.msgs[cut.Start].Role != engine.RoleUser {
				t.Errorf("kept history starts with %s, want a user message", tc.msgs[cut.Start].Role)
			}
		})
	}
}

// TestSinkPrefixStable replays a conversation message by message: between
// steps the kept messages must only grow at the end, steps must be rare, and
// the step count must equal the number of times the kept start moved.
func TestSinkPrefixStable(t *testing.T) {
	msgs := chat(400, 24)
	for _, policy := range []string{PolicySink, PolicyMemory} {
		t.Run(policy, func(t *testing.T) {
			p := mustPolicy(t, policy, Settings{Budget: 1024})
			prev := Cut{StepAt: -1}
			lastStepAt, moves := -1, 0
			for n := 2; n <= len(msgs); n++ {
				cut, err := p.Cut(msgs[:n], byLen)
				if err != nil {
					t.Fatalf("%d messages: %v", n, err)
				}
				if cut.Evicted() != prev.Evicted() {
					moves++
					if cut.Step != prev.Step+1 {
						t.Fatalf("%d messages: start moved %d→%d but step %d→%d", n, prev.Start, cut.Start, prev.Step, cut.Step)
					}
					if policy == PolicySink && lastStepAt >= 0 && n-1-lastStepAt < 10 {
						t.Fatalf("%d messages: steps %d messages apart, want at least 10", n, n-1-lastStepAt)
					}
					lastStepAt = n - 1
				} else if cut.Step != prev.Step && policy == PolicySink {
					t.Fatalf("%d messages: step %d→%d without eviction", n, prev.Step, cut.Step)
				}
				if cut.KeptTokens+len(cut.Asks)*cut.PacketRoom > 1024 {
					t.Fatalf("%d messages: window %d tokens over budget", n, cut.KeptTokens)
				}
				prev = cut
			}
			if moves < 3 {
				t.Fatalf("only %d steps over %d messages; the test should outgrow the budget several times", moves, len(msgs))
			}
		})
	}
}

// TestSlidingBreaksEveryTurn documents the baseline: past the budget nearly
// every message is a step.
func TestSlidingBreaksEveryTurn(t *testing.T) {
	msgs := chat(200, 24)
	cut, err := mustPolicy(t, PolicySliding, Settings{Budget: 1024}).Cut(msgs, byLen)
	if err != nil {
		t.Fatal(err)
	}
	if over := len(msgs) - 1024/24; cut.Step < over/2 {
		t.Fatalf("sliding took %d steps over ~%d messages past the budget, want about one per user message", cut.Step, over)
	}
}

func TestSinksTooLargeFallBackToSystem(t *testing.T) {
	msgs := chat(30, 20)
	msgs[1].Content = strings.Repeat("big ", 60) // first user message: 240 tokens
	// MessageShare 1: no excerpt makes the first message short enough.
	cut, err := mustPolicy(t, PolicySink, Settings{Budget: 400, MessageShare: 1}).Cut(msgs, byLen)
	if err != nil {
		t.Fatal(err)
	}
	if cut.Sinks != 1 {
		t.Fatalf("sinks = %d, want only the system prompt when the first exchange passes SinkShare", cut.Sinks)
	}
}

func TestCutIsPure(t *testing.T) {
	msgs := chat(300, 30)
	for _, policy := range Policies()[1:] {
		a, errA := mustPolicy(t, policy, Settings{Budget: 2000}).Cut(msgs, byLen)
		b, errB := mustPolicy(t, policy, Settings{Budget: 2000}).Cut(append([]engine.Message(nil), msgs...), byLen)
		if errA != nil || errB != nil || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("%s: two cuts of one conversation differ: %+v / %+v (%v, %v)", policy, a, b, errA, errB)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		ok   bool
	}{
		{"defaults", Settings{Budget: 100}, true},
		{"no budget", Settings{}, false},
		{"low above high", Settings{Budget: 100, High: 0.5, Low: 0.6}, false},
		{"switch past budget", Settings{Budget: 100, Switch: 200}, false},
		{"packet share past low", Settings{Budget: 100, PacketShare: 0.6}, false},
		{"negative k", Settings{Budget: 100, K: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Defaults().Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrSettings) {
				t.Fatalf("error %v does not wrap ErrSettings", err)
			}
		})
	}
}

// TestCutPacketOnAsk: with packets on the ask, only the latest user message
// carries one, the replay reserves P for it, and its room is what the
// budget has left, up to the cap.
func TestCutPacketOnAsk(t *testing.T) {
	s := Settings{Budget: 400, Block: 16, Low: 0.5, PacketShare: 1.0 / 16, PacketCap: 0.25}
	p := mustPolicy(t, PolicyMemory, s)
	for n := 21; n <= 61; n += 2 { // each ends with a user message
		msgs := chat(n, 20)
		msgs[len(msgs)-1].Content += "?" // a question: the larger cap
		cut, err := p.Cut(msgs, byLen)
		if err != nil {
			t.Fatal(err)
		}
		if cut.Step == 0 {
			continue // whole: no packet
		}
		if len(cut.Asks) != 1 || cut.Asks[0] != len(msgs)-1 {
			t.Fatalf("%d messages: asks %v, want only the last", len(msgs), cut.Asks)
		}
		if want := min(100, 400-cut.KeptTokens); cut.PacketRoom != want {
			t.Fatalf("%d messages: room %d, want min(cap 100, 400 - kept %d) = %d", len(msgs), cut.PacketRoom, cut.KeptTokens, want)
		}
		if cut.KeptTokens+25 > 400 {
			t.Fatalf("%d messages: kept %d leaves less than P = 25", len(msgs), cut.KeptTokens)
		}
	}
}

// TestCutPacketSizedByAsk: the same words asked as a question may take the
// question cap; said as a statement, the packet, best hit included, stays
// within what the reuse allowance leaves it (none here: 20-token turns at
// 400 tokens leave nothing past the questions' share).
func TestCutPacketSizedByAsk(t *testing.T) {
	s := Settings{Budget: 400, Block: 16, Low: 0.5, PacketShare: 1.0 / 16, PacketCap: 0.25, StatementCap: 1.0 / 16}
	p := mustPolicy(t, PolicyMemory, s)
	words := "the build of user0 went there"
	checked := 0
	for n := 21; n <= 61; n += 2 {
		msgs := chat(n, 20)
		for _, tc := range []struct {
			ask      string
			question bool
		}{
			{words + ".", false},
			{words + "?", true},
			{"Where did the build go", true}, // an interrogative first word, no mark
			{"The build went where it went", false},
		} {
			msgs[len(msgs)-1].Content = tc.ask
			cut, err := p.Cut(msgs, byLen)
			if err != nil {
				t.Fatal(err)
			}
			free := 400 - cut.KeptTokens
			if cut.Step == 0 || free <= 100 {
				continue // whole, or too little room to tell the caps apart
			}
			checked++
			capTokens := 0
			if tc.question {
				capTokens = 100
			}
			if cut.PacketRoom != capTokens {
				t.Errorf("%d messages, %q: room %d, want the cap %d", n, tc.ask, cut.PacketRoom, capTokens)
			}
			wantFree := free
			if !tc.question {
				wantFree = capTokens
			}
			if cut.PacketFree != wantFree {
				t.Errorf("%d messages, %q: best-hit room %d, want %d", n, tc.ask, cut.PacketFree, wantFree)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no window left more room than the question cap; the fixture must")
	}
}

func TestIsQuestion(t *testing.T) {
	for ask, want := range map[string]bool{
		"What's Omar's new city":        true,
		"did you see it":                true,
		"  HOW so":                      true,
		"Tell me about Omar？":           true,
		"Omar moved to Quito.":          false,
		"I wonder what happened":        false,
		"Whatever, let's move on.":      false,
		"":                              false,
		"Is":                            true,
		"Hey — where is the report now": false,
		"Tell me about the flute.":      true,
		"remind me what Omar said":      true,
		"Telling stories is fun.":       false,
		// An ask past a passage brings its material: a statement.
		"Why does this fail?\n```go\n" + strings.Repeat("x := f(x)\n", 50) + "```": false,
		"Why does this fail? " + strings.Repeat("y", longAsk-20):                   true,
	} {
		if got := isQuestion(ask); got != want {
			t.Errorf("isQuestion(%q) = %v, want %v", ask, got, want)
		}
	}
}

// TestReplayJumpsCutAsReadingEveryMessage: over conversations of every
// shape the cut rule meets (short and long turns, pastes, questions,
// system messages mid-conversation) and the water marks, budgets and
// packet settings, the replay that jumps from step to step cuts as the
// one that reads each message.
func TestReplayJumpsCutAsReadingEveryMessage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 49))
	roles := []string{engine.RoleUser, engine.RoleAssistant}
	for k := 0; k < 300; k++ {
		msgs := []engine.Message{{Role: engine.RoleSystem, Content: strings.Repeat("s", rng.IntN(400))}}
		for i := 0; i < 20+rng.IntN(600); i++ {
			role := roles[i%2]
			if rng.IntN(40) == 0 {
				role = engine.RoleSystem
			}
			size := 1 + rng.IntN(60)
			if rng.IntN(8) == 0 {
				size = 200 + rng.IntN(3000) // a long answer or a paste
			}
			text := strings.Repeat("x", size)
			if role == engine.RoleUser && rng.IntN(3) == 0 {
				text = "what " + text + "?"
			}
			msgs = append(msgs, engine.Message{Role: role, Content: text})
		}
		if msgs[len(msgs)-1].Role != engine.RoleUser {
			msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "and now?"})
		}
		s := Settings{Budget: 256 + rng.IntN(16384)}
		if rng.IntN(2) == 0 {
			s.High, s.Low = 0.7+0.3*rng.Float64(), 0.2+0.4*rng.Float64()
			s.Low = min(s.Low, s.High-0.05)
		}
		if rng.IntN(3) == 0 {
			s.Switch = rng.IntN(s.Budget)
		}
		if rng.IntN(4) == 0 {
			s.Packets = PacketsLedger
		}
		for _, policy := range []string{PolicySink, PolicyMemory} {
			if !sameAsLinear(t, policy, s, msgs) {
				t.Fatalf("conversation %d under %s was not compared: the test proves nothing", k, policy)
			}
		}
	}
}
