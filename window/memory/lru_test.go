package memory

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestStoreHoldsConversationsByBytes: the conversations' indexes held in
// memory stay within HeldBytes however many conversations are used (the
// count no longer bounds them), and a conversation dropped from memory is
// read back from the file, with the same hits, when it is next searched:
// no conversation is refused for its length.
func TestStoreHoldsConversationsByBytes(t *testing.T) {
	ctx := context.Background()
	turns := team(200)
	one := NewIndex(turns...).Bytes()
	s, err := Open(StoreConfig{Dir: t.TempDir(), HeldBytes: 2*one + one/2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	q := Query{Ask: "Where is Omar based now?", K: 4, Chain: chainOf(turns)}
	want := fmt.Sprint(hitTexts(NewIndex(turns...).Search(q)))
	for i := range 6 {
		key := Key{Tenant: "t", Conversation: fmt.Sprintf("c%d", i)}
		if _, err := s.Ingest(ctx, key, turns); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		held, n := s.convs.Bytes(), s.convs.Len()
		s.mu.Unlock()
		if held == 0 || held > s.cfg.HeldBytes || n > 2 {
			t.Fatalf("after %d conversations: %d held, %d bytes over the bound %d", i+1, n, held, s.cfg.HeldBytes)
		}
	}
	if indexes, _ := s.held(); indexes == 0 || indexes > s.cfg.HeldBytes {
		t.Errorf("held() reports %d bytes of indexes, bound %d", indexes, s.cfg.HeldBytes)
	}
	for i := range 6 { // the first ones were dropped: read back
		hits, err := s.Search(ctx, Key{Tenant: "t", Conversation: fmt.Sprintf("c%d", i)}, q)
		if err != nil || fmt.Sprint(hitTexts(hits)) != want {
			t.Fatalf("c%d: %q, %v; want %s", i, hitTexts(hits), err, want)
		}
	}
}

// TestResponseChainsHeldByBytes: the Responses chains' messages held in
// memory stay within ResponseBytes, and a chain dropped is read back.
func TestResponseChainsHeldByBytes(t *testing.T) {
	ctx := context.Background()
	msgs := []byte(`["` + strings.Repeat("x", 1000) + `"]`) // a kilobyte a response
	s, err := Open(StoreConfig{Dir: t.TempDir(), ResponseBytes: 4 * 1200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for c := range 4 {
		key := Key{Tenant: "t", Conversation: fmt.Sprintf("conv%d", c)}
		prev := ""
		for i := range 3 {
			id := fmt.Sprintf("resp_%d_%d", c, i)
			if err := s.SaveResponse(ctx, StoredResponse{ID: id, Key: key, Previous: prev, Input: []byte("[]"), Messages: msgs, Body: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			if _, chain, err := s.ResponseChain(ctx, "t", id); err != nil || len(chain) != i+1 {
				t.Fatalf("%s: chain of %d, %v", id, len(chain), err)
			}
			prev = id
		}
		s.resp.mu.Lock()
		used := s.resp.convs.Bytes()
		s.resp.mu.Unlock()
		if used > s.cfg.ResponseBytes {
			t.Fatalf("after %d chains: %d bytes held, over %d", c+1, used, s.cfg.ResponseBytes)
		}
	}
	if _, chain, err := s.ResponseChain(ctx, "t", "resp_0_2"); err != nil || len(chain) != 3 {
		t.Fatalf("the first chain, dropped: %d, %v", len(chain), err)
	}
}
