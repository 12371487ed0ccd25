package web

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// streamDialect is one streaming route: a body asking for a stream, the
// exact bytes its stream opens with once the backend accepts, the exact
// bytes of one keep-alive, and how its in-stream error begins.
type streamDialect struct {
	name, path, body  string
	opening, keepAliv string
	errorPrefix       string
}

const (
	anthropicStart  = "event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_test","type":"message","role":"assistant","model":"tiny","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}` + "\n\n"
	anthropicPing   = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	sseComment      = ": keep-alive\n"
	responseObject  = `{"id":"resp_test","object":"response","created_at":1700000000,"completed_at":null,"status":"in_progress","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"tiny","output":[],"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"store":false,"temperature":0.8,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":0.95,"truncation":"auto","usage":null,"metadata":{},"background":false,"reasoning":null,"user":null}`
	responseOpening = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":" + responseObject + "}\n\n" +
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":" + responseObject + "}\n\n"
	ollamaChatNone = `{"model":"tiny","created_at":"2023-11-14T22:13:20Z","message":{"role":"assistant","content":""},"done":false}` + "\n"
	ollamaGenNone  = `{"model":"tiny","created_at":"2023-11-14T22:13:20Z","response":"","done":false}` + "\n"
)

func streamDialects() []streamDialect {
	return []streamDialect{
		{"chat", chatPath, `{"stream":true,` + hi + `}`, sseComment, sseComment, `data: {"error":`},
		{"completions", completionPath, `{"stream":true,"prompt":"p"}`, sseComment, sseComment, `data: {"error":`},
		{"responses", "/v1/responses", `{"model":"tiny","input":"hi","stream":true,"store":false}`,
			responseOpening, sseComment, "event: response.failed\n"},
		{"messages", messagesPath, messagesBody(`"stream":true`), anthropicStart + anthropicPing, anthropicPing, "event: error\n"},
		{"ollama chat", "/api/chat", `{"model":"tiny",` + hi + `}`, ollamaChatNone, ollamaChatNone, `{"error":`},
		{"ollama generate", "/api/generate", `{"model":"tiny","prompt":"hi"}`, ollamaGenNone, ollamaGenNone, `{"error":`},
		{"node completion", "/completion", `{"prompt":"p","stream":true}`, sseComment, sseComment, `data: {"error":`},
	}
}

// post starts a request and returns its response once its headers came.
func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readUntil reads r until what was read holds want n times after prefix,
// and returns what it read. The request's own deadline bounds it.
func readUntil(t *testing.T, r *bufio.Reader, prefix, want string, n int) string {
	t.Helper()
	var got strings.Builder
	for !strings.HasPrefix(got.String(), prefix) || strings.Count(strings.TrimPrefix(got.String(), prefix), want) < n {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("after %q: %v", got.String(), err)
		}
		got.WriteByte(b)
	}
	return got.String()
}

// TestStreamOpensOnAcceptance: once the backend accepts a request, every
// streaming dialect sends its status, headers and opening bytes, then a
// keep-alive every interval, before the first token; then the answer, and
// the generation values as trailers. The bytes are exact.
func TestStreamOpensOnAcceptance(t *testing.T) {
	for _, d := range streamDialects() {
		t.Run(d.name, func(t *testing.T) {
			f := newFake().Script("stop", engineTimings(3, 1, 1), firstEvent(3, 1), textEvent("Hi"))
			f.Accept, f.Prefill = true, make(chan struct{})
			ts := startServer(t, f, Config{KeepAlive: time.Millisecond}, nil)
			resp := post(t, ts.URL+d.path, d.body) // returns with the headers: before the first token
			if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderCachedTokens) != "" {
				t.Fatalf("status %d, %s %q in the headers", resp.StatusCode, HeaderCachedTokens, resp.Header.Get(HeaderCachedTokens))
			}
			r := bufio.NewReader(resp.Body)
			early := readUntil(t, r, d.opening, d.keepAliv, 2)
			if rest := strings.TrimPrefix(early, d.opening); rest != strings.Repeat(d.keepAliv, strings.Count(rest, d.keepAliv)) {
				t.Fatalf("before the first token: %q, want %q and keep-alives %q", early, d.opening, d.keepAliv)
			}
			close(f.Prefill)
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(rest, []byte("Hi")) {
				t.Errorf("the answer after the keep-alives lacks its text: %q", rest)
			}
			if got := resp.Trailer.Get(HeaderCachedTokens); got != "1" {
				t.Errorf("trailer %s = %q, want 1", HeaderCachedTokens, got)
			}
		})
	}
}

// TestStreamErrorAfterAcceptance: a backend that fails after accepting a
// request, before any token, ends the opened stream with the dialect's
// in-stream error; one that fails before accepting still gets its status.
func TestStreamErrorAfterAcceptance(t *testing.T) {
	for _, d := range streamDialects() {
		t.Run(d.name, func(t *testing.T) {
			f := newFake()
			f.Accept, f.Prefill, f.ErrAfter = true, make(chan struct{}), engine.ErrUnavailable
			ts := startServer(t, f, Config{KeepAlive: -1}, nil)
			resp := post(t, ts.URL+d.path, d.body)
			r := bufio.NewReader(resp.Body)
			_ = readUntil(t, r, d.opening, d.opening, 0)
			close(f.Prefill) // and the backend fails
			after, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(after), d.errorPrefix) {
				t.Errorf("status %d, after the opening %q: want the in-stream error %q", resp.StatusCode, after, d.errorPrefix)
			}

			refused := newFake()
			refused.Err = engine.Invalid("refused")
			ts = startServer(t, refused, Config{KeepAlive: time.Millisecond}, nil)
			if resp, body := do(t, ts, http.MethodPost, d.path, d.body); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("refused before acceptance: status %d, body %q, want 400", resp.StatusCode, body)
			}
		})
	}
}
