package web

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/web/core"
)

// testCreated is the "created" of every test response.
const testCreated = 1700000000

// startServer serves f over a real HTTP server with fixed ids and clock, so
// bodies can be compared byte for byte.
func startServer(t *testing.T, f *fakeBackend, cfg Config, log *slog.Logger) *httptest.Server {
	t.Helper()
	s, err := New(cfg, f, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.now = func() time.Time { return time.Unix(testCreated, 0) }
	s.newID = func(prefix string) string { return prefix + "test" }
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close) // blocks until every handler returned: a hung handler fails the test
	// Cleanups run last-in first-out: this one runs before Close.
	t.Cleanup(func() { f.Release() })
	return ts
}

// do sends one request and returns the response with its whole body.
func do(t *testing.T, ts *httptest.Server, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

// wantError checks an OpenAI-shaped error answer.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, typ, code string) core.APIError {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e struct {
		Error *core.APIError `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		t.Fatalf("body is not an OpenAI error: %s (%v)", body, err)
	}
	if e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Errorf("error has an empty field: %+v", *e.Error)
	}
	if e.Error.Type != typ || e.Error.Code != code {
		t.Errorf("error type, code = %q, %q; want %q, %q (message %q)", e.Error.Type, e.Error.Code, typ, code, e.Error.Message)
	}
	return *e.Error
}

func TestHealthAndModels(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	tests := []struct {
		path string
		want string
	}{
		{"/health", `{"status":"ok"}`},
		{"/v1/models", `{"object":"list","data":[{"id":"tiny","object":"model","created":CREATED,"owned_by":"kvwin"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, body := do(t, ts, http.MethodGet, tt.path, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, body %s", resp.StatusCode, body)
			}
			// created is the server's start time: check its shape, then the rest exactly.
			var probe struct {
				Data []struct {
					Created int64 `json:"created"`
				} `json:"data"`
			}
			_ = json.Unmarshal(body, &probe)
			want := tt.want
			if len(probe.Data) == 1 {
				if age := time.Since(time.Unix(probe.Data[0].Created, 0)); age < 0 || age > time.Minute {
					t.Errorf("created is %v ago, want the server start", age)
				}
				want = strings.Replace(want, "CREATED", jsonInt(probe.Data[0].Created), 1)
			}
			if got := strings.TrimSpace(string(body)); got != want {
				t.Errorf("body = %s\nwant   %s", got, want)
			}
		})
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestRoutingErrors(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	tests := []struct {
		name, method, path string
		status             int
		code, allow        string
	}{
		{"unknown path", http.MethodPost, "/v1/audio/speech", http.StatusNotFound, core.CodeUnknownURL, ""},
		{"unknown root path", http.MethodGet, "/v1", http.StatusNotFound, core.CodeUnknownURL, ""},
		{"trailing slash is not redirected", http.MethodGet, "/v1/models/", http.StatusNotFound, core.CodeUnknownURL, ""},
		{"GET chat", http.MethodGet, "/v1/chat/completions", http.StatusMethodNotAllowed, core.CodeMethodNotAllowed, "POST"},
		{"DELETE completions", http.MethodDelete, "/v1/completions", http.StatusMethodNotAllowed, core.CodeMethodNotAllowed, "POST"},
		{"POST models", http.MethodPost, "/v1/models", http.StatusMethodNotAllowed, core.CodeMethodNotAllowed, "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, ts, tt.method, tt.path, "")
			wantError(t, resp, body, tt.status, core.TypeInvalidRequest, tt.code)
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestPanicIsAnOpenAIError(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "non-stream", true: "stream"}[stream], func(t *testing.T) {
			f := newFake()
			f.PanicWith = "boom"
			ts := startServer(t, f, Config{}, nil)
			body := `{"messages":[{"role":"user","content":"hi"}],"stream":` + jsonBool(stream) + `}`
			resp, b := do(t, ts, http.MethodPost, "/v1/chat/completions", body)
			wantError(t, resp, b, http.StatusInternalServerError, core.TypeServer, core.CodeInternal)

			// The server survives it.
			resp, b = do(t, ts, http.MethodGet, "/health", "")
			if resp.StatusCode != http.StatusOK {
				t.Errorf("after a panic, /health = %d %s", resp.StatusCode, b)
			}
		})
	}
	t.Run("mid-stream", func(t *testing.T) {
		f := newFake()
		f.Events = []engine.Event{firstEvent(1, 0), textEvent("a")}
		f.PanicLate = true
		ts := startServer(t, f, Config{}, nil)
		resp, b := do(t, ts, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
		// Too late for a status: the stream just ends, without [DONE].
		want := sse(chunkHead+`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`) +
			sse(chunkHead+`"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`)
		if resp.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("got %d\n%s\nwant 200\n%s", resp.StatusCode, b, want)
		}
	})
}

func jsonBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		nilFake  bool
		wantErr  bool
		wantBody int64
	}{
		{name: "zero value gets defaults", cfg: Config{}, wantBody: DefaultMaxBodyBytes},
		{name: "explicit limit kept", cfg: Config{MaxBodyBytes: 1234}, wantBody: 1234},
		{name: "negative limit", cfg: Config{MaxBodyBytes: -1}, wantErr: true},
		{name: "nil backend", cfg: Config{}, nilFake: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Server
			var err error
			if tt.nilFake {
				s, err = New(tt.cfg, nil, nil)
			} else {
				s, err = New(tt.cfg, newFake(), nil)
			}
			if tt.wantErr {
				if err == nil || s != nil {
					t.Fatalf("New = %v, %v; want nil and an error", s, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if s.cfg.MaxBodyBytes != tt.wantBody {
				t.Errorf("MaxBodyBytes = %d, want %d", s.cfg.MaxBodyBytes, tt.wantBody)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe to write from the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestAccessLog(t *testing.T) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	ts := startServer(t, f, Config{}, log)

	do(t, ts, http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	do(t, ts, http.MethodGet, "/health", "")
	do(t, ts, http.MethodPost, "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"hi"}]}`)
	ts.Close() // waits for the handlers, and so for their log lines

	type line struct {
		Level, Msg, Method, Path, Error string
		Status                          int
		Duration                        int64
	}
	var got []line
	for _, raw := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		got = append(got, l)
	}
	want := []line{
		{Level: "INFO", Msg: "http request", Method: "POST", Path: "/v1/chat/completions", Status: 200},
		{Level: "DEBUG", Msg: "http request", Method: "GET", Path: "/health", Status: 200},
		{Level: "INFO", Msg: "http request", Method: "POST", Path: "/v1/chat/completions", Status: 404},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d log lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		g := got[i]
		if g.Duration <= 0 {
			t.Errorf("line %d: duration %d, want > 0", i, g.Duration)
		}
		if want[i].Status >= 400 && !strings.Contains(g.Error, "other") {
			t.Errorf("line %d: error %q does not name the failing model", i, g.Error)
		}
		g.Duration, g.Error = 0, ""
		if g != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, g, want[i])
		}
	}
}

// TestRetrieveModel: GET /v1/models/{id} answers the served model's object,
// byte for byte as its entry in the list, and 404 model_not_found for any
// other id (the OpenAI SDKs' models.retrieve).
func TestRetrieveModel(t *testing.T) {
	ts := startServer(t, newFake(), Config{}, nil)
	_, list := do(t, ts, http.MethodGet, "/v1/models", "")
	var all struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(list, &all); err != nil || len(all.Data) != 1 {
		t.Fatalf("list %s: %v", list, err)
	}
	resp, body := do(t, ts, http.MethodGet, "/v1/models/tiny", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != string(all.Data[0]) {
		t.Fatalf("GET /v1/models/tiny: %d %s, want %s", resp.StatusCode, body, all.Data[0])
	}
	for _, path := range []string{"/v1/models/other", "/v1/models/org/tiny"} {
		resp, body = do(t, ts, http.MethodGet, path, "")
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"model_not_found"`) {
			t.Errorf("GET %s: %d %s, want 404 model_not_found", path, resp.StatusCode, body)
		}
	}
}
