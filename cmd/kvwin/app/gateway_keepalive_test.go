package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/wire"
)

// A gateway's client gets its stream opened when a backend accepts the
// turn; the gateway still fails over after that, before the first token:
// a node that accepted and then never sent a token is retried on the
// other, the client seeing only keep-alives, and with no other node left
// the timeout is the stream's in-stream error, not a 504.
func TestGatewayFailsOverAfterABackendAccepted(t *testing.T) {
	behind := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	good := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	p := startHangingProxy(t, behind)
	p.hang.Store(true)
	p.accepts.Store(true)
	body := `{"messages":[{"role":"user","content":"anyone?"}],"max_tokens":4,"stream":true}`

	alone := apptest.Start(t, func(f *app.Config) {
		f.Backends, f.BackendFirstToken = []string{"llamaserver=" + p.srv.URL}, testFirstToken
	})
	resp := postStream(t, alone.URL()+"/v1/chat/completions", body)
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(got), ": keep-alive\n") ||
		!strings.Contains(string(got), `data: {"error":`) || !strings.Contains(string(got), `"code":"backend_timeout"`) {
		t.Fatalf("only the accepting, hung backend: status %d, stream %q: want 200, the opening and an in-stream backend_timeout", resp.StatusCode, got)
	}

	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{"llamaserver=" + p.srv.URL, "llamaserver=" + good.URL()}
		f.Route, f.BackendFirstToken = "round-robin", testFirstToken
	})
	goodName := strings.TrimPrefix(good.URL(), "http://")
	before := p.completions.Load()
	for turn := 0; p.completions.Load() == before; turn++ {
		if turn == 4 {
			t.Fatal("no turn went to the hung backend in 4")
		}
		resp := postStream(t, gw.URL()+"/v1/chat/completions", body)
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "data: [DONE]") || strings.Contains(string(got), `"error"`) {
			t.Fatalf("turn %d: status %d, stream %q", turn, resp.StatusCode, got)
		}
		if g := wire.GenerationOf(resp); g.Backend != goodName {
			t.Fatalf("turn %d served by %q, want %s", turn, g.Backend, goodName)
		}
	}
}
