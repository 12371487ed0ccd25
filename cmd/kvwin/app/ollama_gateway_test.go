package app_test

import (
	"context"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"strconv"
	"testing"
	"time"

	"kvwin/engine/ollama/ollamatest"
)

// A gateway over a real Ollama: a two-turn conversation shows Ollama's
// prefix cache at work through kvwin (Ollama's own prompt-eval time of
// turn 2 far below turn 1's), with the reuse marked as kvwin's estimate.
func TestGatewayOverRealOllama(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := ollamatest.Start(t, ctx)
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{"ollama=" + base + "?model=" + ollamatest.TinyModel + "&name=ollama-a"}
	})
	conv := apptest.Msgs("system", apptest.Words(1, 1000), "user", apptest.Words(2, 1000))
	t1 := apptest.Post(t, gw, map[string]any{"model": ollamatest.TinyModel, "messages": conv, "max_tokens": 8, "temperature": 0})
	if t1.Status != 200 {
		t.Fatalf("turn 1: %d %s", t1.Status, t1.Body)
	}
	conv = append(conv, apptest.Msgs("assistant", t1.Content, "user", "and then?")...)
	t2 := apptest.Post(t, gw, map[string]any{"model": ollamatest.TinyModel, "messages": conv, "max_tokens": 8, "temperature": 0})
	if t2.Status != 200 {
		t.Fatalf("turn 2: %d %s", t2.Status, t2.Body)
	}
	if got := t2.Header.Get("X-Kvwin-Backend"); got != "ollama-a" {
		t.Fatalf("X-Kvwin-Backend %q", got)
	}
	if t2.Header.Get("X-Kvwin-Cached-Estimated") != "true" || t2.Cached < t1.Prompt*9/10 {
		t.Fatalf("turn 2: cached %d (estimated %q) of turn 1's %d", t2.Cached, t2.Header.Get("X-Kvwin-Cached-Estimated"), t1.Prompt)
	}
	ms1, _ := strconv.ParseFloat(t1.Header.Get("X-Kvwin-Prompt-Ms"), 64)
	ms2, _ := strconv.ParseFloat(t2.Header.Get("X-Kvwin-Prompt-Ms"), 64)
	t.Logf("Ollama prompt eval: turn 1 %.1f ms, turn 2 %.1f ms", ms1, ms2)
	// Ollama's own account (its runner's log), not a timing: turn 2 reused
	// the whole of turn 1's prompt and computed only what is new.
	loads := ollamatest.CacheLoads(t, base)
	if len(loads) < 2 {
		t.Fatalf("Ollama's runner logged %d cache placements, want 2", len(loads))
	}
	l1, l2 := loads[len(loads)-2], loads[len(loads)-1]
	t.Logf("Ollama's cache: turn 1 reused %d of %d tokens, turn 2 %d of %d", l1.Used, l1.Prompt, l2.Used, l2.Prompt)
	if l1.Used != 0 || l2.Used < l1.Prompt || l2.Used >= l2.Prompt {
		t.Fatalf("Ollama's cache: turn 1 reused %d of %d, turn 2 %d of %d: turn 2 should reuse all of turn 1's prompt", l1.Used, l1.Prompt, l2.Used, l2.Prompt)
	}
}
