package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/internal/ident"
)

// TestChatTokensCached: a conversation's turns tokenize only their new
// messages, and the tokens are those of the whole ChatML text.
func TestChatTokensCached(t *testing.T) {
	sys := engine.Message{Role: engine.RoleSystem, Content: "You are terse."}
	u1 := engine.Message{Role: engine.RoleUser, Content: "Say hello."}
	a1 := engine.Message{Role: engine.RoleAssistant, Content: "Hello, world!"}
	u2 := engine.Message{Role: engine.RoleUser, Content: "Again, <|im_start|>louder."}
	turns := []chatTurn{
		// BOS, <|im_start|>, <|im_end|>, "\n", <|im_start|> as plain text;
		// then system, user, "assistant\n".
		{"first turn sets up and tokenizes every message", []engine.Message{sys, u1}, 5 + 3},
		{"second turn tokenizes its two new messages", []engine.Message{sys, u1, a1, u2}, 2},
		{"the same turn again tokenizes nothing", []engine.Message{sys, u1, a1, u2}, 0},
		{"a new conversation sharing the system prompt", []engine.Message{sys, u2}, 0},
		{"the ask edited: its history is the rendering cached", []engine.Message{sys, u1, a1, u1}, 0},
		{"a reply and an ask added", []engine.Message{sys, u1, a1, u1, a1, u2}, 0},
		{"a branch off the first exchange", []engine.Message{sys, u1, u2, a1}, 0},
	}
	for _, noBOS := range []bool{false, true} {
		t.Run(fmt.Sprintf("noBOS=%v", noBOS), func(t *testing.T) {
			testChatTurns(t, noBOS, turns, u2)
		})
	}
}

// chatTurn is one turn of a conversation and the /tokenize calls it costs.
type chatTurn struct {
	name      string
	msgs      []engine.Message
	tokenizes int
}

// testChatTurns sends turns, in order, to one backend.
func testChatTurns(t *testing.T, noBOS bool, turns []chatTurn, u2 engine.Message) {
	f := startFake(t, &fakeServer{noBOS: noBOS})
	b := f.backend(t, Config{})
	var last []int
	for i, turn := range turns {
		t.Run(turn.name, func(t *testing.T) {
			before := len(f.requests("/tokenize"))
			got, err := b.Prompt(context.Background(), engine.Request{Messages: turn.msgs})
			if err != nil {
				t.Fatal(err)
			}
			b.tokens.Wait() // the caches apply writes asynchronously
			b.prompts.Wait()
			if n := len(f.requests("/tokenize")) - before; n != turn.tokenizes {
				t.Errorf("%d /tokenize calls, want %d", n, turn.tokenizes)
			}
			// Message text is never parsed for control tokens: the
			// "<|im_start|>" a user typed stays text.
			text := chatML(turn.msgs...)
			want := encode(text, true, true, !noBOS)
			if slices.Contains(turn.msgs, u2) {
				want = wantWithLiteralMarker(text, !noBOS)
			}
			if !slices.Equal(got, want) {
				t.Errorf("prompt tokens\n got %v\nwant %v", got, want)
			}
			// Turn 2 extends turn 1: its prefix is turn 1 without the
			// generation prompt, so the server's cache holds it.
			if i == 1 {
				gen := len(encode("<|im_start|>assistant\n", false, true, false))
				if !slices.Equal(got[:len(last)-gen], last[:len(last)-gen]) {
					t.Errorf("turn 2 does not extend turn 1")
				}
			}
			last = got
		})
	}
}

// wantWithLiteralMarker is the ChatML tokenization of text in which the
// "<|im_start|>louder" a user wrote stays plain text.
func wantWithLiteralMarker(text string, bos bool) []int {
	const typed = "Again, <|im_start|>louder."
	before, after, _ := strings.Cut(text, typed)
	out := encode(before, true, true, bos)
	out = append(out, encode(typed, false, false, bos)...)
	return append(out, encode(after, false, true, bos)...)
}

