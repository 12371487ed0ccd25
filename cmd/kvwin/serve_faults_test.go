package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, body []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI-shaped error (message, type, code): %s", body)
	}
	return e
}

func TestPromptLargerThanTheSlotIsContextLengthExceeded(t *testing.T) {
	a := startApp(t, func(f *serveFlags) { f.slots, f.ctx = 1, 512 })
	tr := post(t, a, map[string]any{"messages": msgs("user", words(1, 600)), "max_tokens": 8})
	if tr.status != 400 {
		t.Fatalf("status %d: %s", tr.status, tr.body)
	}
	if e := decodeError(t, tr.body); e.Error.Code != "context_length_exceeded" {
		t.Fatalf("code %q: %s", e.Error.Code, tr.body)
	}
	tr = post(t, a, map[string]any{"messages": msgs("user", "hi"), "max_tokens": 513})
	if tr.status != 400 {
		t.Fatalf("max_tokens above the context: status %d", tr.status)
	}
}

// streamUntilFirstChunk starts a long streaming request and returns once its
// first chunk arrived; cancel ends it from the client side.
func streamUntilFirstChunk(t *testing.T, a *app) (cancel func(), done <-chan struct{}) {
	t.Helper()
	return streamUntilFirstChunkWith(t, a, nil)
}

// streamUntilFirstChunkWith is streamUntilFirstChunk with request headers.
func streamUntilFirstChunkWith(t *testing.T, a *app, headers map[string]string) (cancel func(), done <-chan struct{}) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"messages": msgs("user", "go on"), "max_tokens": 3000, "stream": true, "temperature": 0, "ignore_eos": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", a.url()+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d", resp.StatusCode)
	}
	first := make(chan struct{})
	end := make(chan struct{})
	go func() {
		defer close(end)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		once := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") && !once {
				once = true
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("no first chunk")
	}
	return cancelFn, end
}

// waitIdle waits until no slot is processing.
func waitIdle(t *testing.T, a *app) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		busy := false
		for _, s := range a.eng.Slots() {
			busy = busy || s.Processing
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots still busy: %+v", a.eng.Slots())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClientDisconnectStopsGenerationAndFreesTheSlot(t *testing.T) {
	a := startApp(t, func(f *serveFlags) { f.slots, f.ctx = 1, 4096 })
	cancel, done := streamUntilFirstChunk(t, a)
	if !a.eng.Slots()[0].Processing {
		t.Fatal("slot not processing during the stream")
	}
	cancel()
	<-done
	waitIdle(t, a)
	if n := a.eng.Stats().GeneratedTokens.Load(); n >= 3000 {
		t.Fatalf("generated %d tokens: generation did not stop", n)
	}
	// The freed slot serves the next request at once.
	if tr := post(t, a, map[string]any{"messages": msgs("user", "next"), "max_tokens": 4}); tr.status != 200 {
		t.Fatalf("next request: %d %s", tr.status, tr.body)
	}
}

func TestAllSlotsBusyAndQueueFullIs429(t *testing.T) {
	a := startApp(t, func(f *serveFlags) { f.slots, f.ctx, f.queue = 1, 4096, 0 })
	cancel, done := streamUntilFirstChunk(t, a)
	defer func() { cancel(); <-done }()
	tr := post(t, a, map[string]any{"messages": msgs("user", "me too"), "max_tokens": 4})
	if tr.status != 429 || tr.header.Get("Retry-After") != "1" {
		t.Fatalf("status %d, Retry-After %q, want 429 and 1: %s", tr.status, tr.header.Get("Retry-After"), tr.body)
	}
	decodeError(t, tr.body)
}

func TestShutdownCancelsStreamsPastTheDeadline(t *testing.T) {
	f := testFlags(t)
	f.slots, f.queue, f.shutdownTimeout = 1, 4, 200*time.Millisecond
	a, err := newApp(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.run(ctx) }()

	b, _ := json.Marshal(map[string]any{"messages": msgs("user", "long"), "max_tokens": 4000, "stream": true, "ignore_eos": true})
	resp, err := http.Post(a.url()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() {
		t.Fatal("no first line")
	}
	stop() // SIGINT/SIGTERM
	last := lastLine(sc)
	if !strings.Contains(last, `"error"`) {
		t.Fatalf("stream cut by shutdown ended with %q, want an error event", last)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
	if _, err := http.Get(a.url() + "/health"); err == nil {
		t.Fatal("server still accepting connections after shutdown")
	}
}

// lastLine reads sc to its end and returns the last non-empty line: how a
// stream ended.
func lastLine(sc *bufio.Scanner) string {
	var last string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			last = line
		}
	}
	return last
}
