package ttft

import (
	"context"
	"os"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// TestMain removes the test model the servers of this binary shared.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// The Responses API replay against a real kvwin: each request carries only
// its ask, and the chat replay with the chain's replies prefills the same
// prompts, so the two are measured on one conversation.
func TestResponsesReplayIsTheChatReplaysConversation(t *testing.T) {
	cfg := DefaultGeneratorConfig()
	cfg.Turns = 24
	conv, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(api func(r Runner) ([]TurnResult, error)) []TurnResult {
		a := apptest.Start(t, func(f *app.Config) { f.Slots, f.WindowBudget = 1, 512 })
		turns, err := api(Runner{BaseURL: a.URL(), Policy: Memory, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		return turns
	}
	var replies []string
	held := run(func(r Runner) ([]TurnResult, error) {
		turns, rs, err := r.RunResponses(context.Background(), conv)
		replies = rs
		return turns, err
	})
	sent := run(func(r Runner) ([]TurnResult, error) { return r.Run(context.Background(), conv.WithReplies(replies)) })
	if len(held) != cfg.Turns || len(sent) != cfg.Turns {
		t.Fatalf("%d and %d turns, want %d", len(held), len(sent), cfg.Turns)
	}
	steps := 0
	for i := range held {
		h, c := held[i], sent[i]
		if h.PromptTokens != c.PromptTokens || h.Step != c.Step {
			t.Fatalf("turn %d: responses prompt %d step %d, chat prompt %d step %d: not the same conversation", h.Turn, h.PromptTokens, h.Step, c.PromptTokens, c.Step)
		}
		// The Responses request is the instructions and one ask; chat's
		// carries every earlier turn too.
		if ask := len(conv.System) + len(conv.Turns[i].User); h.RequestBytes > ask+256 {
			t.Fatalf("turn %d: a responses request of %d bytes for an ask and instructions of %d", h.Turn, h.RequestBytes, ask)
		}
		if i > 0 && c.RequestBytes <= sent[i-1].RequestBytes {
			t.Fatalf("turn %d: chat request %d bytes, not more than the turn before's %d", c.Turn, c.RequestBytes, sent[i-1].RequestBytes)
		}
		steps = h.Step
	}
	if steps == 0 {
		t.Fatal("no eviction step: the conversation did not outgrow the window")
	}
}
