package app_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// holdsTokens lists the snapshot files under a's data dir whose stored
// token ids contain run (as the file stores them: little-endian int32).
func holdsTokens(t *testing.T, a *app.App, run []int) []string {
	t.Helper()
	pat := make([]byte, 4*len(run))
	for i, tok := range run {
		binary.LittleEndian.PutUint32(pat[4*i:], uint32(int32(tok)))
	}
	files, err := filepath.Glob(filepath.Join(a.Config().DataDir, "snapshots", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, pat) {
			out = append(out, f)
		}
	}
	return out
}

// A named conversation deleted while its KV is still in a slot (no
// snapshot yet, nothing evicted into the memory store) is deleted (204);
// when other conversations then take the slot, no snapshot of it is
// written — no file under --data-dir holds its tokens — and its next turn
// caches nothing of it. Each case deletes at another point of the KV's
// life: in the slot, and with its snapshot's save queued.
func TestDeletedConversationLeavesNoTokensBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		// others is how many other conversations take the slot before
		// the DELETE (after it, two more do).
		others int
	}{
		{"kv in a slot", 0},
		{"snapshot saved", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.WindowBudget = 1, 2048, 1500 })
			secret := "The vault code is 8812-QUARTZ. " + apptest.Words(7, 800)
			history := apptest.Msgs("system", "You keep secrets.", "user", secret)
			conv := map[string]string{"X-Conversation-Id": "S"}
			tr := apptest.PostWith(t, a.URL(), conv, map[string]any{"messages": history, "max_tokens": 2, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("S: %d %s", tr.Status, tr.Body)
			}
			toks, err := a.Engine().Tokenize(context.Background(), secret, false)
			if err != nil || len(toks) < 100 {
				t.Fatalf("tokenize: %d tokens, %v", len(toks), err)
			}
			run := toks[len(toks)/2 : len(toks)/2+24] // the middle of the secret, as any prompt holds it

			other := func(i int) {
				t.Helper()
				msgs := apptest.Msgs("user", apptest.Words(90+i, 900))
				if tr := apptest.Post(t, a, map[string]any{"messages": msgs, "max_tokens": 2}); tr.Status != 200 {
					t.Fatalf("other %d: %d %s", i, tr.Status, tr.Body)
				}
			}
			for i := range tc.others {
				other(i)
			}
			status, _, body := send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/S", "", "", nil)
			if status != 204 {
				t.Fatalf("DELETE: %d %s, want 204 (its KV existed)", status, body)
			}
			for i := range 2 {
				other(10 + i)
			}
			a.Engine().ExpireSnapshots() // waits for every queued save
			if files := snapshotFiles(t, a, "S"); len(files) != 0 {
				t.Fatalf("snapshots owned by the deleted conversation: %v", files)
			}
			if files := holdsTokens(t, a, run); len(files) != 0 {
				t.Fatalf("files holding the deleted conversation's tokens: %v", files)
			}
			// The scan finds tokens where they are: the first other
			// conversation's snapshot holds its own.
			mine, _ := a.Engine().Tokenize(context.Background(), apptest.Words(90+10, 900), false)
			if files := holdsTokens(t, a, mine[len(mine)/2:len(mine)/2+24]); len(files) != 1 {
				t.Fatalf("the control: %d files hold the other conversation's tokens, want 1", len(files))
			}

			next := append(history, apptest.Msgs("assistant", "Noted.", "user", "What is the vault code?")...)
			tr = apptest.PostWith(t, a.URL(), conv, map[string]any{"messages": next, "max_tokens": 2, "temperature": 0})
			if tr.Status != 200 || tr.Cached >= 16 {
				t.Fatalf("S after DELETE: %d, cached %d of %d tokens: want none of it (less than a block)", tr.Status, tr.Cached, tr.Prompt)
			}
			t.Logf("after DELETE: %d snapshot files, none holding its tokens; its next turn cached %d of %d tokens", len(mustGlob(t, filepath.Join(a.Config().DataDir, "snapshots", "*.kvsnap"))), tr.Cached, tr.Prompt)
			if status, _, _ := send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/unknown", "", "", nil); status != 404 {
				t.Fatalf("DELETE of a conversation never seen: %d, want 404", status)
			}
		})
	}
}

