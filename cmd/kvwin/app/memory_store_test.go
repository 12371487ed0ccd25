package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/window/memory/pgtest"
)

// TestSharedMemoryStoreDown: a server whose PostgreSQL memory store goes
// away keeps answering chats (degraded: the packet comes from the request's
// own turns, the turns it could not store are counted), /health says 200
// "degraded", DELETE of a conversation answers 503 without naming the
// database; when the database is back the server stores again, without a
// restart.
func TestSharedMemoryStoreDown(t *testing.T) {
	dsn, proxied, p := pgtest.ProxiedSchema(t)
	a := apptest.Start(t, func(f *app.Config) { f.Window, f.WindowBudget, f.MemoryStore = "memory", 1024, proxied })
	ask, health := notesConversation(t, a)
	i := 0
	for ; i < 12; i++ {
		ask(i)
	}
	stored := countTurns(t, dsn)
	if stored == 0 {
		t.Fatal("nothing stored before the outage")
	}
	p.Down()
	// Turns until one evicts what is not stored yet (eviction goes in steps).
	for evicted := 0; evicted <= stored; i++ {
		if i > 60 {
			t.Fatal("no turn during the outage evicted a new turn")
		}
		evicted = apptest.Atoi(apptest.WindowHeader(t, ask(i).Header)["evicted_turns"])
	}
	if body := health(); !strings.Contains(body, `"status":"degraded"`) {
		t.Fatalf("/health with the database down: %s", body)
	}
	if v := metricValue(t, a, "kvwin_memory_store_up"); v != 0 {
		t.Fatalf("kvwin_memory_store_up %v with the database down", v)
	}
	if v := metricValue(t, a, "kvwin_memory_store_unstored_turns_total"); v <= 0 {
		t.Fatalf("kvwin_memory_store_unstored_turns_total %v after a turn not stored", v)
	}
	status, _, body := send(t, "DELETE", a.URL()+"/kvwin/v1/conversations/notes", "", "", nil)
	if status != 503 || apptest.DecodeError(t, []byte(body)).Error.Code != "memory_store_unavailable" {
		t.Fatalf("DELETE with the database down: %d %s, want 503", status, body)
	}
	if strings.Contains(body, p.Addr()) || strings.Contains(body, "postgres") {
		t.Fatalf("the 503 names the database: %s", body)
	}
	ask(i) // still served
	i++
	if got := countTurns(t, dsn); got != stored {
		t.Fatalf("%d rows after the outage's turns, want %d: something was half-written", got, stored)
	}
	p.Up()
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(health(), `"status":"ok"`) {
		if time.Now().After(deadline) {
			t.Fatalf("/health still %s 30s after the database came back", health())
		}
		time.Sleep(20 * time.Millisecond) // the store retries every second
	}
	tr := ask(i)
	if got, want := countTurns(t, dsn), apptest.Atoi(apptest.WindowHeader(t, tr.Header)["evicted_turns"]); got != want {
		t.Fatalf("%d rows after the database came back, want %d (every evicted turn, those of the outage too)", got, want)
	}
}

func countTurns(t *testing.T, dsn string) int {
	t.Helper()
	var n int
	if err := pgtest.Open(t, dsn).QueryRow(`SELECT count(*) FROM turns`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// notesConversation returns ask, which sends turn i of a named conversation
// of notes ("notes") to a and fails the test unless it is a 200, and
// health, which returns a's /health body.
func notesConversation(t *testing.T, a *app.App) (ask func(i int) apptest.Turn, health func() string) {
	history := apptest.Msgs("system", "You keep notes.", "user", "Hello.", "assistant", "Hi.")
	ask = func(i int) apptest.Turn {
		t.Helper()
		history = append(history, apptest.Msgs("user", fmt.Sprintf("Note %d: locker of Member%d is %d. %s", i, i, 100+i, apptest.Words(i, 60)))...)
		tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "notes"}, map[string]any{"messages": history, "max_tokens": 2})
		history = append(history, apptest.Msgs("assistant", "Noted.")...)
		if tr.Status != 200 {
			t.Fatalf("turn %d: %d %s", i, tr.Status, tr.Body)
		}
		return tr
	}
	health = func() string {
		_, _, body := send(t, "GET", a.URL()+"/health", "", "", nil)
		return body
	}
	return ask, health
}