// TestChatThroughApplyTemplate: a server whose template is not ChatML
// renders the chat itself; the text's own BOS marker is not doubled.
func TestChatThroughApplyTemplate(t *testing.T) {
	f := startFake(t, &fakeServer{props: "props_llama3.json"})
	b := f.backend(t, Config{})
	for turn := 1; turn <= 2; turn++ {
		got, err := b.Prompt(context.Background(), engine.Request{Messages: chatMsgs})
		if err != nil {
			t.Fatal(err)
		}
		text := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nSay hello.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
		if want := encode(text, false, true, true); !slices.Equal(got, want) {
			t.Errorf("turn %d: tokens\n got %v\nwant %v", turn, got, want)
		}
		if got[0] != 1 || got[1] == 1 {
			t.Errorf("turn %d: the prompt starts %v, want one BOS", turn, got[:2])
		}
	}
	applied := f.requests("/apply-template")
	if len(applied) != 2 {
		t.Fatalf("%d /apply-template calls, want one per turn", len(applied))
	}
	var body struct {
		Messages []engine.Message `json:"messages"`
	}
	if err := json.Unmarshal([]byte(applied[0]), &body); err != nil || !slices.Equal(body.Messages, chatMsgs) {
		t.Errorf("/apply-template body %s, want the messages", applied[0])
	}
	// The BOS probe and the pieces probe once, then one /tokenize of the
	// whole rendered text per turn: this fake sends no pieces, so no
	// offset is known and nothing is cut (rendered.go).
	if n := len(f.requests("/tokenize")); n != 2+2 {
		t.Errorf("%d /tokenize calls, want 4", n)
	}
}

// CountMessage counts a message's share of the prompt exactly, through the
// same per-message cache as rendering.
func TestCountMessage(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	sys := engine.Message{Role: engine.RoleSystem, Content: "You are terse."}
	u := engine.Message{Role: engine.RoleUser, Content: "Say hello, twice."}
	withBoth, err := b.Prompt(context.Background(), engine.Request{Messages: []engine.Message{sys, u}})
	if err != nil {
		t.Fatal(err)
	}
	withSys, err := b.Prompt(context.Background(), engine.Request{Messages: []engine.Message{sys}})
	if err != nil {
		t.Fatal(err)
	}
	b.tokens.Wait()
	before := len(f.requests("/tokenize"))
	if got, want := b.CountMessage(u), len(withBoth)-len(withSys); got != want {
		t.Fatalf("CountMessage = %d, want the %d tokens the message adds to a prompt", got, want)
	}
	if n := len(f.requests("/tokenize")) - before; n != 0 {
		t.Fatalf("%d /tokenize calls for a message already tokenized", n)
	}
	// A message never seen is tokenized once, and counted the same.
	fresh := engine.Message{Role: engine.RoleUser, Content: "A question never asked."}
	n := b.CountMessage(fresh)
	if got := len(f.requests("/tokenize")) - before; got != 1 {
		t.Fatalf("%d /tokenize calls for a new message, want 1", got)
	}
	withFresh, err := b.Prompt(context.Background(), engine.Request{Messages: []engine.Message{sys, fresh}})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(withFresh) - len(withSys); n != want {
		t.Fatalf("CountMessage of a new message = %d, want the %d tokens it adds to a prompt", n, want)
	}
}

// The per-message token cache is per tenant: a message one tenant's turn
// tokenized is tokenized again for another (a /tokenize call, so how soon
// it is counted says nothing of what others sent), and counted the same;
// the tenant's own render then reads its counts' tokens.
func TestCountMessagesPerTenant(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	sys := engine.Message{Role: engine.RoleSystem, Content: "You are terse."}
	u := engine.Message{Role: engine.RoleUser, Content: "A secret only alice sent."}
	calls := func() int { b.tokens.Wait(); return len(f.requests("/tokenize")) }
	if _, err := b.Prompt(context.Background(), engine.Request{Messages: []engine.Message{sys}, Owner: ident.Owner{Tenant: "alice"}}); err != nil {
		t.Fatal(err)
	}
	before := calls()
	alice := b.CountMessages("alice", []engine.Message{sys, u})
	if n := calls() - before; n != 1 {
		t.Fatalf("alice: %d /tokenize calls, want 1 (the new message)", n)
	}
	before = calls()
	if again := b.CountMessages("alice", []engine.Message{sys, u}); !slices.Equal(again, alice) || calls() != before {
		t.Fatalf("alice again: %v with %d calls, want %v from the cache", again, calls()-before, alice)
	}
	bob := b.CountMessages("bob", []engine.Message{sys, u})
	if n := calls() - before; n != 2 || !slices.Equal(bob, alice) {
		t.Fatalf("bob: %v with %d /tokenize calls, want %v with 2: nothing of alice's cached", bob, n, alice)
	}
	before = calls()
	if _, err := b.Prompt(context.Background(), engine.Request{Messages: []engine.Message{sys, u}, Owner: ident.Owner{Tenant: "bob"}}); err != nil {
		t.Fatal(err)
	}
	if n := calls() - before; n != 1 { // the generation prompt "assistant\n" only
		t.Fatalf("bob's render: %d /tokenize calls, want 1", n)
	}
}

