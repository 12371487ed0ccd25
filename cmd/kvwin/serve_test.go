package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// End-to-end tests: kvwin serve's own wiring (engine, web, listener,
// graceful shutdown) on the generated test model, over real HTTP.

func testThreads() int {
	if n, err := strconv.Atoi(os.Getenv("KVWIN_TEST_THREADS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// startApp starts a server on a free loopback port and stops it with the test.
func startApp(t *testing.T, mutate func(*serveFlags)) *app {
	t.Helper()
	f := testFlags(t)
	if mutate != nil {
		mutate(&f)
	}
	a, err := newApp(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return a
}

var dataDir string

// testFlags are kvwin serve's defaults for a test: a free loopback port, a
// data dir of the test's own, and the test model generated once per binary.
func testFlags(t *testing.T) serveFlags {
	model, err := ensureTinyModel(sharedDataDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return serveFlags{
		addr: "127.0.0.1:0", dataDir: t.TempDir(), model: model, slots: 4, ctx: 4096, threads: testThreads(),
		queue: 64, window: "full", maxBody: 8 << 20, shutdownTimeout: 5 * time.Second, snapshotBytes: 1 << 30,
	}
}

// sharedDataDir holds the test model, generated once per test binary.
func sharedDataDir(t *testing.T) string {
	if dataDir == "" {
		d, err := os.MkdirTemp("", "kvwin-serve-test")
		if err != nil {
			t.Fatal(err)
		}
		dataDir = d
	}
	return dataDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dataDir != "" {
		os.RemoveAll(dataDir)
	}
	os.Exit(code)
}

type chatReply struct {
	Choices []struct {
		Message      engine.Message `json:"message"`
		FinishReason string         `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// turn is what one chat request observed.
type turn struct {
	status  int
	header  http.Header
	content string
	prompt  int
	cached  int
	ttft    time.Duration // request sent → first streamed chunk (or whole reply)
	body    []byte
}

func post(t *testing.T, a *app, body map[string]any) turn {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.Post(a.url()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr := turn{status: resp.StatusCode, header: resp.Header}
	if stream, _ := body["stream"].(bool); stream && resp.StatusCode == 200 {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var content strings.Builder
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if tr.ttft == 0 {
				tr.ttft = time.Since(start)
			}
			if line == "[DONE]" {
				break
			}
			var chunk struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
				Error *struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &chunk); err != nil {
				t.Fatalf("bad SSE data %q: %v", line, err)
			}
			if chunk.Error != nil {
				t.Fatalf("in-stream error: %s", chunk.Error.Message)
			}
			for _, c := range chunk.Choices {
				content.WriteString(c.Delta.Content)
			}
		}
		tr.content = content.String()
	} else {
		tr.body, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		tr.ttft = time.Since(start)
		if resp.StatusCode == 200 {
			var r chatReply
			if err := json.Unmarshal(tr.body, &r); err != nil {
				t.Fatal(err)
			}
			if r.Usage.PromptTokensDetails.CachedTokens == nil {
				t.Fatalf("usage.prompt_tokens_details.cached_tokens missing: %s", tr.body)
			}
			tr.content = r.Choices[0].Message.Content
		}
	}
	tr.prompt, _ = strconv.Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens"))
	tr.cached, _ = strconv.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
	return tr
}

func words(seed, n int) string {
	w := []string{"alpha", "kv", "cache", "turn", "slot", "prefix", "window", "sink", "token", "memory", "route"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(w[(seed*5+i*7+i/3)%len(w)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func msgs(pairs ...string) []map[string]string {
	var out []map[string]string
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]string{"role": pairs[i], "content": pairs[i+1]})
	}
	return out
}

func TestTwoTurnsOverHTTPReuseTheCache(t *testing.T) {
	a := startApp(t, nil)
	history := msgs("system", words(1, 1200), "user", words(2, 800))
	t1 := post(t, a, map[string]any{"messages": history, "max_tokens": 24, "temperature": 0, "seed": 3})
	if t1.status != 200 || t1.prompt < 2000 || t1.cached != 0 {
		t.Fatalf("turn 1: status %d, prompt %d, cached %d: %s", t1.status, t1.prompt, t1.cached, t1.body)
	}
	if got := t1.header.Get("X-Kvwin-Backend"); got != "embedded" {
		t.Fatalf("X-Kvwin-Backend = %q", got)
	}
	history = append(history, msgs("assistant", t1.content, "user", words(3, 150))...)
	decoded := a.eng.Stats().PromptDecoded.Load()
	t2 := post(t, a, map[string]any{"messages": history, "max_tokens": 24, "temperature": 0, "seed": 3, "stream": true})
	if t2.status != 200 || t2.cached < t1.prompt-1 {
		t.Fatalf("turn 2: status %d, cached %d, want ≥ %d", t2.status, t2.cached, t1.prompt-1)
	}
	if got, want := a.eng.Stats().PromptDecoded.Load()-decoded, int64(t2.prompt-t2.cached); got != want {
		t.Fatalf("the engine decoded %d prompt tokens for turn 2, want prompt − cached = %d", got, want)
	}
	// The same turn with a different first token: nothing to reuse.
	cold := append(msgs("system", "X"+words(1, 1200)[1:]), history[1:]...)
	decoded = a.eng.Stats().PromptDecoded.Load()
	t3 := post(t, a, map[string]any{"messages": cold, "max_tokens": 24, "temperature": 0, "seed": 3, "stream": true})
	// It shares 9 tokens (BOS, <|im_start|>, "system\n") with turn 2: less
	// than one 16-token block, so nothing is reused.
	if t3.status != 200 || t3.cached != 0 || a.eng.Stats().PromptDecoded.Load()-decoded != int64(t3.prompt) {
		t.Fatalf("cold turn 2: status %d, cached %d of %d", t3.status, t3.cached, t3.prompt)
	}
	// Wall-clock figures are reported, not asserted (shared, noisy machines);
	// `kvwin bench prefill` measures them side by side.
	t.Logf("turn 2 TTFT: cached %v, cold %v (%.1f×); prompt %d tokens, cached %d", t2.ttft, t3.ttft, float64(t3.ttft)/float64(t2.ttft), t2.prompt, t2.cached)
}

func TestStreamAndNonStreamAreByteIdentical(t *testing.T) {
	a := startApp(t, nil)
	body := func(stream bool) map[string]any {
		return map[string]any{"messages": msgs("user", "Tell me about caches. ✓ ü 😀"), "max_tokens": 120,
			"temperature": 0.9, "top_k": 0, "top_p": 1, "seed": 1234, "stream": stream}
	}
	plain := post(t, a, body(false))
	streamed := post(t, a, body(true))
	if plain.status != 200 || streamed.status != 200 {
		t.Fatalf("status %d / %d", plain.status, streamed.status)
	}
	if plain.content == "" || plain.content != streamed.content {
		t.Fatalf("contents differ:\nplain    %q\nstreamed %q", plain.content, streamed.content)
	}
	if streamed.cached != streamed.prompt-2 { // all but the last chunk of two tokens (engine/llamacpp/chunk.go)
		t.Fatalf("the repeated request reused %d of %d prompt tokens", streamed.cached, streamed.prompt)
	}
}

func TestInterleavedConversationsKeepTheirPrefixes(t *testing.T) {
	a := startApp(t, nil)
	convs := [][]map[string]string{
		msgs("system", words(7, 900), "user", words(8, 400)),
		msgs("system", words(9, 900), "user", words(10, 400)),
	}
	prev := []int{0, 0}
	slots := map[string]bool{}
	for turnNo := range 3 {
		for i := range convs {
			tr := post(t, a, map[string]any{"messages": convs[i], "max_tokens": 12, "temperature": 0})
			if tr.status != 200 {
				t.Fatalf("conversation %d turn %d: status %d %s", i, turnNo+1, tr.status, tr.body)
			}
			if turnNo > 0 && tr.cached < prev[i]-1 {
				t.Fatalf("conversation %d turn %d: cached %d, want ≥ %d", i, turnNo+1, tr.cached, prev[i]-1)
			}
			prev[i] = tr.prompt
			convs[i] = append(convs[i], msgs("assistant", tr.content, "user", words(20+turnNo*2+i, 120))...)
		}
	}
	for _, s := range a.eng.Slots() {
		if s.Tokens > 0 {
			slots[fmt.Sprint(s.ID)] = true
		}
	}
	if len(slots) != 2 {
		t.Fatalf("conversations occupy %d slots, want 2: %+v", len(slots), a.eng.Slots())
	}
}
