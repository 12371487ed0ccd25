package ollama

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
)

// fakeOllama is an Ollama server for tests, speaking its NDJSON wire
// format: /api/show describes a llama model of 8192 tokens of context
// unless show is set, /api/chat and /api/generate stream answer unless
// chat or generate are set. It records the path and body of every request.
type fakeOllama struct {
	show     http.HandlerFunc
	chat     http.HandlerFunc
	generate http.HandlerFunc
	embed    http.HandlerFunc // /api/embed; 404 if nil
	answer   []string         // streamed contents; default "Hel", "lo"
	// promptEval computes the final response's prompt_eval_count from the
	// request body; default: a fixed 100.
	promptEval func(body []byte) int

	mu    sync.Mutex
	calls []call
	srv   *httptest.Server
}

// call is one request the fake served.
type call struct {
	path string
	body string
}

// startFake starts f; the test's cleanup stops it.
func startFake(t *testing.T, f *fakeOllama) *fakeOllama {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/api/show", f.record(f.show, f.serveShow))
	mux.HandleFunc("/api/chat", f.record(f.chat, f.serveStream("message")))
	mux.HandleFunc("/api/generate", f.record(f.generate, f.serveStream("response")))
	mux.HandleFunc("/api/embed", f.record(f.embed, http.NotFound))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// record wraps the handler (h, or def if h is nil) to record each call.
// The body is read first and put back.
func (f *fakeOllama) record(h, def http.HandlerFunc) http.HandlerFunc {
	if h == nil {
		h = def
	}
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, call{path: r.URL.Path, body: string(body)})
		f.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h(w, r)
	}
}

// requests returns the recorded calls to path.
func (f *fakeOllama) requests(path string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// showLlama is /api/show of a llama model of 8192 tokens of context, cut
// to what kvwin reads and a little more.
const showLlama = `{"modelfile":"FROM x","parameters":"stop \"<|im_end|>\"","template":"{{ .Prompt }}",
"details":{"format":"gguf","family":"llama"},
"model_info":{"general.architecture":"llama","general.parameter_count":3310976,"llama.context_length":8192,"llama.block_count":2},
"capabilities":["completion"]}`

func (f *fakeOllama) serveShow(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, showLlama)
}

// serveStream streams f.answer as chat (field "message") or generate
// (field "response") objects, then the final object with metrics.
func (f *fakeOllama) serveStream(field string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		answer := f.answer
		if answer == nil {
			answer = []string{"Hel", "lo"}
		}
		prompt := 100
		if f.promptEval != nil {
			prompt = f.promptEval(body)
		}
		lines := make([]string, 0, len(answer)+1)
		for _, a := range answer {
			lines = append(lines, chunk(field, a))
		}
		lines = append(lines, final(field, "stop", prompt, 308731467, len(answer), 5792074))
		writeNDJSON(w, lines...)
	}
}

// chunk is one streamed object with content.
func chunk(field, content string) string {
	c, _ := json.Marshal(content)
	if field == "response" {
		return fmt.Sprintf(`{"model":"m","created_at":"2025-07-01T10:00:00Z","response":%s,"done":false}`, c)
	}
	return fmt.Sprintf(`{"model":"m","created_at":"2025-07-01T10:00:00Z","message":{"role":"assistant","content":%s},"done":false}`, c)
}

// final is the last object of a stream, with Ollama's metrics.
func final(field, reason string, promptCount int, promptNS int64, evalCount int, evalNS int64) string {
	head := `{"model":"m","created_at":"2025-07-01T10:00:01Z","message":{"role":"assistant","content":""}`
	if field == "response" {
		head = `{"model":"m","created_at":"2025-07-01T10:00:01Z","response":""`
	}
	return fmt.Sprintf(`%s,"done_reason":%q,"done":true,"total_duration":584606031,"load_duration":265568643,`+
		`"prompt_eval_count":%d,"prompt_eval_duration":%d,"eval_count":%d,"eval_duration":%d}`,
		head, reason, promptCount, promptNS, evalCount, evalNS)
}

// writeNDJSON answers 200 with lines, flushing each as Ollama does.
func writeNDJSON(w http.ResponseWriter, lines ...string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	for _, l := range lines {
		io.WriteString(w, l+"\n")
		w.(http.Flusher).Flush()
	}
}

// writeJSON answers status with body.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// answerWith returns a handler answering status with body.
func answerWith(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// hang is a server that accepts a request and never answers; it returns
// when the client goes away.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// stall answers 200 with lines, then goes silent until the client goes
// away.
func stall(lines ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeNDJSON(w, lines...)
		<-r.Context().Done()
	}
}

// newBackend returns a Backend for f, closed by the test's cleanup.
func newBackend(t *testing.T, f *fakeOllama, cfg Config) *Backend {
	t.Helper()
	cfg.BaseURL = f.srv.URL
	if cfg.Model == "" {
		cfg.Model = "m"
	}
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// recorder is a StreamFunc that keeps the events.
type recorder struct{ events []eventCopy }

// eventCopy is an event with its timings, for comparisons.
type eventCopy struct {
	First      bool
	Text       string
	Prompt     int
	Cached     int
	Estimated  bool
	PromptEval time.Duration
}

func (r *recorder) add(ev engine.Event) error {
	r.events = append(r.events, eventCopy{
		First: ev.First, Text: ev.Text, Prompt: ev.Timings.PromptTokens, Cached: ev.Timings.CachedTokens,
		Estimated: ev.Timings.CachedEstimated, PromptEval: ev.Timings.PromptEval,
	})
	return nil
}
