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

	"kvwin/engine/llamaserver"
)

func smallRouteWorkload() routeWorkload {
	return routeWorkload{Groups: 2, PerGroup: 3, Turns: 6, SystemBytes: 800, UserBytes: 80, AnswerBytes: 160,
		Concurrency: 1, Seed: 3}
}

// The workload's nodes are sized so that its longest prompt fits the
// window budget a gateway derives from their context.
func TestRouteWorkloadSizesItsNodes(t *testing.T) {
	w := defaultRouteWorkload()
	ctx := w.nodeContext()
	if budget := ctx - app.OutputReserve(ctx); budget < w.maxPromptTokens() || ctx%512 != 0 {
		t.Fatalf("ctx %d, budget %d for prompts up to %d tokens", ctx, budget, w.maxPromptTokens())
	}
	// Today's workload (3 groups × 4 conversations × 6 turns) reaches 3565
	// tokens on its sixth turns, beyond the 3072-token budget of 4096.
	if w.Groups*w.PerGroup*w.Turns != 72 || w.maxPromptTokens() < 3565 || ctx <= 4096 {
		t.Fatalf("workload %+v: bound %d, ctx %d", w, w.maxPromptTokens(), ctx)
	}
}

// Prefix routing computes about the minimum (each turn's new message, each
// system prompt once per node: the answers were generated where the
// conversation lives); round-robin recomputes history and answers wherever
// a turn lands away from its conversation's node.
func TestPrefixRoutingComputesAThirdOfRoundRobinsPrefill(t *testing.T) {
	w := smallRouteWorkload()
	results := map[string]routeResult{}
	for _, policy := range []string{"prefix", "round-robin"} {
		gw, nodes := apptest.StartFleet(t, 3, policy)
		res := w.run(context.Background(), gw.URL(), policy, nil)
		if res.Errors > 0 || res.Requests != w.Groups*w.PerGroup*w.Turns {
			t.Fatalf("%s: %d requests, %d errors", policy, res.Requests, res.Errors)
		}
		tok, err := llamaserver.New(llamaserver.Config{BaseURL: nodes[0].URL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Close()
		if res.OraclePrefill, err = w.oraclePrefill(context.Background(), tok, res.Turns); err != nil {
			t.Fatal(err)
		}
		results[policy] = res
		t.Logf("%-12s prefill %6d tokens (oracle %d), cached share %.2f, TTFT p50 %.0f ms p90 %.0f ms", policy, res.PrefillTokens,
			res.OraclePrefill, res.CachedShare, res.TTFTP50, res.TTFTP90)
	}
	p, rr := results["prefix"], results["round-robin"]
	if 3*p.PrefillTokens > rr.PrefillTokens {
		t.Fatalf("prefix computed %d prefill tokens, round-robin %d: want ≤ 1/3", p.PrefillTokens, rr.PrefillTokens)
	}
	// The oracle is a lower bound no policy beats, and prefix routing one
	// request at a time comes close to it.
	for _, r := range results {
		if r.OraclePrefill <= 0 || r.PrefillTokens < r.OraclePrefill {
			t.Fatalf("%s: prefill %d below its oracle %d", r.Policy, r.PrefillTokens, r.OraclePrefill)
		}
	}
	if float64(p.PrefillTokens) > 1.15*float64(p.OraclePrefill) {
		t.Fatalf("prefix prefill %d is more than 1.15× the oracle's %d", p.PrefillTokens, p.OraclePrefill)
	}
	// Requests go one at a time, so the hot-spot guard never fires: every
	// follow-up turn lands where its conversation's previous turn ran.
	home := map[int]string{}
	for _, tr := range p.Turns {
		if prev, ok := home[tr.Conv]; ok && tr.Backend != prev {
			t.Fatalf("conversation %d turn %d went to %s, its prefix is on %s", tr.Conv, tr.Turn, tr.Backend, prev)
		}
		home[tr.Conv] = tr.Backend
	}
}

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
	served := resp.Header.Get("X-Kvwin-Backend")
	var victim *app.App
	for _, n := range nodes {
		if strings.HasSuffix(n.URL(), served) {
			victim = n
		}
	}
	if resp.StatusCode != 200 || victim == nil {
		t.Fatalf("status %d, served by %q", resp.StatusCode, served)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() {
		t.Fatal("no first chunk")
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
