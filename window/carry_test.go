package window

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"kvwin/engine"
)

// TestSystemMessagesAStepPassesStay: a developer (system) message in the
// middle of a conversation, as Codex sends when its policy changes, stays
// in the window whole once the step that evicts its exchange has passed,
// right after the sinks; the window's prefix still only changes at steps;
// and past SinkShare·B the oldest carried message is evicted like any
// other.
func TestSystemMessagesAStepPassesStay(t *testing.T) {
	const budget = 2048
	msgs := longChat(80, 120, 120, -1, 0)
	policyAt := []int{9, 21} // after an answer: the start of a new exchange
	for k, at := range policyAt {
		m := engine.Message{Role: engine.RoleSystem, Content: fmt.Sprintf("Policy %d: approvals are now on-request; the sandbox is workspace-write.", k)}
		msgs = slices.Insert(msgs, at, m)
	}
	for _, policy := range []string{PolicySink, PolicyMemory} {
		t.Run(policy, func(t *testing.T) {
			w, err := New(Config{Settings: Settings{Budget: budget}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := w.Build(context.Background(), Request{Policy: policy, Messages: msgs, Count: byLen})
			if err != nil {
				t.Fatal(err)
			}
			if res.Start <= policyAt[1] {
				t.Fatalf("the window still holds message %d (start %d): the test needs it evicted", policyAt[1], res.Start)
			}
			if !slices.Equal(res.Carried, policyAt) {
				t.Fatalf("carried %v, want %v", res.Carried, policyAt)
			}
			for k, at := range policyAt {
				if got := res.Messages[res.Sinks+k]; got != msgs[at] {
					t.Fatalf("message %d after the sinks is %q, want the policy at %d", k, got.Content, at)
				}
			}
			if res.KeptTokens > budget {
				t.Fatalf("kept %d tokens in a budget of %d", res.KeptTokens, budget)
			}
			shares := replayTurns(t, w, policy, msgs, 0)
			var sum float64
			for _, sh := range shares[4:] {
				sum += sh
			}
			if mean := sum / float64(len(shares)-4); mean < 0.85 {
				t.Fatalf("mean cached share %.3f, want ≥ 0.85 (per turn %.2f)", mean, shares)
			}

			// The pinned parts take at most SinkShare·B (default 1/2) with
			// the sinks: an older policy of B/2 does not fit beside the
			// newest, which stays.
			big := slices.Clone(msgs)
			big[policyAt[0]].Content = fmt.Sprintf("%-*s", budget/2, "Policy 0, with its long list of rules.")
			res, err = w.Build(context.Background(), Request{Policy: policy, Messages: big, Count: byLen})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Carried, policyAt[1:]) {
				t.Fatalf("carried %v past the room, want only the newest %v", res.Carried, policyAt[1:])
			}
		})
	}
}
