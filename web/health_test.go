package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"kvwin/engine"
	"kvwin/web/core"
)

// readyFake is a fake backend that says whether it can serve, as a router
// over remote backends does.
type readyFake struct {
	*fakeBackend
	down atomic.Bool
}

func (r *readyFake) Ready() error {
	if r.down.Load() {
		return fmt.Errorf("%w: no healthy backend (2 configured)", engine.ErrUnavailable)
	}
	return nil
}

// TestHealthSaysWhetherAnythingCanServe: /health is 503 while the backend
// is not ready or knows no model, 200 otherwise; /v1/models never lists an
// empty id.
func TestHealthSaysWhetherAnythingCanServe(t *testing.T) {
	tests := []struct {
		name       string
		down       bool
		model      string
		status     int
		models     int // entries in /v1/models
		wantInBody string
	}{
		{"ready", false, "tiny", 200, 1, `"ok"`},
		{"no healthy backend", true, "tiny", 503, 1, "no healthy backend"},
		{"no model known", false, "", 503, 0, "no model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.About.Model = tt.model
			b := &readyFake{fakeBackend: f}
			b.down.Store(tt.down)
			s, err := New(Config{}, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()

			resp, body := do(t, ts, http.MethodGet, "/health", "")
			if resp.StatusCode != tt.status {
				t.Fatalf("/health = %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status != 200 {
				e := wantError(t, resp, body, tt.status, core.TypeServer, core.CodeBackendUnavailable)
				if !strings.Contains(e.Message, tt.wantInBody) {
					t.Errorf("message %q does not say %q", e.Message, tt.wantInBody)
				}
				if resp.Header.Get("Retry-After") == "" {
					t.Errorf("503 without Retry-After")
				}
			}
			resp, body = do(t, ts, http.MethodGet, "/v1/models", "")
			var list struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 {
				t.Fatalf("/v1/models = %d %s", resp.StatusCode, body)
			}
			if len(list.Data) != tt.models {
				t.Fatalf("/v1/models lists %d models, want %d: %s", len(list.Data), tt.models, body)
			}
			for _, m := range list.Data {
				if m.ID == "" {
					t.Fatalf("empty model id: %s", body)
				}
			}
		})
	}
}
