package web

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/web/core"
)

// limitedServer serves f with keys and one running and one queued request
// per tenant; queued hears of each request that waits for its tenant.
func limitedServer(t *testing.T, f *fakeBackend) (*httptest.Server, <-chan string) {
	t.Helper()
	cfg := keyedConfig(nil)
	cfg.TenantMaxConcurrent, cfg.TenantMaxQueued = 1, 1
	s, err := New(cfg, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan string, 4)
	s.limits.queued = queued
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, queued
}

// TestTenantLimits: with one running and one queued request per tenant, a
// tenant's third request is 429 with Retry-After at once, while another
// tenant is admitted; the queued one runs when the first ends.
func TestTenantLimits(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	f.Entered = make(chan engine.Request, 8)
	f.Hold = make(chan struct{})
	ts, queued := limitedServer(t, f)
	t.Cleanup(func() { f.Release() })

	type answer struct {
		status int
		body   string
	}
	async := func(key string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest("POST", ts.URL+chatPath, strings.NewReader(`{`+hi+`}`))
			for k, v := range jsonWith(key) {
				req.Header.Set(k, v)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				ch <- answer{body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b := new(strings.Builder)
			_, _ = bufio.NewReader(resp.Body).WriteTo(b)
			ch <- answer{resp.StatusCode, b.String()}
		}()
		return ch
	}
	entered := func(want string) {
		t.Helper()
		select {
		case r := <-f.Entered:
			if r.Tenant != want {
				t.Fatalf("backend entered by %q, want %q", r.Tenant, want)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("timed out waiting for %s's request to reach the backend", want)
		}
	}
	first := async(aliceKey)
	entered("alice")
	second := async(aliceKey) // waits behind the first
	select {
	case who := <-queued:
		if who != "alice" {
			t.Fatalf("%s queued", who)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("timed out waiting for alice's second request to queue")
	}
	resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(aliceKey))
	wantError(t, resp, body, 429, core.TypeRateLimit, core.CodeTenantLimit)
	if resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	bob := async(bobKey)
	entered("bob") // another tenant is not held back by alice's
	close(f.Hold)  // every held generation finishes
	for name, ch := range map[string]<-chan answer{"first": first, "second": second, "bob": bob} {
		if a := <-ch; a.status != 200 {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
	}
	entered("alice") // the queued one ran after the first ended
}

// TestBodyTimeoutAnswers408: a client that stops sending its body gets 408
// once the body deadline passes, not a hung connection.
func TestBodyTimeoutAnswers408(t *testing.T) {
	ts := startServer(t, newFake(), Config{BodyTimeout: 50 * time.Millisecond}, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messa", chatPath)
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Minute)) // a hang fails instead of blocking the test
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want 408: %s", resp.StatusCode, b)
	}
}

// TestLongStreamOutlivesTheBodyTimeout: the body deadline is lifted once the
// body is read, so a stream lasting many times longer ends normally.
func TestLongStreamOutlivesTheBodyTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("Hello"))
	f.Hold = make(chan struct{})
	ts := startServer(t, f, Config{BodyTimeout: timeout}, nil)
	go func() {
		<-f.Started
		<-time.After(10 * timeout) // the stream stays open past the deadline
		close(f.Hold)
	}()
	resp, body := do(t, ts, "POST", chatPath, `{"stream":true,`+hi+`}`)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") || !strings.Contains(string(body), "Hello") {
		t.Fatalf("stream cut: %d %q", resp.StatusCode, body)
	}
}

