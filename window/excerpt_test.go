package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"kvwin/engine"
	"kvwin/window/memory"
)

// longChat is an assistant conversation: short user turns, answers of
// answer tokens (byLen), one answer of early tokens at message 2 and a
// paste of paste tokens as user message pasteAt.
func longChat(n, answer, early, pasteAt, paste int) []engine.Message {
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are a helpful assistant."}}
	for i := 0; i < n; i++ {
		role, size := engine.RoleUser, 40
		if i%2 == 1 {
			role, size = engine.RoleAssistant, answer
		}
		switch len(msgs) {
		case 2:
			size = early
		case pasteAt:
			size = paste
		}
		body := fmt.Sprintf("%s %d says: ", role, len(msgs))
		words := strings.Repeat(fmt.Sprintf("w%d ", len(msgs)%7), size/3+1)
		msgs = append(msgs, engine.Message{Role: role, Content: (body + words)[:size]})
	}
	return msgs
}

// byQuarter counts a token per four bytes, about what a BPE vocabulary
// makes of English.
func byQuarter(m engine.Message) int { return (len(m.Content) + 3) / 4 }

// windowOf returns a Window of the default settings at budget, without a
// store.
func windowOf(t *testing.T, budget int) *Window {
	t.Helper()
	w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// replayTurns builds the window of every user turn of msgs in order and
// returns, per turn, the share of its tokens in the longest common prefix
// (whole messages) with the previous window followed by the previous
// answer, as a backend's KV cache would reuse them.
func replayTurns(t *testing.T, w *Window, policy string, msgs []engine.Message, limit int) []float64 {
	t.Helper()
	var prev []engine.Message
	prevAsk := -1
	var shares []float64
	for i, m := range msgs {
		if m.Role != engine.RoleUser {
			continue
		}
		res, err := w.Build(context.Background(), Request{Policy: policy, Messages: msgs[:i+1], Count: byLen, Limit: limit})
		if err != nil {
			t.Fatalf("%s: turn at message %d: %v", policy, i, err)
		}
		ref := prev
		if prevAsk >= 0 {
			ref = append(ref[:len(ref):len(ref)], msgs[prevAsk+1:i]...)
		}
		total, cached := 0, 0
		same := true
		for k, m := range res.Messages {
			total += byLen(m)
			if same && k < len(ref) && ref[k] == m {
				cached += byLen(m)
			} else {
				same = false
			}
		}
		shares = append(shares, float64(cached)/float64(total))
		prev, prevAsk = res.Messages, i
	}
	return shares
}

// TestNoOldMessageBlocksAConversation: an answer twice the budget early
// and a paste over the budget later are served on every later turn, as
// byte-stable excerpts, and reuse recovers within three turns of each.
// The other answers are short of a long message (longTurnTokens), so the
// two are the only excerpts.
func TestNoOldMessageBlocksAConversation(t *testing.T) {
	const budget = 3072
	msgs := longChat(120, longTurnTokens-16, 2*budget, 61, budget+200)
	for _, policy := range []string{PolicySink, PolicyMemory} {
		t.Run(policy, func(t *testing.T) {
			w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The paste is the newest message on its own turn: sent whole,
			// in the room the output reservation keeps (limit).
			shares := replayTurns(t, w, policy, msgs, budget+1024)
			// Turns are user messages: 1, 3, … ; the paste is turn 30.
			var sum float64
			n := 0
			for k, sh := range shares {
				if k >= 4 && !(k >= 30 && k < 33) { // from the third turn after each long message
					sum += sh
					n++
				}
			}
			if mean := sum / float64(n); mean < 0.85 {
				t.Fatalf("mean cached share %.3f over %d turns, want ≥ 0.85 (per turn: %.2f)", mean, n, shares)
			}
		})
	}
}

// TestExcerptsAreStableAndNamed: an excerpted message is the same bytes on
// every turn that carries it, names its handle, and fits its room.
func TestExcerptsAreStableAndNamed(t *testing.T) {
	const budget = 2048
	msgs := longChat(60, 200, 3*budget, -1, 0)
	w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	room := minExcerpt
	seen := map[int]string{}
	for i := 3; i < len(msgs); i += 2 {
		res, err := w.Build(context.Background(), Request{Policy: PolicySink, Messages: msgs[:i+1], Count: byLen})
		if err != nil {
			t.Fatalf("turn at message %d: %v", i, err)
		}
		for _, e := range res.Excerpts {
			if e.Pos == i {
				t.Fatalf("turn at message %d: the newest message is an excerpt", i)
			}
			m := excerptOf(msgs[e.Pos], e.Pos, e.Tokens, res.ExcerptRoom)
			if old, ok := seen[e.Pos]; ok && old != m.Content {
				t.Fatalf("message %d: its excerpt changed between turns", e.Pos)
			}
			seen[e.Pos] = m.Content
			if handle := memory.MakeHandle(e.Pos, msgs[e.Pos].Role, msgs[e.Pos].Content); !strings.Contains(m.Content, handle) {
				t.Fatalf("message %d: excerpt does not name its handle %s", e.Pos, handle)
			}
			if r := excerptRoom(msgs[e.Pos].Content, e.Pos, e.Tokens, room); byLen(m) > r+r/8 {
				t.Fatalf("message %d: excerpt has %d tokens, room %d", e.Pos, byLen(m), r)
			}
		}
	}
	if _, ok := seen[2]; !ok {
		t.Fatal("the answer three times the budget never stood as an excerpt")
	}
}

// TestNewestMessageFitsTheContextOrNamesItself: the newest message is
// never excerpted: within the context it is sent whole past the budget,
// past it the error names it.
func TestNewestMessageFitsTheContextOrNamesItself(t *testing.T) {
	const budget = 1000
	msgs := longChat(20, 100, 100, -1, 0)
	paste := engine.Message{Role: engine.RoleUser, Content: strings.Repeat("p", 1200)}
	with := append(append([]engine.Message(nil), msgs...), paste)
	for _, policy := range []string{PolicySink, PolicyMemory} {
		w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Build(context.Background(), Request{Policy: policy, Messages: with, Count: byLen, Limit: 1300})
		if err != nil {
			t.Fatalf("%s: a newest message within the context: %v", policy, err)
		}
		if last := res.Messages[len(res.Messages)-1]; last != paste {
			t.Fatalf("%s: the newest message was not sent whole", policy)
		}
		if res.KeptTokens > 1300 {
			t.Fatalf("%s: kept %d tokens, more than the limit 1300", policy, res.KeptTokens)
		}
		_, err = w.Build(context.Background(), Request{Policy: policy, Messages: with, Count: byLen, Limit: 1100})
		var tl *TooLongError
		var cl *engine.ContextLengthError
		if !errors.As(err, &tl) || !errors.As(err, &cl) || tl.Message != len(with)-1 {
			t.Fatalf("%s: newest past the context: %v, want a TooLongError naming message %d", policy, err, len(with)-1)
		}
		if !strings.Contains(cl.Error(), fmt.Sprintf("newest message (message %d, 1200 tokens)", len(with)-1)) {
			t.Fatalf("%s: client is told %q", policy, cl.Error())
		}
	}
}

// TestSystemMessagesAreNeverExcerpted: an agent's system prompt past the
// message share stays whole on every turn.
func TestSystemMessagesAreNeverExcerpted(t *testing.T) {
	msgs := longChat(40, 100, 100, -1, 0)
	msgs[0].Content = strings.Repeat("rule ", 100) // 500 tokens of a 1,000 budget
	w, err := New(Config{Settings: Settings{Budget: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Build(context.Background(), Request{Policy: PolicyMemory, Messages: msgs, Count: byLen})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages[0] != msgs[0] || res.Step == 0 {
		t.Fatalf("system prompt changed (step %d)", res.Step)
	}
}

func TestExcerptOfCutsOnRunes(t *testing.T) {
	m := engine.Message{Role: engine.RoleAssistant, Content: strings.Repeat("日本語のテキスト ", 400)}
	e := excerptOf(m, 7, ApproxCount(m), 200)
	if !utf8.ValidString(e.Content) || ApproxCount(e) > 200+25 || ApproxCount(e) < 100 {
		t.Fatalf("excerpt: valid %v, %d tokens for a room of 200", utf8.ValidString(e.Content), ApproxCount(e))
	}
	if e2 := excerptOf(m, 7, ApproxCount(m), 200); e2 != e {
		t.Fatal("two excerpts of one message differ")
	}
}

// TestKeptHistoryHoldsTheShortTurnsAroundLongAnswers: once a step has
// passed them, long answers stand as excerpts of minExcerpt tokens, so the
// kept history holds many exchanges' user messages whole where whole
// answers would leave room for a few.
func TestKeptHistoryHoldsTheShortTurnsAroundLongAnswers(t *testing.T) {
	const budget = 8192
	msgs := longChat(200, 4000, 4000, -1, 0) // answers of ~1,000 tokens
	w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{PolicySink, PolicyMemory} {
		res, err := w.Build(context.Background(), Request{Policy: policy, Messages: msgs, Count: byQuarter})
		if err != nil {
			t.Fatal(err)
		}
		users, whole := 0, 0
		for _, m := range res.Messages {
			if m.Role == engine.RoleUser {
				users++
			}
			if m.Role == engine.RoleAssistant && byQuarter(m) > longTurnTokens {
				whole++
			}
		}
		// Whole answers: (budget/2)/1,010 ≈ 4 exchanges after a step.
		// As excerpts: each exchange ~10 + 64 tokens, dozens of them;
		// only the answers since the latest step are whole (at most the
		// room between the water marks: 4 of them).
		if users < 30 || whole > 4 {
			t.Errorf("%s: %d user messages and %d whole long answers in the window, want ≥ 30 and ≤ 4", policy, users, whole)
		}
	}
}

// TestAStepThatOnlyExcerptsEvictsNothing: in an assistant chat a step
// turns the answers it passes into excerpts; while that alone brings the
// window to the excerpt mark, nothing is evicted and the kept history is
// not re-sent, so most steps cost only the answers they excerpt. In a chat
// of short turns every step evicts, as before.
func TestAStepThatOnlyExcerptsEvictsNothing(t *testing.T) {
	w := windowOf(t, 8192)
	mark := w.cfg.Settings.excerptMark()
	// replay counts the steps of msgs' user turns and those that evicted.
	replay := func(policy string, msgs []engine.Message, count Counter) (steps, evictions int) {
		prev := Cut{}
		for i := range msgs {
			if msgs[i].Role != engine.RoleUser {
				continue
			}
			res, err := w.Build(context.Background(), Request{Policy: policy, Messages: msgs[:i+1], Count: count})
			if err != nil {
				t.Fatal(err)
			}
			if res.Step > prev.Step {
				steps++
				if res.Start > prev.Start {
					evictions++
				} else if res.KeptTokens > mark {
					t.Fatalf("%s: message %d: a step evicted nothing and left %d tokens, past the mark %d", policy, i, res.KeptTokens, mark)
				}
			}
			prev = res.Cut
		}
		return steps, evictions
	}
	for _, policy := range []string{PolicySink, PolicyMemory} {
		// Whole, an exchange is ~1,010 tokens, as excerpts ~74: a step
		// excerpts about four exchanges (~300 tokens), so the band of
		// 2,048 tokens below the mark holds several steps per eviction.
		steps, evictions := replay(policy, longChat(400, 4000, 4000, -1, 0), byQuarter)
		if evictions == 0 || evictions*3 > steps {
			t.Errorf("%s, long answers: %d of %d steps evicted, want some and at most a third", policy, evictions, steps)
		}
		steps, evictions = replay(policy, longChat(400, 160, 160, -1, 0), byQuarter)
		if steps == 0 || evictions != steps {
			t.Errorf("%s, short turns: %d of %d steps evicted, want all", policy, evictions, steps)
		}
	}
}

// TestAStepExcerptsTheAnswerItFollows: a step excerpts every long message
// before the request's newest, the answer it happened after included (kept
// whole, that answer was re-sent whole at the step and again at the next);
// the newest message stays whole even when it is an answer (a prefill),
// and the request after it excerpts it.
func TestAStepExcerptsTheAnswerItFollows(t *testing.T) {
	w := windowOf(t, 8192)
	long := w.cfg.Settings.longMessage()
	build := func(policy string, msgs []engine.Message) Result {
		t.Helper()
		res, err := w.Build(context.Background(), Request{Policy: policy, Messages: msgs, Count: byQuarter})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	excerpted := func(res Result, pos int) bool {
		for _, e := range res.Excerpts {
			if e.Pos == pos {
				return true
			}
		}
		return false
	}
	msgs := longChat(300, 4000, 4000, -1, 0)
	for _, policy := range []string{PolicySink, PolicyMemory} {
		prev, afterAnswer := Cut{}, 0
		for i := range msgs {
			if msgs[i].Role != engine.RoleUser {
				continue
			}
			res := build(policy, msgs[:i+1])
			if excerpted(res, i) {
				t.Fatalf("%s: message %d: the newest message is an excerpt", policy, i)
			}
			if res.Step > prev.Step {
				for j := res.Start; j < i; j++ {
					if byQuarter(msgs[j]) > long && !excerpted(res, j) {
						t.Fatalf("%s: message %d: a step at %d left long message %d whole", policy, i, res.StepAt, j)
					}
				}
				if res.StepAt == i-1 {
					afterAnswer++
					// The same list ending at the answer: it is the newest, whole.
					if at := build(policy, msgs[:i]); at.Step != res.Step || at.StepAt != i-1 || excerpted(at, i-1) {
						t.Fatalf("%s: ending at the answer %d: step %d at %d, excerpted %v; want step %d there, whole", policy, i-1, at.Step, at.StepAt, excerpted(at, i-1), res.Step)
					}
				}
			}
			prev = res.Cut
		}
		if afterAnswer == 0 {
			t.Fatalf("%s: no step happened after an answer: the test tests nothing", policy)
		}
	}
}

// TestAStepKeepsTheInputItFollowsWhole: a tool's result, like a user's
// paste, is an input the answers after it work on: a step after it leaves
// it whole until the next step, which excerpts it.
func TestAStepKeepsTheInputItFollowsWhole(t *testing.T) {
	w := windowOf(t, 8192)
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are an agent."}}
	for i := 0; len(msgs) < 400; i++ {
		msgs = append(msgs,
			engine.Message{Role: engine.RoleUser, Content: fmt.Sprintf("step %d: read the next file", i)},
			engine.Message{Role: engine.RoleAssistant, Content: fmt.Sprintf(`{"tool":"read","path":"f%d.go"}`, i)},
			engine.Message{Role: engine.RoleTool, Content: strings.Repeat(fmt.Sprintf("line %d of the file ", i), 200)})
	}
	checked := 0
	for i := range msgs {
		if msgs[i].Role != engine.RoleUser || i == 0 || msgs[i-1].Role != engine.RoleTool {
			continue
		}
		res, err := w.Build(context.Background(), Request{Policy: PolicyMemory, Messages: msgs[:i+1], Count: byQuarter})
		if err != nil {
			t.Fatal(err)
		}
		if res.StepAt != i-1 {
			continue
		}
		checked++
		for _, e := range res.Excerpts {
			if e.Pos == i-1 {
				t.Fatalf("message %d: the step after the tool's result at %d excerpted it", i, i-1)
			}
		}
		next, err := w.Build(context.Background(), Request{Policy: PolicyMemory, Messages: msgs[:i+4], Count: byQuarter})
		if err != nil {
			t.Fatal(err)
		}
		if next.Step == res.Step {
			continue // no step yet: it stays whole
		}
		if !slices.ContainsFunc(next.Excerpts, func(e Excerpt) bool { return e.Pos == i-1 }) && next.Start <= i-1 {
			t.Fatalf("message %d: the next step kept the tool's result at %d whole", i+3, i-1)
		}
	}
	if checked == 0 {
		t.Fatal("no step happened after a tool's result: the test tests nothing")
	}
}
