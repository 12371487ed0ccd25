package app_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// testClock is the clock of --memory-ttl in these tests, moved by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// snapshotFiles lists the snapshot files under a's data dir owned by
// conversation (any tenant), read from each file's owner field; with
// model, those of that model of the configuration file.
func snapshotFiles(t *testing.T, a *app.App, conversation string, model ...string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(append(append([]string{a.Config().DataDir, "snapshots"}, model...), "*.kvsnap")...))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// magic, fingerprint, tokens, state, compressed, checksum | owner length u32 | tenant NUL conversation
		const ownerAt = 8 + 8 + 4 + 8 + 8 + 8
		if len(b) < ownerAt+4 {
			t.Fatalf("%s: %d bytes", f, len(b))
		}
		n := int(binary.LittleEndian.Uint32(b[ownerAt:]))
		_, conv, _ := strings.Cut(string(b[ownerAt+4:ownerAt+4+n]), "\x00")
		if conv == conversation {
			out = append(out, f)
		}
	}
	return out
}

// TestMemoryTTLExpiresIdleSnapshots: with --memory-ttl 1h, a conversation
// whose snapshot was last used 70 minutes ago loses it (the file leaves
// --data-dir, and its next turn is a cold prefill), while one saved 30
// minutes ago is still restored. The window keeps no turns (full), so the
// snapshots' own last-use rule is what expires them.
func TestMemoryTTLExpiresIdleSnapshots(t *testing.T) {
	clock := &testClock{now: time.Now()}
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.MemoryTTL, f.Now = 1, 2048, time.Hour, clock.Now })
	convs := map[string][]map[string]string{}
	for i, id := range []string{"A", "B", "C"} {
		convs[id] = apptest.Msgs("system", apptest.Words(90+2*i, 600), "user", apptest.Words(91+2*i, 700))
	}
	turn := func(id string) apptest.Turn {
		t.Helper()
		tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": id}, map[string]any{"messages": convs[id], "max_tokens": 2, "temperature": 0})
		if tr.Status != 200 {
			t.Fatalf("%s: %d %s", id, tr.Status, tr.Body)
		}
		return tr
	}
	sweep := func() app.Expiry {
		t.Helper()
		x, err := a.Expire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	turn("A")
	turn("B") // A leaves the only slot for a snapshot, saved now
	if x := sweep(); x != (app.Expiry{}) || len(snapshotFiles(t, a, "A")) != 1 {
		t.Fatalf("a fresh snapshot: sweep %+v, A's files %v", x, snapshotFiles(t, a, "A"))
	}
	clock.advance(40 * time.Minute)
	turn("C") // B leaves the slot: its snapshot is saved 40 minutes after A's
	clock.advance(30 * time.Minute)
	x := sweep()
	if x.IdleSnapshots != 1 || x.Conversations != 0 {
		t.Fatalf("sweep at 70 minutes: %+v, want A's snapshot alone", x)
	}
	if files := snapshotFiles(t, a, "A"); len(files) != 0 {
		t.Fatalf("A's snapshot idle past the TTL is still on disk: %v", files)
	}
	if files := snapshotFiles(t, a, "B"); len(files) != 1 {
		t.Fatalf("B's snapshot, 30 minutes old, is not on disk: %v", files)
	}
	// What any new conversation gets from the slot: the chat template's
	// first tokens, shared with whatever the slot holds (D displaces C and
	// is never seen again).
	convs["D"] = apptest.Msgs("system", apptest.Words(97, 600), "user", apptest.Words(98, 700))
	fresh := turn("D")
	cold := turn("A")
	if cold.Cached > fresh.Cached || fresh.Cached >= 16 || cold.Prompt < 256 {
		t.Fatalf("A after its snapshot expired: %d of %d prompt tokens cached (a new conversation: %d), want a cold prefill", cold.Cached, cold.Prompt, fresh.Cached)
	}
	warm := turn("B")
	if warm.Cached < warm.Prompt*9/10 {
		t.Fatalf("B, used 30 minutes ago: %d of %d cached, want it restored", warm.Cached, warm.Prompt)
	}
	t.Logf("A (expired): %d of %d cached, as a new conversation (%d); B (kept): %d of %d cached", cold.Cached, cold.Prompt, fresh.Cached, warm.Cached, warm.Prompt)
}