// TestParameterRanges: every numeric parameter past its range is a 400
// naming it, with no Go type names in the message.
func TestParameterRanges(t *testing.T) {
	tests := []struct {
		path, body, param string
	}{
		{"/completion", `{"prompt":"x","repeat_last_n":1000000000}`, "repeat_last_n"},
		{"/completion", `{"prompt":"x","repeat_last_n":-2}`, "repeat_last_n"},
		{"/completion", `{"prompt":"x","n_keep":100000}`, "n_keep"},
		{"/completion", `{"prompt":"x","n_predict":100000}`, "n_predict"},
		{"/completion", `{"prompt":"x","n_cache_reuse":-1}`, "n_cache_reuse"},
		{"/completion", `{"prompt":"x","id_slot":2}`, "id_slot"},
		{"/completion", `{"prompt":"x","repeat_penalty":11}`, "repeat_penalty"},
		{chatPath, `{` + hi + `,"temperature":2.5}`, "temperature"},
		{chatPath, `{` + hi + `,"top_k":2000000}`, "top_k"},
		{chatPath, `{` + hi + `,"top_p":1.5}`, "top_p"},
		{chatPath, `{` + hi + `,"min_p":-0.5}`, "min_p"},
		{chatPath, `{` + hi + `,"seed":-5}`, "seed"},
		{chatPath, `{` + hi + `,"max_tokens":513}`, "max_tokens"},
		{chatPath, `{` + hi + `,"n":2}`, "n"},
		{chatPath, `{` + hi + `,"top_k":"many"}`, "top_k"},
	}
	for _, tt := range tests {
		t.Run(tt.param+" "+tt.body, func(t *testing.T) {
			f := newFake()
			ts := startServer(t, f, Config{}, nil)
			resp, body := do(t, ts, "POST", tt.path, tt.body)
			if resp.StatusCode != 400 || len(f.Requests()) != 0 {
				t.Fatalf("status %d (backend called %d times): %s", resp.StatusCode, len(f.Requests()), body)
			}
			msg := string(body)
			if !strings.Contains(msg, tt.param) || strings.Contains(msg, "int") && !strings.Contains(msg, "integer") || strings.Contains(msg, "float") || strings.Contains(msg, "*") {
				t.Fatalf("message does not name %s, or shows a Go type: %s", tt.param, msg)
			}
		})
	}
}

// TestStalledReaderEndsTheStream: a client that stops reading a long
// stream does not hold its slot forever: once its socket has taken nothing
// for the stall timeout, the generation is told to stop.
func TestStalledReaderEndsTheStream(t *testing.T) {
	events := []engine.Event{firstEvent(3, 0)}
	big := strings.Repeat("x", 64<<10)
	for range 512 { // 32 MiB: more than any socket buffers
		events = append(events, textEvent(big))
	}
	f := newFake().Script("stop", engineTimings(3, 0, len(events)), events...)
	f.StreamErr = make(chan error, 1)
	ts := startServer(t, f, Config{StallTimeout: 50 * time.Millisecond}, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"stream":true,` + hi + `}`
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", chatPath, len(body), body)
	// Read nothing.
	select {
	case err := <-f.StreamErr:
		if err == nil {
			t.Fatal("nil error")
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the stream of a client that reads nothing was never ended")
	}
}

// TestKeptAliveConnectionOutlivesTheStallDeadline: the write deadline of a
// finished stream does not outlive it (net/http lifts it after the
// handler), so the next request on the same connection, after longer than
// the stall timeout, is answered.
func TestKeptAliveConnectionOutlivesTheStallDeadline(t *testing.T) {
	const stall = 20 * time.Millisecond
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("Hello"))
	ts := startServer(t, f, Config{StallTimeout: stall}, nil)
	resp, body := do(t, ts, "POST", chatPath, `{"stream":true,`+hi+`}`)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("first stream: %d %q", resp.StatusCode, body)
	}
	<-time.After(10 * stall) // the connection idles past the stream's deadline
	resp, body = do(t, ts, "POST", chatPath, `{`+hi+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("second request on the kept-alive connection: %d %s", resp.StatusCode, body)
	}
}

func TestTenantLimitConfig(t *testing.T) {
	for _, cfg := range []Config{{TenantMaxConcurrent: -1}, {TenantMaxQueued: -1}, {TenantMaxQueued: 4}} {
		if _, err := New(cfg, newFake(), nil); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
