package app_test

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
	"time"
)

func TestPromptLargerThanTheSlotIsContextLengthExceeded(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 512 })
	tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(1, 600)), "max_tokens": 8})
	if tr.Status != 400 {
		t.Fatalf("status %d: %s", tr.Status, tr.Body)
	}
	if e := apptest.DecodeError(t, tr.Body); e.Error.Code != "context_length_exceeded" {
		t.Fatalf("code %q: %s", e.Error.Code, tr.Body)
	}
	tr = apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", "hi"), "max_tokens": 513})
	if tr.Status != 400 {
		t.Fatalf("max_tokens above the context: status %d", tr.Status)
	}
}

// streamUntilFirstChunk starts a long streaming request and returns once its
// first chunk arrived; cancel ends it from the client side.
func streamUntilFirstChunk(t *testing.T, a *app.App) (cancel func(), done <-chan struct{}) {
	t.Helper()
	return streamUntilFirstChunkWith(t, a, nil)
}

// streamUntilFirstChunkWith is streamUntilFirstChunk with request headers.
func streamUntilFirstChunkWith(t *testing.T, a *app.App, headers map[string]string) (cancel func(), done <-chan struct{}) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"messages": apptest.Msgs("user", "go on"), "max_tokens": 3000, "stream": true, "temperature": 0, "ignore_eos": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", a.URL()+"/v1/chat/completions", bytes.NewReader(b))
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
	case <-time.After(3 * time.Minute):
		t.Fatal("no first chunk")
	}
	return cancelFn, end
}

// waitIdle waits until no slot is processing.
func waitIdle(t *testing.T, a *app.App) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		busy := false
		for _, s := range a.Engine().Slots() {
			busy = busy || s.Processing
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots still busy: %+v", a.Engine().Slots())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClientDisconnectStopsGenerationAndFreesTheSlot(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 4096 })
	cancel, done := streamUntilFirstChunk(t, a)
	if !a.Engine().Slots()[0].Processing {
		t.Fatal("slot not processing during the stream")
	}
	cancel()
	<-done
	waitIdle(t, a)
	if n := a.Engine().Stats().GeneratedTokens.Load(); n >= 3000 {
		t.Fatalf("generated %d tokens: generation did not stop", n)
	}
	// The freed slot serves the next request at once.
	if tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", "next"), "max_tokens": 4}); tr.Status != 200 {
		t.Fatalf("next request: %d %s", tr.Status, tr.Body)
	}
}

func TestAllSlotsBusyAndQueueFullIs429(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.Queue = 1, 4096, 0 })
	cancel, done := streamUntilFirstChunk(t, a)
	defer func() { cancel(); <-done }()
	tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", "me too"), "max_tokens": 4})
	if tr.Status != 429 || tr.Header.Get("Retry-After") != "1" {
		t.Fatalf("status %d, Retry-After %q, want 429 and 1: %s", tr.Status, tr.Header.Get("Retry-After"), tr.Body)
	}
	apptest.DecodeError(t, tr.Body)
}

func TestShutdownCancelsStreamsPastTheDeadline(t *testing.T) {
	f := apptest.Flags(t)
	f.Slots, f.Queue, f.ShutdownTimeout = 1, 4, 200*time.Millisecond
	a, err := app.New(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()

	b, _ := json.Marshal(map[string]any{"messages": apptest.Msgs("user", "long"), "max_tokens": 4000, "stream": true, "ignore_eos": true})
	resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
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
	last := apptest.LastLine(sc)
	if !strings.Contains(last, `"error"`) {
		t.Fatalf("stream cut by shutdown ended with %q, want an error event", last)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("server did not stop")
	}
	if _, err := http.Get(a.URL() + "/health"); err == nil {
		t.Fatal("server still accepting connections after shutdown")
	}
}

// lastLine reads sc to its end and returns the last non-empty line: how a
// stream ended.
