package openai

import (
	"reflect"
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
	got, err := c.decode("alice", "resp_1", first)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	got[0].Content = "changed by the turn" // the caller owns its copy
	garbage := [][]byte{[]byte("not json")}
	if again, err := c.decode("alice", "resp_1", garbage); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("read again: %+v, %v; want the memo's %+v", again, err, want)
	}
	added := []engine.Message{{Role: "user", Content: "more"}, {Role: "assistant", Content: "sure"}}
	c.saved("alice", "resp_2", 1, want, added)
	if next, err := c.decode("alice", "resp_2", [][]byte{garbage[0], garbage[0]}); err != nil || !reflect.DeepEqual(next, append(want[:2:2], added...)) {
		t.Fatalf("continued chain: %+v, %v", next, err)
	}
	if _, err := c.decode("bob", "resp_1", garbage); err == nil {
		t.Fatal("another tenant's read of the same id was served from alice's memo")
	}
	if _, err := c.decode("alice", "resp_1", [][]byte{garbage[0], garbage[0]}); err == nil {
		t.Fatal("a chain of another length was served from the memo")
	}
}
