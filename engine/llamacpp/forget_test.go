package llamacpp

import (
	"context"
	"path/filepath"
	"testing"

	"kvwin/engine"
	"kvwin/kvcache"
)

// A conversation forgotten while its slot generates for it: the slot is
// counted (there was something to delete), the generation finishes, and
// then the slot holds nothing of it — the next conversation taking the
// slot saves no snapshot of it, and its own next turn reuses nothing. An
// idle slot of it is cleared at once.
func TestForgetClearsTheConversationsSlots(t *testing.T) {
	dir := t.TempDir()
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048, SnapshotDir: dir})
	secret := []engine.Message{{Role: "user", Content: text(21, 1200)}}
	run := func(conv string, msgs []engine.Message, max int, onToken func()) engine.Result {
		t.Helper()
		req := greedy(max)
		req.Messages, req.Tenant, req.Conversation, req.IgnoreEOS = msgs, "t", conv, true
		res, err := e.Generate(context.Background(), req, func(engine.Event) error {
			if onToken != nil {
				onToken()
				onToken = nil
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, busy := range []bool{true, false} {
		var forgot int
		forget := func() {
			n, err := e.ForgetConversation(context.Background(), "t", "S")
			if err != nil {
				t.Fatal(err)
			}
			forgot = n
		}
		if busy {
			run("S", secret, 64, forget) // forgotten at its first token
		} else {
			run("S", secret, 4, nil)
			forget()
		}
		if forgot != 1 {
			t.Fatalf("busy=%v: forgot %d, want its slot", busy, forgot)
		}
		if s := e.Slots()[0]; s.Tokens != 0 {
			t.Fatalf("busy=%v: the slot holds %d tokens after the forget", busy, s.Tokens)
		}
		run("other", []engine.Message{{Role: "user", Content: text(22, 1200)}}, 2, nil)
		e.kv.store.Flush()
		files, _ := filepath.Glob(filepath.Join(dir, "*.kvsnap"))
		for _, f := range files {
			if id := filepath.Base(f); e.kv.store.Has(id[:len(id)-len(".kvsnap")]) {
				l, err := e.kv.store.Load(id[:len(id)-len(".kvsnap")])
				if err == nil && l.Owner == (kvcache.Owner{Tenant: "t", Conversation: "S"}) {
					t.Fatalf("busy=%v: a snapshot of the forgotten conversation: %s", busy, f)
				}
			}
		}
		if res := run("S", secret, 2, nil); res.Timings.CachedTokens >= 16 {
			t.Fatalf("busy=%v: the forgotten conversation's next turn reused %d tokens", busy, res.Timings.CachedTokens)
		}
		e.ForgetConversation(context.Background(), "t", "S")
		e.ForgetConversation(context.Background(), "t", "other")
	}
	if n, _ := e.ForgetConversation(context.Background(), "t", "never"); n != 0 {
		t.Fatalf("forgetting a conversation never seen: %d", n)
	}
}
