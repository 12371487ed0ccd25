package app_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// A gateway started while its only backend is unreachable cannot know the
// backend's context; once the backend joins with 2,048 tokens a slot, the
// window is cut for that context (budget 1,536), not for an assumed 4,096:
// a conversation of about 2,500 tokens is windowed and served, where a
// window of 3,072 would have sent it whole to a slot that cannot hold it.
func TestBackendUnreachableAtStartGivesTheWindowItsContextWhenItJoins(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: the backend is down at the gateway's start
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends, f.Window = []string{"llamaserver=http://" + addr}, "sink"
	})
	joined := gw.Router().Changed()
	apptest.Start(t, func(f *app.Config) { f.Addr, f.Slots, f.Ctx = addr, 1, 2048 })
	// Joined means its context is read and it is healthy: until then the
	// router counts tokens by estimate (no backend to tokenize with).
	for deadline := time.After(3 * time.Minute); fleetCtx(gw) != 2048 || gw.Router().Ready() != nil; {
		select {
		case <-joined:
			joined = gw.Router().Changed()
		case <-deadline:
			t.Fatalf("the backend did not join: the router reports %d tokens a slot", fleetCtx(gw))
		}
	}
	history := apptest.Msgs("system", "You keep notes.", "user", "Hello.", "assistant", "Hi.")
	for i := range 20 {
		history = append(history, apptest.Msgs("user", fmt.Sprintf("Note %d: %s", i, apptest.Words(i, 420)), "assistant", "ok")...)
	}
	history = append(history, apptest.Msgs("user", "What was note 3?")...)
	tr := apptest.PostWith(t, gw.URL(), nil, map[string]any{"messages": history, "max_tokens": 2})
	w := apptest.WindowHeader(t, tr.Header)
	if tr.Status != 200 || apptest.Atoi(w["evicted_turns"]) == 0 || apptest.Atoi(w["kept_tokens"]) > 1536 {
		t.Fatalf("after the backend joined: %d %s, window %v: want it cut to the joined backend's budget (1536)", tr.Status, tr.Body, w)
	}
	if tr.Prompt >= 2048 {
		t.Fatalf("prompt of %d tokens for a slot of 2048", tr.Prompt)
	}
}

// fleetCtx is the smallest context a gateway's backends report.
func fleetCtx(gw *app.App) int {
	c := 0
	for _, b := range gw.Router().Backends() {
		if n := b.Info().ContextSlot; n > 0 && (c == 0 || n < c) {
			c = n
		}
	}
	return c
}