// A conversation's cached rendering is its tenant's: the same conversation
// from another tenant is tokenized again, message by message, and renders
// the same tokens.
func TestChatRenderingPerTenant(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	conv := []engine.Message{
		{Role: engine.RoleSystem, Content: "You are terse."},
		{Role: engine.RoleUser, Content: "Say hello."},
		{Role: engine.RoleAssistant, Content: "Hello!"},
		{Role: engine.RoleUser, Content: "Again."},
	}
	turn := func(tenant string) ([]int, int) {
		before := len(f.requests("/tokenize"))
		got, err := b.Prompt(context.Background(), engine.Request{Messages: conv, Owner: ident.Owner{Tenant: tenant}})
		if err != nil {
			t.Fatal(err)
		}
		b.tokens.Wait()
		b.prompts.Wait()
		return got, len(f.requests("/tokenize")) - before
	}
	turn("setup") // reads /props and the markers
	alice, n := turn("alice")
	if n != len(conv)+1 {
		t.Fatalf("alice: %d /tokenize calls, want %d (each message and the generation prompt)", n, len(conv)+1)
	}
	hits, _ := b.prompts.Stats()
	if again, n := turn("alice"); n != 0 || !slices.Equal(again, alice) {
		t.Fatalf("alice again: %d calls, same tokens %v; want 0 calls, the same tokens", n, slices.Equal(again, alice))
	}
	if after, _ := b.prompts.Stats(); after != hits+1 {
		t.Fatalf("alice again: %d prompt cache hits, want 1 (her rendering)", after-hits)
	}
	if bob, n := turn("bob"); n != len(conv)+1 || !slices.Equal(bob, alice) {
		t.Fatalf("bob: %d calls, same tokens %v; want %d calls, the same tokens", n, slices.Equal(bob, alice), len(conv)+1)
	}
}

// A window counts a conversation's messages every turn: the counts of what
// a tenant's earlier turn counted come back as they were, the new messages
// are counted, an edit far back is counted anew, and a count the server
// could not give (an estimate from the bytes) is never kept for a later
// turn, which counts that message again.
func TestCountMessagesGoesOnFromTheLastTurn(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	each := func(msgs []engine.Message) []int {
		out := make([]int, len(msgs))
		for i, m := range msgs {
			out[i] = b.CountMessages("other", []engine.Message{m})[0] // another tenant's cache: counted alone
		}
		return out
	}
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are terse."}}
	for turn := range 30 {
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: fmt.Sprintf("Question %d: %s", turn, strings.Repeat("why ", turn))},
			engine.Message{Role: engine.RoleAssistant, Content: fmt.Sprintf("Answer %d.", turn)})
		if turn == 20 { // an edit far back
			msgs[3].Content = "An edited question."
		}
		b.tokens.Wait()
		hits, misses := b.tokens.Stats()
		got := b.CountMessages("alice", msgs)
		b.prompts.Wait() // what it kept is read by the next turn
		// The per-message cache is asked of the new messages only (the
		// first turn, before the server's template is known, keeps
		// nothing; the edit's turn asks of the edited one and those after).
		if h, m := b.tokens.Stats(); turn > 1 && turn != 20 && h+m-hits-misses > 4 {
			t.Fatalf("turn %d: %d lookups of single messages, want those of the 2 new ones (4: counted, then tokenized)", turn, h+m-hits-misses)
		}
		if want := each(msgs); !slices.Equal(got, want) {
			t.Fatalf("turn %d: counts %v, want %v", turn, got, want)
		}
	}
	// The server cannot tokenize: the new message is estimated, and the
	// estimate is not kept.
	f.tokenizeDown.Store(true)
	msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "A question while the server loads its model."})
	down := b.CountMessages("alice", msgs)
	b.prompts.Wait()
	f.tokenizeDown.Store(false)
	if est := engine.EstimateTokens(len(msgs[len(msgs)-1].Role)+len(msgs[len(msgs)-1].Content)) + engine.MessageOverhead; down[len(down)-1] != est {
		t.Fatalf("while /tokenize failed: %d for the new message, want the estimate %d", down[len(down)-1], est)
	}
	b.prompts.Wait()
	up := b.CountMessages("alice", msgs)
	if want := each(msgs); !slices.Equal(up, want) {
		t.Fatalf("once /tokenize answers: counts %v, want %v (the estimate kept?)", up, want)
	}
}
