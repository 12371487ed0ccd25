package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"strings"
	"testing"
)

func TestKilledNodeCutsItsStreamsAndLaterTurnsGoElsewhere(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 2, "prefix")
	conv := apptest.Msgs("system", apptest.Words(90, 600), "user", apptest.Words(91, 300))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"messages": conv, "max_tokens": 3000, "stream": true, "ignore_eos": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL()+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
		// keep-alives, before the first chunk
	}
	// The stream opened before the gateway knew its backend (X-Kvwin-Backend
	// is a trailer): the node generating it is the one with a busy slot.
	var victim *app.App
	for _, n := range nodes {
		for _, s := range n.Engine().Slots() {
			if s.Processing {
				victim = n
			}
		}
	}
	if resp.StatusCode != 200 || victim == nil {
		t.Fatalf("status %d, no node generating", resp.StatusCode)
	}
	// The node dies: its connections drop and its engine stops.
	victim.Abort()
	victim.Close()
	last := apptest.LastLine(sc)
	if !strings.Contains(last, `"error"`) {
		t.Fatalf("a stream cut by a dead node ended with %q, want an error event", last)
	}
	// The conversation goes on, on the surviving node.
	for turn := range 2 {
		tr := apptest.Post(t, gw, map[string]any{"messages": conv, "max_tokens": 4})
		if tr.Status != 200 || strings.HasSuffix(victim.URL(), tr.Header.Get("X-Kvwin-Backend")) {
			t.Fatalf("turn %d after the kill: status %d on %q", turn, tr.Status, tr.Header.Get("X-Kvwin-Backend"))
		}
	}
}

func TestNoHealthyBackendIs503(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 1, "prefix")
	nodes[0].Abort()
	tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", "anyone?"), "max_tokens": 4})
	if tr.Status != 503 || tr.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: %s", tr.Status, tr.Header.Get("Retry-After"), tr.Body)
	}
	if e := apptest.DecodeError(t, tr.Body); !strings.Contains(e.Error.Message, "backend") {
		t.Fatalf("message %q does not say what is wrong", e.Error.Message)
	}
}

// A backend reporting smaller slots than the window allows never gets a
// prompt it cannot hold: it goes to a backend that can, and when none can,
// the client gets context_length_exceeded, not a backend failure.
func TestBackendWithASmallerContextIsSkippedForLongPrompts(t *testing.T) {
	small := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 1024 })
	large := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 4096 })
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{"llamaserver=" + small.URL(), "llamaserver=" + large.URL()}
		f.Window, f.WindowBudget = "full", 6000
	})
	for i := range 4 {
		tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", apptest.Words(i, 2000)), "max_tokens": 4})
		if tr.Status != 200 || !strings.HasSuffix(large.URL(), tr.Header.Get("X-Kvwin-Backend")) {
			t.Fatalf("a 2,000-token prompt: status %d on %q (small node %s)", tr.Status, tr.Header.Get("X-Kvwin-Backend"), small.URL())
		}
	}
	tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", apptest.Words(9, 5000)), "max_tokens": 4})
	if tr.Status != 400 {
		t.Fatalf("a prompt no backend holds: status %d %s", tr.Status, tr.Body)
	}
	if e := apptest.DecodeError(t, tr.Body); e.Error.Code != "context_length_exceeded" {
		t.Fatalf("code %q", e.Error.Code)
	}
}
