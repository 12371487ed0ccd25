package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/window/memory/pgtest"
)

// respond posts a Responses request through a and returns its status, the
// response's id and its input tokens.
func respond(t *testing.T, a *app.App, body map[string]any) (status int, id string, input int, raw string) {
	t.Helper()
	body["max_output_tokens"] = 2
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	status, _, raw = send(t, "POST", a.URL()+"/v1/responses", "application/json", string(b), nil)
	var r struct {
		ID    string `json:"id"`
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal([]byte(raw), &r)
	return status, r.ID, r.Usage.InputTokens, raw
}

// TestSharedResponseDeleteAcrossReplicas: two servers on one PostgreSQL.
// A chain made through A, its first response deleted through B, is a 404
// through A at once, though A held the chain in memory; so is a chain
// whose conversation B deleted. A chain nothing was deleted from goes on.
func TestSharedResponseDeleteAcrossReplicas(t *testing.T) {
	dsn := pgtest.Schema(t)
	mutate := func(f *app.Config) { f.MemoryStore = dsn }
	a, b := apptest.Start(t, mutate), apptest.Start(t, mutate)
	chain := func(name string) (r1, r2 string) {
		t.Helper()
		st, r1, _, raw := respond(t, a, map[string]any{"input": "The vault code is 4417. " + name, "prompt_cache_key": name})
		if st != 200 {
			t.Fatalf("r1 through a: %d %s", st, raw)
		}
		st, r2, _, raw = respond(t, a, map[string]any{"input": "Noted?", "previous_response_id": r1})
		if st != 200 {
			t.Fatalf("r2 through a: %d %s", st, raw)
		}
		if st, _, _, raw = respond(t, a, map[string]any{"input": "Again?", "previous_response_id": r2}); st != 200 {
			t.Fatalf("continuing r2 through a before any delete: %d %s", st, raw)
		}
		return r1, r2
	}
	cases := []struct {
		name   string
		delete func(name, r1, r2 string) string // through b; the path deleted
		want   int                              // continuing r2 through a afterwards
	}{
		{"its first response", func(_, r1, _ string) string { return "/v1/responses/" + r1 }, 404},
		{"the response continued", func(_, _, r2 string) string { return "/v1/responses/" + r2 }, 404},
		{"its conversation", func(name, _, _ string) string { return "/kvwin/v1/conversations/" + name }, 404},
		{"another chain's response", func(string, string, string) string {
			other, _ := chain("other")
			return "/v1/responses/" + other
		}, 200},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("vault-%d", i)
			r1, r2 := chain(name)
			path := c.delete(name, r1, r2)
			if st, _, raw := send(t, "DELETE", b.URL()+path, "", "", nil); st != 200 && st != 204 {
				t.Fatalf("DELETE %s through b: %d %s", path, st, raw)
			}
			st, _, _, raw := respond(t, a, map[string]any{"input": "And now?", "previous_response_id": r2})
			if st != c.want {
				t.Fatalf("continuing r2 through a after the delete: %d %s, want %d", st, raw, c.want)
			}
		})
	}
}

// appHangGuard bounds each request while the database is paused: minutes,
// a guard against a hang, never the property tested (the order of events:
// every request is answered while the database is still paused).
const appHangGuard = 3 * time.Minute

// whilePaused runs f, failing t if it has not returned after appHangGuard.
func whilePaused(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(appHangGuard):
		t.Fatalf("%s still waiting on the paused database after %v", what, appHangGuard)
	}
}

// TestSharedMemoryStoreHung: a server whose PostgreSQL stops answering
// (every process stopped, connections open) answers every request while
// the database is still stopped: a named chat 200, served without memory
// and counted; a previous_response_id continuation 503; /health
// "degraded" and kvwin_memory_store_up 0 once a statement went unanswered
// for --memory-store-timeout. When the database runs again /health says ok
// and a continuation is served, without a restart.
func TestSharedMemoryStoreHung(t *testing.T) {
	srv := pgtest.Start(t)
	a := apptest.Start(t, func(f *app.Config) {
		f.Window, f.WindowBudget, f.MemoryStore, f.MemoryStoreTimeout = "memory", 1024, srv.DSN, time.Second
	})
	ask, health := notesConversation(t, a)
	i := 0
	for ; i < 12; i++ {
		ask(i)
	}
	st, r1, _, raw := respond(t, a, map[string]any{"input": "The vault code is 4417."})
	if st != 200 {
		t.Fatalf("r1: %d %s", st, raw)
	}
	if !strings.Contains(health(), `"status":"ok"`) || metricValue(t, a, "kvwin_memory_store_up") != 1 {
		t.Fatalf("before the pause: /health %s", health())
	}
	failures := metricValue(t, a, "kvwin_memory_store_errors_total")

	srv.Pause()
	whilePaused(t, "a named chat", func() { ask(i) })
	i++
	whilePaused(t, "/health", func() {
		if body := health(); !strings.Contains(body, `"status":"degraded"`) {
			t.Errorf("/health after a statement went unanswered: %s", body)
		}
	})
	if v := metricValue(t, a, "kvwin_memory_store_up"); v != 0 {
		t.Fatalf("kvwin_memory_store_up %v with the database paused", v)
	}
	if v := metricValue(t, a, "kvwin_memory_store_errors_total"); v <= failures {
		t.Fatalf("kvwin_memory_store_errors_total %v after a chat served without memory, was %v", v, failures)
	}
	whilePaused(t, "a continuation", func() {
		st, _, _, raw := respond(t, a, map[string]any{"input": "What was it?", "previous_response_id": r1})
		if st != 503 || apptest.DecodeError(t, []byte(raw)).Error.Code != "memory_store_unavailable" {
			t.Errorf("a continuation with the database paused: %d %s, want 503 memory_store_unavailable", st, raw)
		}
	})
	whilePaused(t, "a second named chat", func() { ask(i) })
	i++
	if t.Failed() {
		t.FailNow()
	}

	srv.Resume()
	deadline := time.Now().Add(appHangGuard)
	for !strings.Contains(health(), `"status":"ok"`) {
		if time.Now().After(deadline) {
			t.Fatalf("/health still %s %v after the database resumed", health(), appHangGuard)
		}
		time.Sleep(20 * time.Millisecond) // the store tries the database every second
	}
	if v := metricValue(t, a, "kvwin_memory_store_up"); v != 1 {
		t.Fatalf("kvwin_memory_store_up %v after the database resumed", v)
	}
	if st, _, _, raw := respond(t, a, map[string]any{"input": "What was it?", "previous_response_id": r1}); st != 200 {
		t.Fatalf("a continuation after the database resumed: %d %s", st, raw)
	}
	ask(i)
}
