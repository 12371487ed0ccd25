package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// The long-turn conversation: a context of 2,048 tokens a slot (window
// budget 1,536 by the default output reservation; the test model has a
// token a byte), an answer of twice the budget early, a paste over the
// budget at turn pasteTurn, short turns around them.
const (
	longCtx    = 2048
	longBudget = 1536
	pasteTurn  = 14
	longTurns  = 34
)

// longUser is the user's message of turn i: the paste at pasteTurn, else a
// short statement.
func longUser(i int) string {
	if i == pasteTurn {
		return "Here is the log I mentioned:\n" + filler(900+i, longBudget+100)
	}
	return fmt.Sprintf("Turn %d. %s", i, apptest.Words(i, 15))
}

// filler is n bytes of words.
func filler(seed, n int) string {
	var b strings.Builder
	for k := 0; b.Len() < n; k++ {
		b.WriteString(apptest.Words(seed+k, 20))
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// longAnswer is the early answer of twice the budget.
func longAnswer() string {
	var b strings.Builder
	for p := 0; b.Len() < 2*longBudget; p++ {
		fmt.Fprintf(&b, "Step %d. %s\n\n", p, apptest.Words(400+p, 30))
	}
	return b.String()
}

// turnResult is what one turn of the conversation observed.
type turnResult struct {
	status         int
	prompt, cached int
	body           []byte
}

// checkLongTurns asserts the acceptance of a long-turn conversation: every
// turn 200 and, over the turns from the third after each long message on,
// a mean cached share of at least 0.85.
func checkLongTurns(t *testing.T, turns []turnResult) {
	t.Helper()
	var sum float64
	n := 0
	var shares []string
	for i, tr := range turns {
		if tr.status != http.StatusOK {
			t.Fatalf("turn %d: status %d: %s", i, tr.status, tr.body)
		}
		shares = append(shares, fmt.Sprintf("%d/%d", tr.cached, tr.prompt))
		if i >= 3 && !(i >= pasteTurn && i < pasteTurn+3) {
			sum += float64(tr.cached) / float64(tr.prompt)
			n++
		}
	}
	mean := sum / float64(n)
	t.Logf("cached/prompt per turn: %s; mean over %d turns %.3f", strings.Join(shares, " "), n, mean)
	if mean < 0.85 {
		t.Fatalf("mean cached share %.3f over the turns from the third after each long message, want ≥ 0.85", mean)
	}
}

// checkTooLong asserts a 400 context_length_exceeded naming the newest
// message.
func checkTooLong(t *testing.T, tr turnResult) {
	t.Helper()
	e := apptest.DecodeError(t, tr.body)
	if tr.status != http.StatusBadRequest || e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "newest message") {
		t.Fatalf("a newest message over the context: %d %s, want 400 context_length_exceeded naming the newest message", tr.status, tr.body)
	}
}

// chatLongTurns drives the conversation through chat completions at base,
// the client holding the history.
func chatLongTurns(t *testing.T, base string) {
	history := apptest.Msgs("system", "You are a helpful assistant.", "user", "Explain the setup, step by step.", "assistant", longAnswer())
	var turns []turnResult
	for i := 0; i < longTurns; i++ {
		history = append(history, map[string]string{"role": "user", "content": longUser(i)})
		tr := apptest.PostWith(t, base, map[string]string{"X-Conversation-Id": "long-turns"},
			map[string]any{"messages": history, "max_tokens": 4, "temperature": 0, "seed": 1})
		turns = append(turns, turnResult{tr.Status, tr.Prompt, tr.Cached, tr.Body})
		if tr.Status != http.StatusOK {
			break
		}
		var reply apptest.ChatReply
		if err := json.Unmarshal(tr.Body, &reply); err != nil || len(reply.Choices) == 0 {
			t.Fatalf("turn %d: %v %s", i, err, tr.Body)
		}
		history = append(history, map[string]string{"role": "assistant", "content": reply.Choices[0].Message.Content})
	}
	checkLongTurns(t, turns)
	over := append(history, map[string]string{"role": "user", "content": filler(7, longCtx+10)})
	tr := apptest.PostWith(t, base, map[string]string{"X-Conversation-Id": "long-turns"}, map[string]any{"messages": over, "max_tokens": 4})
	checkTooLong(t, turnResult{tr.Status, tr.Prompt, tr.Cached, tr.Body})
}

// TestLongMessagesNeverBlockAConversation: under the default window, an
// early answer of twice the window and a later paste over the budget are
// served on every later turn with the prefix cached; a newest message over
// the context is the one 400, naming it.
func TestLongMessagesNeverBlockAConversation(t *testing.T) {
	node := func(f *app.Config) { f.Slots, f.Ctx, f.Window = 1, longCtx, "memory" }
	t.Run("chat completions", func(t *testing.T) {
		a := apptest.Start(t, node)
		chatLongTurns(t, a.URL())
	})
	t.Run("through a gateway", func(t *testing.T) {
		n := apptest.Start(t, node)
		gw := apptest.Start(t, func(f *app.Config) { f.Backends, f.Window = []string{"llamaserver=" + n.URL()}, "memory" })
		chatLongTurns(t, gw.URL())
	})
	t.Run("responses chain", func(t *testing.T) {
		a := apptest.Start(t, node)
		post := func(body map[string]any) (turnResult, string) {
			b, _ := json.Marshal(body)
			resp, err := http.Post(a.URL()+"/v1/responses", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var r struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(raw, &r)
			return turnResult{resp.StatusCode, apptest.Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens")),
				apptest.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens")), raw}, r.ID
		}
		var turns []turnResult
		prev := ""
		for i := 0; i < longTurns; i++ {
			body := map[string]any{"model": "kvwin-tiny", "instructions": "You are a helpful assistant.",
				"max_output_tokens": 4, "temperature": 0, "input": longUser(i)}
			if i == 0 {
				body["input"] = []map[string]string{
					{"role": "user", "content": "Explain the setup, step by step."},
					{"role": "assistant", "content": longAnswer()},
					{"role": "user", "content": longUser(i)},
				}
			} else {
				body["previous_response_id"] = prev
			}
			tr, id := post(body)
			turns = append(turns, tr)
			if tr.status != http.StatusOK {
				break
			}
			prev = id
		}
		checkLongTurns(t, turns)
		tr, _ := post(map[string]any{"model": "kvwin-tiny", "max_output_tokens": 4, "previous_response_id": prev,
			"input": filler(7, longCtx+10)})
		checkTooLong(t, tr)
	})
}
