package web

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"kvwin/engine/wire"
)

// TestRequestID: every answer names its request in X-Request-Id, and the
// access line carries the same id. A caller's id is kept only from a
// trusted caller (the admin key, or anyone when no key is configured) and
// only if well-formed; otherwise a new one is made. Health probes and
// rejected requests get one too.
func TestRequestID(t *testing.T) {
	tests := []struct {
		name       string
		keyed      bool
		key, path  string
		sent       string
		wantStatus int
		kept       bool
	}{
		{"no keys: the caller's id", false, "", chatPath, "caller-1", 200, true},
		{"no keys: malformed", false, "", chatPath, "a b", 200, false},
		{"no keys: too long", false, "", chatPath, strings.Repeat("x", 65), 200, false},
		{"admin key: kept", true, adminKey, chatPath, "gw:abc.1", 200, true},
		{"tenant key: replaced", true, aliceKey, chatPath, "forged", 200, false},
		{"no key: replaced, 401", true, "", chatPath, "forged", 401, false},
		{"wrong key: replaced, 401", true, "not-a-key-0123456789", chatPath, "forged", 401, false},
		{"health probe without a key: replaced", true, "", "/health", "probe-1", 200, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(wire.NewLogHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
			cfg := Config{Registry: fakeRegistry{}}
			if tt.keyed {
				cfg = keyedConfig(nil)
			}
			ts := startServer(t, f, cfg, log)
			method, body := "POST", `{`+hi+`}`
			if tt.path == "/health" {
				method, body = "GET", ""
			}
			resp, got := send(t, ts, method, tt.path, body, jsonWith(tt.key, wire.HeaderRequestID, tt.sent))
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, got)
			}
			id := resp.Header.Get(wire.HeaderRequestID)
			if !wire.ValidRequestID(id) || (id == tt.sent) != tt.kept {
				t.Fatalf("sent %q, got %q: kept %v, want kept %v", tt.sent, id, id == tt.sent, tt.kept)
			}
			ts.Close() // the access line is written before the handler returns
			var line map[string]any
			if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
				t.Fatalf("access line %q: %v", buf.String(), err)
			}
			if line[wire.RequestIDKey] != id || line["path"] != tt.path {
				t.Fatalf("access line %v: want request_id %q, path %s", line, id, tt.path)
			}
		})
	}
}
