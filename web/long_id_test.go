package web

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"kvwin/web/core"
)

// A 200,000-byte id is answered and logged in bounded space: GET and
// DELETE /v1/responses/{id} are a 404 quoting at most the id's first 128
// bytes and its length, and the access log line quotes the path's first
// MaxLoggedPathBytes bytes and its length.
func TestALongIDIsNotEchoedWhole(t *testing.T) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	s, err := New(Config{Responses: openMemory(t)}, newFake(), log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	id := strings.Repeat("é", 100_000) // 200,000 bytes, cut inside no character
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		resp, b := do(t, ts, method, "/v1/responses/"+id, "")
		e := wantError(t, resp, b, 404, core.TypeInvalidRequest, core.CodeResponseNotFound)
		if len(b) > 1000 || !strings.Contains(e.Message, "(200000 bytes)") {
			t.Errorf("%s: a %d-byte answer: %.300s", method, len(b), b)
		}
	}
	ts.Close() // waits for the handlers, and so for their log lines
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for _, raw := range lines {
		var l struct {
			Path      string
			PathBytes int `json:"path_bytes"`
		}
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("log line %.300q: %v", raw, err)
		}
		if len(raw) > 2000 || len(l.Path) > MaxLoggedPathBytes+len("…") || l.PathBytes != len("/v1/responses/")+len(id) {
			t.Errorf("a %d-byte log line, path of %d bytes, path_bytes %d: %.400s", len(raw), len(l.Path), l.PathBytes, raw)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2: %.1000s", len(lines), buf.String())
	}
}
