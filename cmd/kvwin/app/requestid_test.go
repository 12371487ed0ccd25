package app_test

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/wire"
)

// logSink captures a server's JSON log lines. Safe for concurrent use: the
// server writes from its handlers' goroutines while the test reads.
type logSink struct {
	mu     sync.Mutex
	lines  []map[string]any
	bad    []string // lines that were not one JSON object
	notify chan struct{}
}

func newLogSink() *logSink { return &logSink{notify: make(chan struct{}, 1)} }

// Write takes one line per call, as slog's handlers write.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	for _, line := range bytes.Split(bytes.TrimSpace(p), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			s.bad = append(s.bad, string(line))
			continue
		}
		s.lines = append(s.lines, m)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// find returns the lines matching every key=value of want.
func (s *logSink) find(want map[string]any) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range s.lines {
		ok := true
		for k, v := range want {
			ok = ok && l[k] == v
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// wait returns the first line matching want once it is written: the access
// line of a request is written after its answer has gone out.
func (s *logSink) wait(t *testing.T, what string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		if got := s.find(want); len(got) > 0 {
			return got[0]
		}
		select {
		case <-s.notify:
		case <-deadline:
			t.Fatalf("%s: no log line with %v", what, want)
		}
	}
}

// A turn through a gateway is one request id on both machines: the
// gateway's access line, the id it returns as X-Request-Id, and the node's
// access line for the generation the gateway sent it. A trusted caller's
// well-formed id is kept; a tenant's or a malformed one is replaced.
func TestRequestIDFollowsTurnFromGatewayToNode(t *testing.T) {
	nodeLog, gwLog := newLogSink(), newLogSink()
	node := apptest.Start(t, func(f *app.Config) {
		f.Slots, f.AdminKey = 2, nodeAdminKey
		f.LogFormat, f.LogOutput = app.LogJSON, nodeLog
	})
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends, f.BackendKey = []string{"llamaserver=" + node.URL()}, nodeAdminKey
		f.APIKeys, f.AdminKey = []string{"alice=" + aliceKey}, adminKey
		f.LogFormat, f.LogOutput = app.LogJSON, gwLog
	})

	for _, tc := range []struct {
		name, key, sent string
		kept            bool
	}{
		{"tenant's id is replaced", aliceKey, "forged-by-alice", false},
		{"no id: one is made", aliceKey, "", false},
		{"admin's id is kept", adminKey, "upstream-proxy:42", true},
		{"admin's malformed id is replaced", adminKey, "two words", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := bearer(tc.key)
			if tc.sent != "" {
				h[wire.HeaderRequestID] = tc.sent
			}
			turn := apptest.PostWith(t, gw.URL(), h, map[string]any{
				"model": "kvwin-tiny", "max_tokens": 4, "temperature": 0,
				"messages": apptest.Msgs("user", "trace me "+tc.name),
			})
			if turn.Status != 200 {
				t.Fatalf("status %d: %s", turn.Status, turn.Body)
			}
			id := turn.Header.Get(wire.HeaderRequestID)
			if !wire.ValidRequestID(id) {
				t.Fatalf("X-Request-Id %q is not a valid id", id)
			}
			if kept := id == tc.sent; kept != tc.kept {
				t.Fatalf("sent %q, got back %q: kept %v, want %v", tc.sent, id, kept, tc.kept)
			}
			gwLine := gwLog.wait(t, "gateway", map[string]any{wire.RequestIDKey: id, "msg": "http request"})
			if gwLine["path"] != "/v1/chat/completions" || gwLine["status"] != 200.0 {
				t.Fatalf("gateway's line for %s: %v", id, gwLine)
			}
			nodeLine := nodeLog.wait(t, "node", map[string]any{wire.RequestIDKey: id, "msg": "http request", "path": "/completion"})
			if nodeLine["method"] != "POST" || nodeLine["status"] != 200.0 {
				t.Fatalf("node's line for %s: %v", id, nodeLine)
			}
			if tc.sent != "" && !tc.kept {
				for name, sink := range map[string]*logSink{"gateway": gwLog, "node": nodeLog} {
					if got := sink.find(map[string]any{wire.RequestIDKey: tc.sent}); len(got) > 0 {
						t.Fatalf("the %s logged the caller's untrusted id %q: %v", name, tc.sent, got)
					}
				}
			}
		})
	}
	for name, sink := range map[string]*logSink{"gateway": gwLog, "node": nodeLog} {
		sink.mu.Lock()
		if len(sink.bad) > 0 {
			t.Errorf("the %s wrote lines that are not JSON: %q", name, sink.bad)
		}
		sink.mu.Unlock()
	}
}
