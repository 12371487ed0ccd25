package llamaserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeServer is a llama-server for tests: /props, /slots and /health serve
// fixtures from testdata, /tokenize and /detokenize a byte-level vocabulary
// (see encode), /apply-template a Llama 3 rendering, and /completion replays
// a recorded stream unless a test sets its own handler. It records the path
// and body of every request.
type fakeServer struct {
	props      string           // fixture served by /props
	completion http.HandlerFunc // nil: replay testdata/completion_stream.sse
	noBOS      bool             // the vocabulary adds no BOS
	slots      string           // fixture served by /slots; "" slots.json, "501" not served
	// tokenizeDown makes /tokenize answer 503 while set.
	tokenizeDown atomic.Bool

	mu    sync.Mutex
	calls []call
	srv   *httptest.Server
}

// call is one request the fake served.
type call struct {
	path string
	body string
}

// The fake vocabulary: BOS is 1, the control tokens below when parsed, and
// every other byte b is 100+b.
var specials = map[string]int{
	"<|begin_of_text|>":   1,
	"<|im_start|>":        2,
	"<|im_end|>":          3,
	"<|start_header_id|>": 4,
	"<|end_header_id|>":   5,
	"<|eot_id|>":          6,
}

// encode tokenizes s as the fake server does.
func encode(s string, addSpecial, parseSpecial, bos bool) []int {
	var out []int
	if addSpecial && bos {
		out = append(out, 1)
	}
next:
	for len(s) > 0 {
		if parseSpecial {
			for tok, id := range specials {
				if strings.HasPrefix(s, tok) {
					out = append(out, id)
					s = s[len(tok):]
					continue next
				}
			}
		}
		out = append(out, 100+int(s[0]))
		s = s[1:]
	}
	return out
}

// decode is encode's inverse.
func decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 100 {
			b.WriteByte(byte(id - 100))
			continue
		}
		for tok, sid := range specials {
			if sid == id {
				b.WriteString(tok)
			}
		}
	}
	return b.String()
}

// startFake starts f; the server closes when the test ends.
func startFake(t *testing.T, f *fakeServer) *fakeServer {
	t.Helper()
	if f.props == "" {
		f.props = "props_chatml.json"
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls = append(f.calls, call{path: r.URL.Path, body: string(body)})
	f.mu.Unlock()

	switch r.Method + " " + r.URL.Path {
	case "GET /props":
		serveFile(w, http.StatusOK, f.props)
	case "GET /slots":
		switch f.slots {
		case "":
			serveFile(w, http.StatusOK, "slots.json")
		case "501":
			writeJSON(w, http.StatusNotImplemented, map[string]any{"error": map[string]any{"code": 501,
				"message": "This server does not support slots endpoint. Start it with `--slots`", "type": "not_supported_error"}})
		default:
			serveFile(w, http.StatusOK, f.slots)
		}
	case "GET /health":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case "POST /tokenize":
		if f.tokenizeDown.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"code": 503, "message": "Loading model", "type": "unavailable_error"}})
			return
		}
		var in struct {
			Content      string `json:"content"`
			AddSpecial   bool   `json:"add_special"`
			ParseSpecial *bool  `json:"parse_special"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "message": err.Error(), "type": "invalid_request_error"}})
			return
		}
		parse := in.ParseSpecial == nil || *in.ParseSpecial // llama-server's default
		tokens := encode(in.Content, in.AddSpecial, parse, !f.noBOS)
		if tokens == nil {
			tokens = []int{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": tokens})
	case "POST /detokenize":
		var in struct {
			Tokens []int `json:"tokens"`
		}
		_ = json.Unmarshal(body, &in)
		writeJSON(w, http.StatusOK, map[string]string{"content": decode(in.Tokens)})
	case "POST /apply-template":
		var in struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		writeJSON(w, http.StatusOK, map[string]string{"prompt": llama3(in.Messages)})
	case "POST /completion":
		if f.completion != nil {
			f.completion(w, r)
			return
		}
		serveStream(w, "completion_stream.sse")
	default:
		http.NotFound(w, r)
	}
}

// llama3 renders messages as the Llama 3 template of props_llama3.json.
func llama3(msgs []struct{ Role, Content string }) string {
	var b strings.Builder
	b.WriteString("<|begin_of_text|>")
	for _, m := range msgs {
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + m.Content + "<|eot_id|>")
	}
	b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	return b.String()
}

// requests returns the bodies of the requests to path, in order.
func (f *fakeServer) requests(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c.path == path {
			out = append(out, c.body)
		}
	}
	return out
}

// backend returns a Backend for f with cfg's other fields; it is closed
// when the test ends.
func (f *fakeServer) backend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	cfg.BaseURL = f.srv.URL
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func fixture(name string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err) // a missing fixture is a broken test tree
	}
	return data
}

func serveFile(w http.ResponseWriter, status int, name string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(fixture(name))
}

// serveStream replays a recorded SSE answer.
func serveStream(w http.ResponseWriter, name string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(fixture(name))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
