package web

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/web/core"
)

// holdBody starts a request of path whose body never arrives: the server
// has admitted it once its handler waits for the body. Closing the
// returned connection ends it.
func holdBody(t *testing.T, ts *httptest.Server, path, key string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{", path, key)
	return conn
}

// errorShape reads an error body in any route's shape: OpenAI's and
// Anthropic's {"error": {"type", "code"…}}, Ollama's {"error": "…"}.
func errorShape(t *testing.T, body []byte) (typ, code, msg string) {
	t.Helper()
	var e struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || len(e.Error) == 0 {
		t.Fatalf("not an error body: %s", body)
	}
	var s string
	if json.Unmarshal(e.Error, &s) == nil {
		return "", "", s // Ollama
	}
	var obj struct {
		Type, Message string
		Code          any // llama-server's node routes: the status
	}
	if err := json.Unmarshal(e.Error, &obj); err != nil {
		t.Fatalf("error object: %s", body)
	}
	code, _ = obj.Code.(string)
	return obj.Type, code, obj.Message
}

// TestWorkBeforeTheBodyCountsAgainstTenantLimits: on every route that does
// work in proportion to its body (Responses and count_tokens among them), a
// request counts against its tenant's limits from before its body is read:
// with one running (its body still arriving) and one queued, the third is
// 429 with Retry-After in the route's own shape, and the backend saw none.
func TestWorkBeforeTheBodyCountsAgainstTenantLimits(t *testing.T) {
	tests := []struct {
		path, wantType string
	}{
		{chatPath, core.TypeRateLimit},
		{"/v1/responses", core.TypeRateLimit},
		{"/v1/messages", "rate_limit_error"},
		{"/v1/messages/count_tokens", "rate_limit_error"},
		{"/tokenize", "unavailable_error"},
		{"/api/chat", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			f := newFake()
			ts, queued := limitedServer(t, f)

			holdBody(t, ts, tt.path, aliceKey) // admitted: its handler waits for the body
			holdBody(t, ts, tt.path, aliceKey) // waits behind it
			select {
			case <-queued:
			case <-time.After(3 * time.Minute):
				t.Fatal("the second request never queued: the first is not counted while its body arrives")
			}
			resp, body := send(t, ts, "POST", tt.path, `{}`, jsonWith(aliceKey, "anthropic-version", "2023-06-01"))
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("third request: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if typ, _, _ := errorShape(t, body); typ != tt.wantType {
				t.Errorf("error type %q, want %q: %s", typ, tt.wantType, body)
			}
			if n := len(f.Requests()); n != 0 {
				t.Errorf("backend called %d times", n)
			}
		})
	}
}

// TestServerBoundCountsWorkBeforeTheSlot: the server's bound (the engine's
// slots and queue) counts a request whose body is still being read, so a
// request beyond it is 429 queue_full at once, whoever sends it.
func TestServerBoundCountsWorkBeforeTheSlot(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	cfg := keyedConfig(nil)
	cfg.MaxWorking = 1
	s, err := New(cfg, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	admitted := make(chan string, 4)
	s.admitted = admitted
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	wait := func(what string) {
		t.Helper()
		select {
		case <-admitted:
		case <-time.After(3 * time.Minute):
			t.Fatalf("timed out waiting for %s to be admitted", what)
		}
	}
	conn := holdBody(t, ts, "/v1/responses", aliceKey)
	wait("the held request")
	resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(bobKey))
	wantError(t, resp, body, http.StatusTooManyRequests, core.TypeRateLimit, core.CodeQueueFull)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	// In Anthropic's shape: 529 overloaded_error, as a full queue is there.
	resp, body = send(t, ts, "POST", "/v1/messages", `{"model":"tiny","max_tokens":8,`+hi+`}`, jsonWith(bobKey, "anthropic-version", "2023-06-01"))
	if typ, _, _ := errorShape(t, body); resp.StatusCode != 529 || typ != "overloaded_error" {
		t.Errorf("Messages beyond the bound: %d %s", resp.StatusCode, body)
	}
	// Once the held request has ended, its place is free again (each try
	// is answered at once; the deadline only guards against a hang).
	conn.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, body = send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(bobKey))
		if resp.StatusCode == 200 || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("after the held request ended: %d %s", resp.StatusCode, body)
	}
}

// TestTooManyItems: a request holding more messages or input items than
// the server's bound is a 400 naming the limit and the field, in its
// route's shape, before the backend is called; one at the bound is served.
func TestTooManyItems(t *testing.T) {
	msgs := func(n int, f string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(f, []string{"user", "assistant"}[i%2])
		}
		return strings.Join(parts, ",")
	}
	chat := func(n int) string {
		return `{"model":"tiny","messages":[` + msgs(n, `{"role":%q,"content":"hi"}`) + `]}`
	}
	tests := []struct {
		name, path, param string
		openai            bool // OpenAI's shape, with a code
		body              func(n int) string
	}{
		{"chat", chatPath, "messages", true, chat},
		{"ollama", "/api/chat", "messages", false, func(n int) string {
			return `{"model":"tiny","stream":false,"messages":[` + msgs(n, `{"role":%q,"content":"hi"}`) + `]}`
		}},
		{"messages", "/v1/messages", "messages", false, func(n int) string {
			return `{"model":"tiny","max_tokens":8,"messages":[` + msgs(n, `{"role":%q,"content":"hi"}`) + `]}`
		}},
		{"count_tokens", "/v1/messages/count_tokens", "messages", false, func(n int) string {
			return `{"model":"tiny","messages":[` + msgs(n, `{"role":%q,"content":"hi"}`) + `]}`
		}},
		{"responses", "/v1/responses", "input", true, func(n int) string {
			return `{"model":"tiny","store":false,"input":[` + msgs(n, `{"role":%q,"content":"hi"}`) + `]}`
		}},
	}
	const limit = 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
			ts := startServer(t, f, Config{MaxItems: limit}, nil)
			headers := jsonWith("", "anthropic-version", "2023-06-01")
			resp, body := send(t, ts, "POST", tt.path, tt.body(limit+1), headers)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%d items: %d %s", limit+1, resp.StatusCode, body)
			}
			_, code, msg := errorShape(t, body)
			if !strings.Contains(msg, "at most 3") || !strings.Contains(msg, tt.param) || !strings.Contains(msg, "--max-items") {
				t.Errorf("message does not name the limit and %s: %s", tt.param, body)
			}
			if tt.openai && code != core.CodeTooManyItems {
				t.Errorf("code %q, want %q", code, core.CodeTooManyItems)
			}
			if n := len(f.Requests()); n != 0 {
				t.Errorf("backend called %d times", n)
			}
			resp, body = send(t, ts, "POST", tt.path, tt.body(limit), headers)
			if resp.StatusCode == http.StatusBadRequest {
				t.Errorf("%d items refused: %s", limit, body)
			}
		})
	}
}

// TestRequestBoundsConfig: negative bounds are refused, 0 takes the
// defaults.
func TestRequestBoundsConfig(t *testing.T) {
	for _, cfg := range []Config{{MaxWorking: -1}, {MaxItems: -1}} {
		if _, err := New(cfg, newFake(), nil); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	s, err := New(Config{}, newFake(), nil)
	if err != nil || s.cfg.MaxItems != DefaultMaxItems || s.working != nil {
		t.Fatalf("defaults: max items %d, working %v, %v", s.cfg.MaxItems, s.working, err)
	}
}
