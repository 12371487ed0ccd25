package window

import (
	"context"
	"errors"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/internal/ident"
)

func TestBadInput(t *testing.T) {
	good := chat(5, 20)
	with := func(i int, m engine.Message) []engine.Message {
		out := append([]engine.Message(nil), good...)
		out[i] = m
		return out
	}
	tests := []struct {
		name     string
		msgs     []engine.Message
		policy   string
		wantIs   error
		tooLong  bool
		wantText string
	}{
		{"no messages", nil, "", ErrNoMessages, false, "no messages"},
		{"empty content", with(2, engine.Message{Role: engine.RoleUser, Content: ""}), "", ErrInvalidMessage, false, "message 2"},
		{"empty system prompt", with(0, engine.Message{Role: engine.RoleSystem, Content: " "}), "", ErrInvalidMessage, false, "message 0"},
		{"whitespace content", with(3, engine.Message{Role: engine.RoleUser, Content: " \t\n "}), "", ErrInvalidMessage, false, "whitespace"},
		{"invalid utf-8", with(1, engine.Message{Role: engine.RoleUser, Content: "ok \xff\xfe"}), "", ErrInvalidMessage, false, "UTF-8"},
		{"unknown role", with(1, engine.Message{Role: "wizard", Content: "hi"}), "", ErrInvalidMessage, false, "wizard"},
		{"unknown policy", good, "lru", ErrUnknownPolicy, false, "lru"},
	}
	for _, policy := range []string{PolicyFull, PolicySliding} { // sink and memory excerpt it: excerpt_test.go
		tests = append(tests, struct {
			name     string
			msgs     []engine.Message
			policy   string
			wantIs   error
			tooLong  bool
			wantText string
		}{"message over budget/" + policy, with(3, engine.Message{Role: engine.RoleUser, Content: strings.Repeat("y", 1001)}), policy, nil, true, "message 3 has 1001 tokens"})
	}
	w, err := New(Config{Settings: Settings{Budget: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.Build(context.Background(), Request{Policy: tc.policy, Messages: tc.msgs, Count: byLen})
			if err == nil {
				t.Fatal("Build succeeded, want an error")
			}
			if tc.wantIs != nil && (!errors.Is(err, tc.wantIs) || !errors.Is(err, engine.ErrInvalidRequest)) {
				t.Fatalf("error %v: want errors.Is %v and engine.ErrInvalidRequest", err, tc.wantIs)
			}
			if tc.tooLong {
				var tl *TooLongError
				var cl *engine.ContextLengthError
				if !errors.As(err, &tl) || !errors.As(err, &cl) || cl.Limit != 1000 || cl.PromptTokens != 1001 {
					t.Fatalf("error %v: want a TooLongError unwrapping to ContextLengthError{1001, 1000}", err)
				}
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("error %q does not say %q", err, tc.wantText)
			}
		})
	}
}

func TestFullPastBudget(t *testing.T) {
	w, err := New(Config{Policy: PolicyFull, Settings: Settings{Budget: 300}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Build(context.Background(), Request{Messages: chat(20, 20), Count: byLen})
	var cl *engine.ContextLengthError
	if !errors.As(err, &cl) || cl.PromptTokens != 420 || cl.Limit != 300 {
		t.Fatalf("full over budget: %v, want context length 420 > 300", err)
	}
	res, err := w.Build(context.Background(), Request{Messages: chat(10, 20), Count: byLen})
	if err != nil || len(res.Messages) != 11 || res.Policy != PolicyFull || res.KeptTokens != 220 || res.Evicted() != 0 || res.PacketTurns != 0 || res.Step != 0 {
		t.Fatalf("full within budget: %v, %d messages, policy %s, kept %d, evicted %d, packet turns %d, step %d",
			err, len(res.Messages), res.Policy, res.KeptTokens, res.Evicted(), res.PacketTurns, res.Step)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{Policy: "lru", Settings: Settings{Budget: 10}}, nil); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown default policy: %v", err)
	}
	if _, err := New(Config{Settings: Settings{}}, nil); !errors.Is(err, ErrSettings) {
		t.Fatalf("no budget: %v", err)
	}
}

// A model may answer nothing; the client sends the empty answer back with
// the history, and that is no error.
func TestEmptyAssistantAnswerIsAccepted(t *testing.T) {
	w, err := New(Config{Settings: Settings{Budget: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "hi"}, {Role: engine.RoleAssistant, Content: ""}, {Role: engine.RoleUser, Content: "well?"}}
	res, err := w.Build(context.Background(), Request{Messages: msgs, Count: byLen})
	if err != nil || len(res.Messages) != 3 {
		t.Fatalf("Build: %v, %d messages", err, len(res.Messages))
	}
}

// A prompt over the window budget tells the client the budget, not a
// slot's context it may not be near: context_length_exceeded names what
// was exceeded.
func TestTooLongNamesTheWindowBudget(t *testing.T) {
	var cl *engine.ContextLengthError
	err := error(&TooLongError{Policy: "full", Message: -1, Tokens: 7068, Budget: 2048})
	if !errors.As(err, &cl) || !cl.Window || cl.Limit != 2048 || cl.PromptTokens != 7068 {
		t.Fatalf("unwraps to %#v", cl)
	}
	if got, want := cl.Error(), "the window budget is 2048 tokens, but the prompt needs 7068 tokens"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// A long history a tenant sent before is not checked again where it is the
// same, and every message where it differs is: an invalid message is a 400
// whether it is new or replaces one of the history.
func TestBadInputAfterAValidHistory(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			w, err := New(Config{Settings: Settings{Budget: 100_000}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			good := chat(2*engine.MinChainMessages, 20)
			build := func(msgs []engine.Message) error {
				_, err := w.Build(context.Background(), Request{Policy: policy, Owner: ident.Owner{Tenant: "t", Conversation: "c"}, Messages: msgs, Count: byLen})
				return err
			}
			if err := build(good); err != nil {
				t.Fatal(err)
			}
			if got := w.chains.Same("t", 0, good, linkNext); got != len(good) {
				t.Fatalf("the valid history is remembered for %d of its %d messages", got, len(good))
			}
			bad := engine.Message{Role: engine.RoleUser, Content: "ok \xff\xfe"}
			for _, at := range []int{1, len(good) / 2, len(good) - 1, len(good)} {
				msgs := append([]engine.Message(nil), good...)
				if at == len(good) {
					msgs = append(msgs, bad)
				} else {
					msgs[at] = bad
				}
				if err := build(msgs); !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), "UTF-8") {
					t.Fatalf("invalid message %d after a valid history: %v, want a UTF-8 error", at, err)
				}
			}
			// Another tenant's list is checked whole.
			if got := w.chains.Same("u", 0, good, linkNext); got != 0 {
				t.Fatalf("another tenant's list is known valid for %d messages", got)
			}
		})
	}
}