// With models: in the configuration file, DELETE reaches the snapshots of
// a model that is not loaded: its files leave its directory (another
// conversation's stay), and its next turn, the model loaded again, caches
// nothing of it.
func TestDeleteReachesTheSnapshotsOfAModelNotLoaded(t *testing.T) {
	a := twoModels(t, func(f *app.Config) { f.Models[0].Slots = 1 })
	convs := map[string][]map[string]string{}
	for i, id := range []string{"A", "B"} {
		convs[id] = apptest.Msgs("system", apptest.Words(130+2*i, 600), "user", apptest.Words(131+2*i, 700))
	}
	turn := func(id string) apptest.Turn {
		t.Helper()
		tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": id}, map[string]any{"model": "a", "messages": convs[id], "max_tokens": 2, "temperature": 0})
		if tr.Status != 200 {
			t.Fatalf("%s: %d %s", id, tr.Status, tr.Body)
		}
		return tr
	}
	turn("A")
	turn("B") // A's snapshot
	if tr := apptest.Post(t, a, map[string]any{"model": "b", "messages": apptest.Msgs("user", "hi"), "max_tokens": 2}); tr.Status != 200 {
		t.Fatalf("model b: %d %s", tr.Status, tr.Body)
	}
	if got := loaded(t, a); len(got) != 1 || got[0] != "b" {
		t.Fatalf("loaded %v, want only b", got)
	}
	if len(snapshotFiles(t, a, "A", "a")) != 1 {
		t.Fatalf("A's snapshot before the DELETE: %v", snapshotFiles(t, a, "A", "a"))
	}
	if status, _, body := send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/A", "", "", nil); status != 204 {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	if files := snapshotFiles(t, a, "A", "a"); len(files) != 0 {
		t.Fatalf("A deleted, its snapshot of the unloaded model is on disk: %v", files)
	}
	if got := loaded(t, a); len(got) != 1 || got[0] != "b" {
		t.Fatalf("the DELETE loaded a model: %v", got)
	}
	if cold := turn("A"); cold.Cached >= 16 {
		t.Fatalf("A after DELETE: %d of %d cached, want none of it", cold.Cached, cold.Prompt)
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// --memory-ttl expiry deletes as DELETE does: a conversation that expires
// while its KV is still in a slot (never snapshotted) loses that too, so
// the conversation taking the slot next saves no snapshot of it.
func TestMemoryTTLExpiryClearsTheConversationsSlot(t *testing.T) {
	clock := &testClock{now: time.Now()}
	a := apptest.Start(t, func(f *app.Config) {
		f.Slots, f.Ctx, f.Window, f.WindowBudget, f.MemoryTTL, f.Now = 1, 2048, "memory", 1500, time.Hour, clock.Now
	})
	tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "M"}, map[string]any{"messages": secretHistory(), "max_tokens": 2, "temperature": 0})
	if tr.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, tr.Header)["evicted_turns"]) == 0 {
		t.Fatalf("M: %d, window %v: want turns evicted into the memory store", tr.Status, apptest.WindowHeader(t, tr.Header))
	}
	clock.advance(70 * time.Minute)
	x, err := a.Expire(context.Background())
	if err != nil || x.Conversations != 1 || x.ConversationSnapshots != 1 {
		t.Fatalf("sweep: %+v, %v; want M, and its slot counted", x, err)
	}
	if s := a.Engine().Slots()[0]; s.Tokens != 0 {
		t.Fatalf("M expired; its slot still holds %d tokens", s.Tokens)
	}
	if tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(5, 900)), "max_tokens": 2}); tr.Status != 200 {
		t.Fatalf("other: %d %s", tr.Status, tr.Body)
	}
	a.Engine().ExpireSnapshots()
	if files := snapshotFiles(t, a, "M"); len(files) != 0 {
		t.Fatalf("M expired, then its KV was saved: %v", files)
	}
}
