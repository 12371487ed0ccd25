package openai

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"kvwin/engine"
)

// TestChainMemoDecodesAChainOnce: a chain read again, or continued by the
// response a turn saved, is served from the memo without decoding (the
// docs given are not JSON, so a decode would fail); another tenant's read
// of the same id, or a chain of another length, decodes.
func TestChainMemoDecodesAChainOnce(t *testing.T) {
	c := newChainMemo()
	first := [][]byte{[]byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`)}
	h, err := c.decode("alice", "resp_1", first)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}
	if got := h.messages(); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	garbage := [][]byte{[]byte("not json")}
	again, err := c.decode("alice", "resp_1", garbage)
	if err != nil || !reflect.DeepEqual(again.messages(), want) {
		t.Fatalf("read again: %+v, %v; want the memo's %+v", again.messages(), err, want)
	}
	added := []engine.Message{{Role: "user", Content: "more"}, {Role: "assistant", Content: "sure"}}
	c.saved("alice", "resp_2", again, added)
	if next, err := c.decode("alice", "resp_2", [][]byte{garbage[0], garbage[0]}); err != nil || !reflect.DeepEqual(next.messages(), append(want[:2:2], added...)) {
		t.Fatalf("continued chain: %+v, %v", next.messages(), err)
	}
	if _, err := c.decode("bob", "resp_1", garbage); err == nil {
		t.Fatal("another tenant's read of the same id was served from alice's memo")
	}
	if _, err := c.decode("alice", "resp_1", [][]byte{garbage[0], garbage[0]}); err == nil {
		t.Fatal("a chain of another length was served from the memo")
	}
}

// TestChainMemoExtendsAChainInPlace: a chain continued one response a turn
// keeps its messages in one array (the turn copies no history), and a
// history continued twice (a retry, a branch) gets a copy for its second
// continuation: every history reads as it was saved, whatever was saved
// after it, and a holder appending to the messages it read reaches no
// one's history.
func TestChainMemoExtendsAChainInPlace(t *testing.T) {
	c := newChainMemo()
	msg := func(s string) engine.Message { return engine.Message{Role: "user", Content: s} }
	var h chainHistory // a chain's first turn continues nothing
	wants := map[string][]engine.Message{}
	var want []engine.Message
	for i, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		added := []engine.Message{msg(id + " asks"), msg(id + " answers")}
		c.saved("alice", id, h, added)
		want = append(want[:len(want):len(want)], added...)
		wants[id] = want
		held := h.messages()
		var err error
		if h, err = c.decode("alice", id, make([][]byte, i+1)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		_ = append(held, msg("the holder's own")) // after its continuation was saved
	}
	r1, _ := c.decode("alice", "r1", make([][]byte, 1))
	if &r1.messages()[0] != &h.messages()[0] {
		t.Error("the chain r1 … r5 was copied as it grew: its histories share no array")
	}
	// A retry of r3: another response continuing r3, beside r4.
	r3, _ := c.decode("alice", "r3", make([][]byte, 3))
	c.saved("alice", "r4b", r3, []engine.Message{msg("r4b asks"), msg("r4b answers")})
	wants["r4b"] = append(wants["r3"][:6:6], msg("r4b asks"), msg("r4b answers"))
	r4b, _ := c.decode("alice", "r4b", make([][]byte, 4))
	c.saved("alice", "r5b", r4b, []engine.Message{msg("r5b")})
	wants["r5b"] = append(wants["r4b"][:8:8], msg("r5b"))
	docs := map[string]int{"r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5, "r4b": 4, "r5b": 5}
	for id, n := range docs {
		got, err := c.decode("alice", id, make([][]byte, n))
		if err != nil || !reflect.DeepEqual(got.messages(), wants[id]) {
			t.Errorf("%s reads %v, %v; want %v", id, got.messages(), err, wants[id])
		}
	}
}

// TestChainMemoConcurrentContinuations: turns continuing the same chain at
// once (retries, branches), each reading the history and saving its own
// response, leave every response's history as it saved it, under the race
// detector.
func TestChainMemoConcurrentContinuations(t *testing.T) {
	c := newChainMemo()
	msg := func(s string) engine.Message { return engine.Message{Role: "user", Content: s} }
	c.saved("alice", "r0", chainHistory{}, []engine.Message{msg("r0")})
	const branches, depth = 8, 50
	var wg sync.WaitGroup
	for b := range branches {
		wg.Go(func() {
			prev, want := "r0", []engine.Message{msg("r0")}
			for d := 1; d <= depth; d++ {
				h, err := c.decode("alice", prev, make([][]byte, d))
				if err != nil {
					t.Errorf("branch %d: %s: %v", b, prev, err)
					return
				}
				if got := h.messages(); !reflect.DeepEqual(got, want) {
					t.Errorf("branch %d reads %s as %v, want %v", b, prev, got, want)
					return
				}
				id := fmt.Sprintf("b%d.%d", b, d)
				c.saved("alice", id, h, []engine.Message{msg(id)})
				prev, want = id, append(want[:len(want):len(want)], msg(id))
			}
		})
	}
	wg.Wait()
}
