package window

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/window/memory"
)

// A window that remembers its replays builds, turn after turn, what a new
// window builds from the start: through turns that add a reply and an ask,
// retries that replace the ask, an edit far back, and long messages that
// stand as excerpts; and it goes on from a mark on most turns.
func TestBuildResumesAsFromTheStart(t *testing.T) {
	for _, policy := range []string{PolicySink, PolicyMemory} {
		t.Run(policy, func(t *testing.T) {
			cfg := Config{Policy: policy, Settings: Settings{Budget: 2048}}
			w, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			owner := memory.Key{Tenant: "t"}
			msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are terse."}}
			for turn := range 400 {
				switch {
				case turn%7 == 6 && len(msgs) > 2: // a retry: the ask replaced
					msgs[len(msgs)-1] = engine.Message{Role: engine.RoleUser, Content: fmt.Sprintf("again, what was said at %d?", turn)}
				case turn%97 == 96: // an edit far back
					msgs[5] = engine.Message{Role: msgs[5].Role, Content: msgs[5].Content + " (edited)"}
				default:
					if len(msgs) > 1 {
						reply := strings.Repeat("ok ", 5+turn%13)
						if turn%31 == 0 {
							reply = strings.Repeat("a long answer ", 60) // stands as an excerpt once passed
						}
						msgs = append(msgs, engine.Message{Role: engine.RoleAssistant, Content: reply})
					}
					ask := fmt.Sprintf("turn %d: tell me about item %d", turn, turn*7%50)
					if turn%3 == 0 {
						ask = fmt.Sprintf("what is item %d?", turn%50)
					}
					msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: ask})
				}
				req := Request{Owner: owner, Messages: append([]engine.Message(nil), msgs...), Count: byLen, CountKey: "bytes"}
				got, gerr := w.Build(context.Background(), req)
				fresh, err := New(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				want, werr := fresh.Build(context.Background(), req)
				if fmt.Sprint(got.Cut, got.Messages, gerr) != fmt.Sprint(want.Cut, want.Messages, werr) {
					t.Fatalf("turn %d (%d messages): the window that remembers built\n%+v (%v)\na new one:\n%+v (%v)", turn, len(msgs), got.Cut, gerr, want.Cut, werr)
				}
			}
			if resumed := w.resumed.Load(); resumed < 250 {
				t.Errorf("went on from a mark on %d of 400 turns; want most of those past %d messages", resumed, minReplayMessages)
			}
			if w.Delete(context.Background(), owner); w.replays.count(owner) != 0 {
				t.Error("the conversation's marks outlived its delete")
			}
		})
	}
}
