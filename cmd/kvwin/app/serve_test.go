package app_test

import (
	"fmt"
	"kvwin/cmd/kvwin/app/apptest"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// End-to-end tests: kvwin serve's own wiring (engine, web, listener,
// graceful shutdown) on the generated test model, over real HTTP.

func TestTwoTurnsOverHTTPReuseTheCache(t *testing.T) {
	a := apptest.Start(t, nil)
	history := apptest.Msgs("system", apptest.Words(1, 1200), "user", apptest.Words(2, 800))
	t1 := apptest.Post(t, a, map[string]any{"messages": history, "max_tokens": 24, "temperature": 0, "seed": 3})
	if t1.Status != 200 || t1.Prompt < 2000 || t1.Cached != 0 {
		t.Fatalf("turn 1: status %d, prompt %d, cached %d: %s", t1.Status, t1.Prompt, t1.Cached, t1.Body)
	}
	if got := t1.Header.Get("X-Kvwin-Backend"); got != "embedded" {
		t.Fatalf("X-Kvwin-Backend = %q", got)
	}
	history = append(history, apptest.Msgs("assistant", t1.Content, "user", apptest.Words(3, 150))...)
	decoded := a.Engine().Stats().PromptDecoded.Load()
	t2 := apptest.Post(t, a, map[string]any{"messages": history, "max_tokens": 24, "temperature": 0, "seed": 3, "stream": true})
	if t2.Status != 200 || t2.Cached < t1.Prompt-1 {
		t.Fatalf("turn 2: status %d, cached %d, want ≥ %d", t2.Status, t2.Cached, t1.Prompt-1)
	}
	if got, want := a.Engine().Stats().PromptDecoded.Load()-decoded, int64(t2.Prompt-t2.Cached); got != want {
		t.Fatalf("the engine decoded %d prompt tokens for turn 2, want prompt − cached = %d", got, want)
	}
	// The same turn with a different first token: nothing to reuse.
	cold := append(apptest.Msgs("system", "X"+apptest.Words(1, 1200)[1:]), history[1:]...)
	decoded = a.Engine().Stats().PromptDecoded.Load()
	t3 := apptest.Post(t, a, map[string]any{"messages": cold, "max_tokens": 24, "temperature": 0, "seed": 3, "stream": true})
	// It shares 9 tokens (BOS, <|im_start|>, "system\n") with turn 2: less
	// than one 16-token block, so nothing is reused.
	if t3.Status != 200 || t3.Cached != 0 || a.Engine().Stats().PromptDecoded.Load()-decoded != int64(t3.Prompt) {
		t.Fatalf("cold turn 2: status %d, cached %d of %d", t3.Status, t3.Cached, t3.Prompt)
	}
	// Wall-clock figures are reported, not asserted (shared, noisy machines);
	// `kvwin bench prefill` measures them side by side.
	t.Logf("turn 2 TTFT: cached %v, cold %v (%.1f×); prompt %d tokens, cached %d", t2.TTFT, t3.TTFT, float64(t3.TTFT)/float64(t2.TTFT), t2.Prompt, t2.Cached)
}

func TestStreamAndNonStreamAreByteIdentical(t *testing.T) {
	a := apptest.Start(t, nil)
	body := func(stream bool) map[string]any {
		return map[string]any{"messages": apptest.Msgs("user", "Tell me about caches. ✓ ü 😀"), "max_tokens": 120,
			"temperature": 0.9, "top_k": 0, "top_p": 1, "seed": 1234, "stream": stream}
	}
	plain := apptest.Post(t, a, body(false))
	streamed := apptest.Post(t, a, body(true))
	if plain.Status != 200 || streamed.Status != 200 {
		t.Fatalf("status %d / %d", plain.Status, streamed.Status)
	}
	if plain.Content == "" || plain.Content != streamed.Content {
		t.Fatalf("contents differ:\nplain    %q\nstreamed %q", plain.Content, streamed.Content)
	}
	if streamed.Cached != streamed.Prompt-2 { // all but the last chunk of two tokens (engine/llamacpp/chunk.go)
		t.Fatalf("the repeated request reused %d of %d prompt tokens", streamed.Cached, streamed.Prompt)
	}
}

func TestInterleavedConversationsKeepTheirPrefixes(t *testing.T) {
	a := apptest.Start(t, nil)
	convs := [][]map[string]string{
		apptest.Msgs("system", apptest.Words(7, 900), "user", apptest.Words(8, 400)),
		apptest.Msgs("system", apptest.Words(9, 900), "user", apptest.Words(10, 400)),
	}
	prev := []int{0, 0}
	slots := map[string]bool{}
	for turnNo := range 3 {
		for i := range convs {
			tr := apptest.Post(t, a, map[string]any{"messages": convs[i], "max_tokens": 12, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("conversation %d turn %d: status %d %s", i, turnNo+1, tr.Status, tr.Body)
			}
			if turnNo > 0 && tr.Cached < prev[i]-1 {
				t.Fatalf("conversation %d turn %d: cached %d, want ≥ %d", i, turnNo+1, tr.Cached, prev[i]-1)
			}
			prev[i] = tr.Prompt
			convs[i] = append(convs[i], apptest.Msgs("assistant", tr.Content, "user", apptest.Words(20+turnNo*2+i, 120))...)
		}
	}
	for _, s := range a.Engine().Slots() {
		if s.Tokens > 0 {
			slots[fmt.Sprint(s.ID)] = true
		}
	}
	if len(slots) != 2 {
		t.Fatalf("conversations occupy %d slots, want 2: %+v", len(slots), a.Engine().Slots())
	}
}
