// Package apptest starts kvwin servers (app.App) for end-to-end tests and
// talks to them: the helpers the tests of package app and of cmd/kvwin
// share. A server runs on the generated test model, on a free loopback
// port, and stops with its test.
package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/engine"
)

// Threads is the compute threads of a test engine: KVWIN_TEST_THREADS, or 1.
func Threads() int {
	if n, err := strconv.Atoi(os.Getenv("KVWIN_TEST_THREADS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Start starts a server as kvwin serve does, with Flags changed by mutate
// (if not nil), on a free loopback port, and stops it with the test.
func Start(t *testing.T, mutate func(*app.Config)) *app.App {
	t.Helper()
	f := Flags(t)
	if mutate != nil {
		mutate(&f)
	}
	a, stop := Run(t, f)
	t.Cleanup(stop)
	return a
}

// Run starts a server with f and returns it with stop, which shuts it down
// and waits for it (reporting its error); stop may be called more than
// once, so a test can stop the server early (to open its files) and also
// defer it.
func Run(t *testing.T, f app.Config) (*app.App, func()) {
	t.Helper()
	a, err := app.New(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	return a, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
}

// dataDir is the directory of the test model shared by a test binary's
// servers ("" until the first ModelDir). Tests of one binary call ModelDir
// from one goroutine at a time (they do not run in parallel).
var dataDir string

// Flags are kvwin serve's defaults for a test: a free loopback port, a data
// dir of the test's own, the test model generated once per test binary, the
// full window.
func Flags(t *testing.T) app.Config {
	model, err := app.EnsureTinyModel(ModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return app.Config{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Model: model, Slots: 4, Ctx: 4096, Threads: Threads(),
		Queue: 64, Window: "full", MaxBody: 8 << 20, ShutdownTimeout: 5 * time.Second, SnapshotBytes: 1 << 30,
	}
}

// ModelDir holds the test model, generated once per test binary (see
// Cleanup).
func ModelDir(t *testing.T) string {
	if dataDir == "" {
		d, err := os.MkdirTemp("", "kvwin-serve-test")
		if err != nil {
			t.Fatal(err)
		}
		dataDir = d
	}
	return dataDir
}

// Cleanup removes the shared model directory; call it from TestMain after
// m.Run.
func Cleanup() {
	if dataDir != "" {
		os.RemoveAll(dataDir)
	}
}

// ChatReply is a non-streamed chat completion.
type ChatReply struct {
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

// Turn is what one chat request observed.
type Turn struct {
	Status  int
	Header  http.Header // the headers, and a stream's trailers (X-Kvwin-Backend, …)
	Content string
	Prompt  int           // X-Kvwin-Prompt-Tokens
	Cached  int           // X-Kvwin-Cached-Tokens
	TTFT    time.Duration // request sent → first streamed chunk (or whole reply)
	Body    []byte        // the body of a non-streamed answer
}

// Post sends one chat request to a's OpenAI route and reads the answer,
// streamed or not as body says.
func Post(t *testing.T, a *app.App, body map[string]any) Turn {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr := Turn{Status: resp.StatusCode, Header: resp.Header}
	if stream, _ := body["stream"].(bool); stream && resp.StatusCode == 200 {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var content strings.Builder
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if tr.TTFT == 0 {
				tr.TTFT = time.Since(start)
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
		tr.Content = content.String()
	} else {
		tr.Body, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		tr.TTFT = time.Since(start)
		if resp.StatusCode == 200 {
			var r ChatReply
			if err := json.Unmarshal(tr.Body, &r); err != nil {
				t.Fatal(err)
			}
			if r.Usage.PromptTokensDetails.CachedTokens == nil {
				t.Fatalf("usage.prompt_tokens_details.cached_tokens missing: %s", tr.Body)
			}
			tr.Content = r.Choices[0].Message.Content
		}
	}
	// A stream's generation values are its trailers, there once the body
	// is read to its end; Header holds them with the headers.
	_, _ = io.Copy(io.Discard, resp.Body)
	tr.Header = resp.Header.Clone()
	for k, v := range resp.Trailer {
		tr.Header[k] = v
	}
	tr.Prompt, _ = strconv.Atoi(tr.Header.Get("X-Kvwin-Prompt-Tokens"))
	tr.Cached, _ = strconv.Atoi(tr.Header.Get("X-Kvwin-Cached-Tokens"))
	return tr
}

// Words is n bytes of word-like text, varied by seed.
func Words(seed, n int) string {
	w := []string{"alpha", "kv", "cache", "turn", "slot", "prefix", "window", "sink", "token", "memory", "route"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(w[(seed*5+i*7+i/3)%len(w)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// Msgs turns role, content pairs into chat messages.
func Msgs(pairs ...string) []map[string]string {
	var out []map[string]string
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]string{"role": pairs[i], "content": pairs[i+1]})
	}
	return out
}

// APIError is an OpenAI error answer.
type APIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   string `json:"param"`
		Code    string `json:"code"`
	} `json:"error"`
}

// DecodeError decodes an OpenAI error and checks its shape.
func DecodeError(t *testing.T, body []byte) APIError {
	t.Helper()
	var e APIError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI-shaped error (message, type, code): %s", body)
	}
	return e
}

// WindowHeader parses X-Kvwin-Window, which must have every field.
func WindowHeader(t *testing.T, h http.Header) map[string]string {
	t.Helper()
	raw := h.Get("X-Kvwin-Window")
	out := map[string]string{}
	for _, part := range strings.Split(raw, "; ") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			t.Fatalf("bad X-Kvwin-Window %q", raw)
		}
		out[k] = v
	}
	for _, k := range []string{"policy", "kept_tokens", "evicted_turns", "packet_turns", "step"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("X-Kvwin-Window %q lacks %s", raw, k)
		}
	}
	return out
}

// Atoi is strconv.Atoi without the error (0).
func Atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// StartFleet starts n kvwin nodes (embedded engine, 2 slots of 4096 tokens)
// and a gateway over them with the routing policy.
func StartFleet(t *testing.T, n int, policy string) (*app.App, []*app.App) {
	t.Helper()
	var nodes []*app.App
	var specs []string
	for range n {
		node := Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 4096 })
		nodes = append(nodes, node)
		specs = append(specs, "llamaserver="+node.URL())
	}
	gw := Start(t, func(f *app.Config) { f.Backends, f.Route = specs, policy })
	return gw, nodes
}

// PostWith sends a non-streamed chat request to base with extra headers.
func PostWith(t *testing.T, base string, headers map[string]string, body map[string]any) Turn {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr := Turn{Status: resp.StatusCode, Header: resp.Header}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	tr.Body = buf.Bytes()
	tr.Prompt = Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens"))
	tr.Cached = Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
	return tr
}

// LastLine reads sc to the end and returns its last non-empty line.
func LastLine(sc *bufio.Scanner) string {
	var last string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			last = line
		}
	}
	return last
}