// TestMemoryTTLExpiresAConversationsSnapshots: when the memory store
// expires a named conversation (its turns unused for the TTL), its KV
// snapshots go too, as on DELETE, even one saved more recently than the
// TTL: nothing of the conversation is left in --data-dir.
func TestMemoryTTLExpiresAConversationsSnapshots(t *testing.T) {
	clock := &testClock{now: time.Now()}
	a := apptest.Start(t, func(f *app.Config) {
		f.Slots, f.Ctx, f.Window, f.WindowBudget, f.MemoryTTL, f.Now = 1, 2048, "memory", 1500, time.Hour, clock.Now
	})
	tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "M"}, map[string]any{"messages": secretHistory(), "max_tokens": 2, "temperature": 0})
	if tr.Status != 200 || apptest.Atoi(apptest.WindowHeader(t, tr.Header)["evicted_turns"]) == 0 {
		t.Fatalf("M: %d, window %v: want turns evicted into the memory store", tr.Status, apptest.WindowHeader(t, tr.Header))
	}
	clock.advance(40 * time.Minute)
	// Another conversation (unnamed: nothing in the memory store) takes the
	// slot; M's KV is saved now, 40 minutes after M's turns were stored.
	// A third one displaces the second, whose snapshot (unnamed, saved at
	// 40 minutes too) is the control: it must survive M's expiry.
	for i := range 2 {
		other := apptest.Msgs("system", apptest.Words(95+2*i, 600), "user", apptest.Words(96+2*i, 700))
		if tr := apptest.Post(t, a, map[string]any{"messages": other, "max_tokens": 2}); tr.Status != 200 {
			t.Fatalf("other %d: %d %s", i, tr.Status, tr.Body)
		}
	}
	if x, err := a.Expire(context.Background()); err != nil || x != (app.Expiry{}) || len(snapshotFiles(t, a, "M")) == 0 {
		t.Fatalf("at 40 minutes: sweep %+v, %v; M's files %v", x, err, snapshotFiles(t, a, "M"))
	}
	clock.advance(30 * time.Minute) // M's turns: 70 minutes idle; its snapshot: 30
	x, err := a.Expire(context.Background())
	if err != nil || x.Conversations != 1 || x.ConversationSnapshots < 1 || x.IdleSnapshots != 0 {
		t.Fatalf("sweep at 70 minutes: %+v, %v; want M and its snapshots, no idle one", x, err)
	}
	if files := snapshotFiles(t, a, "M"); len(files) != 0 {
		t.Fatalf("M expired but its snapshots are on disk: %v", files)
	}
	if files := snapshotFiles(t, a, ""); len(files) != 1 {
		t.Fatalf("the other conversation's snapshot (30 minutes old) is not kept: %v", files)
	}
	status, _, _ := send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/M", "", "", nil)
	if status != 404 {
		t.Fatalf("DELETE of the expired conversation: %d, want 404 (nothing left)", status)
	}
	t.Logf("sweep: %+v", x)
}

// TestMemoryTTLExpiresSnapshotsOfAModelNotLoaded: with models in the
// configuration file, a model unloaded (another took its place) has no
// store sweeping its snapshots; the catalog sweeps its directory by the
// files' last uses, so its expired snapshot is gone when it loads again
// (a cold prefill) while a recent one is restored.
func TestMemoryTTLExpiresSnapshotsOfAModelNotLoaded(t *testing.T) {
	clock := &testClock{now: time.Now()}
	a := twoModels(t, func(f *app.Config) {
		f.Models[0].Slots = 1
		f.MemoryTTL, f.Now = time.Hour, clock.Now
	})
	convs := map[string][]map[string]string{}
	for i, id := range []string{"A", "B", "C"} {
		convs[id] = apptest.Msgs("system", apptest.Words(110+2*i, 600), "user", apptest.Words(111+2*i, 700))
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
	turn("B") // A's snapshot, saved now
	clock.advance(40 * time.Minute)
	turn("C") // B's, 40 minutes later
	if tr := apptest.Post(t, a, map[string]any{"model": "b", "messages": apptest.Msgs("user", "hi"), "max_tokens": 2}); tr.Status != 200 {
		t.Fatalf("model b: %d %s", tr.Status, tr.Body)
	}
	if got := loaded(t, a); len(got) != 1 || got[0] != "b" {
		t.Fatalf("loaded %v, want only b", got)
	}
	if len(snapshotFiles(t, a, "A", "a")) != 1 || len(snapshotFiles(t, a, "B", "a")) != 1 {
		t.Fatalf("model a's snapshots before the sweep: A %v, B %v", snapshotFiles(t, a, "A", "a"), snapshotFiles(t, a, "B", "a"))
	}
	clock.advance(30 * time.Minute)
	x, err := a.Expire(context.Background())
	if err != nil || x.IdleSnapshots != 1 {
		t.Fatalf("sweep at 70 minutes: %+v, %v; want A's snapshot alone", x, err)
	}
	if files := snapshotFiles(t, a, "A", "a"); len(files) != 0 {
		t.Fatalf("A's snapshot idle past the TTL is still on disk: %v", files)
	}
	warm := turn("B") // model a loads again, indexing what is left
	cold := turn("A")
	if warm.Cached < warm.Prompt*9/10 || cold.Cached >= 16 {
		t.Fatalf("after the sweep: B %d of %d cached (want restored), A %d of %d (want cold)", warm.Cached, warm.Prompt, cold.Cached, cold.Prompt)
	}
	t.Logf("A (expired): %d of %d cached; B (kept): %d of %d cached", cold.Cached, cold.Prompt, warm.Cached, warm.Prompt)
}
