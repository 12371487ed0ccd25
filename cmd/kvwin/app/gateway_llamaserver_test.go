package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// Gateways in front of llama-servers of both builds kvwin was tried
// against (llamaFake: their response shapes and slot rules).

var llamaBuilds = []string{"b-2025-06", "b-2026-08"}

// startLlamaGateway starts a gateway over the fakes, logging JSON to log.
func startLlamaGateway(t *testing.T, log *logSink, fakes ...*llamaFake) *app.App {
	t.Helper()
	return apptest.Start(t, func(f *app.Config) {
		for _, lf := range fakes {
			f.Backends = append(f.Backends, "llamaserver="+lf.URL())
		}
		f.Route = "prefix"
		if log != nil {
			f.LogFormat, f.LogOutput = app.LogJSON, log
		}
	})
}

// postTo posts body to a's path and returns the answer.
func postTo(t *testing.T, a *app.App, path string, body any) (*http.Response, []byte) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(a.URL()+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// TestGatewayReportsTheServersReuse: a second identical request reports
// the tokens the server says it reused, exactly, through the OpenAI and
// the Ollama routes, whichever build's shape the server answers in; the
// gateway never finds the counts impossible.
func TestGatewayReportsTheServersReuse(t *testing.T) {
	msgs := apptest.Msgs("system", "You are terse. "+apptest.Words(1, 400), "user", "Say hello. "+apptest.Words(2, 300))
	for _, build := range llamaBuilds {
		for _, route := range []string{"/v1/chat/completions", "/api/chat"} {
			t.Run(build+route, func(t *testing.T) {
				log := newLogSink()
				lf := startLlamaFake(t, build, 2)
				gw := startLlamaGateway(t, log, lf)
				body := map[string]any{"messages": msgs, "max_tokens": 4, "stream": false}
				if route == "/api/chat" {
					body = map[string]any{"model": "tiny", "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 4}}
				}
				for turn := 1; turn <= 2; turn++ {
					resp, out := postTo(t, gw, route, body)
					if resp.StatusCode != 200 {
						t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, out)
					}
					server := lf.lastReused()
					cached, _ := strconv.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
					if cached != server || turn == 2 && server < 700 {
						t.Fatalf("turn %d: X-Kvwin-Cached-Tokens %d, the server reused %d", turn, cached, server)
					}
					if route == "/v1/chat/completions" {
						var r apptest.ChatReply
						if err := json.Unmarshal(out, &r); err != nil {
							t.Fatal(err)
						}
						if got := r.Usage.PromptTokensDetails.CachedTokens; got == nil || *got != server {
							t.Fatalf("turn %d: usage cached_tokens %v, the server reused %d", turn, got, server)
						}
					}
				}
				if bad := log.find(map[string]any{"msg": "backend reported usage that cannot be true; replaced by the gateway's own count"}); len(bad) > 0 {
					t.Errorf("the gateway found the server's counts impossible: %v", bad)
				}
			})
		}
	}
}

// TestGatewayCutsAServerIgnoringMaxTokens: a server that generates past
// n_predict is cut at max_tokens, counted by the gateway.
func TestGatewayCutsAServerIgnoringMaxTokens(t *testing.T) {
	lf := startLlamaFake(t, "b-2026-08", 2)
	lf.ignoreNPredict = true
	gw := startLlamaGateway(t, nil, lf)
	for _, stream := range []bool{false, true} {
		tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", "go on"), "max_tokens": 16, "stream": stream})
		if tr.Status != 200 || len(tr.Content) > 16 || len(tr.Content) == 0 {
			t.Fatalf("stream=%v: status %d, %d bytes of text for max_tokens 16: %q", stream, tr.Status, len(tr.Content), tr.Content)
		}
		if !stream {
			var r apptest.ChatReply
			if err := json.Unmarshal(tr.Body, &r); err != nil {
				t.Fatal(err)
			}
			if r.Usage.CompletionTokens != 16 || r.Choices[0].FinishReason != "length" {
				t.Fatalf("completion_tokens %d, finish %q; want 16, length", r.Usage.CompletionTokens, r.Choices[0].FinishReason)
			}
		}
	}
}

// TestGatewayErrorsHideTheBackend: what a failing backend said, and its
// address, reach the gateway's log under the request's id, not the client.
func TestGatewayErrorsHideTheBackend(t *testing.T) {
	log := newLogSink()
	lf := startLlamaFake(t, "b-2026-08", 2)
	lf.fail = "<html>secret internal page, see http://10.9.8.7:1234/admin</html>"
	gw := startLlamaGateway(t, log, lf)
	for _, route := range []string{"/v1/chat/completions", "/api/chat"} {
		resp, out := postTo(t, gw, route, map[string]any{"model": "tiny", "messages": apptest.Msgs("user", "hi"), "stream": false})
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d %s, want 503", route, resp.StatusCode, out)
		}
		host := strings.TrimPrefix(lf.URL(), "http://")
		for _, leak := range []string{host, "secret", "10.9.8.7", "html"} {
			if strings.Contains(string(out), leak) {
				t.Errorf("%s: the client's error says %q: %s", route, leak, out)
			}
		}
		id := resp.Header.Get("X-Request-Id")
		found := false
		for _, l := range log.find(map[string]any{"request_id": id, "msg": "http request"}) {
			e, _ := l["error"].(string)
			found = found || strings.Contains(e, "secret internal page") && strings.Contains(e, host)
		}
		if !found {
			t.Errorf("%s: no log line of request %s has the backend's words and address", route, id)
		}
	}
}

// TestGatewaySlots: /slots through a gateway lists every backend's slots
// (both builds, the older with --slots); a backend without /slots is
// routed to all the same, and /kvwin/v1/status says its residency is
// learned, not read.
func TestGatewaySlots(t *testing.T) {
	older, newer := startLlamaFake(t, "b-2025-06", 2), startLlamaFake(t, "b-2026-08", 3)
	older.slotsOn = true
	gw := startLlamaGateway(t, nil, older, newer)
	for turn := range 3 {
		if tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", apptest.Words(turn, 200)), "max_tokens": 4}); tr.Status != 200 {
			t.Fatalf("turn %d: %d %s", turn, tr.Status, tr.Body)
		}
	}
	resp, err := http.Get(gw.URL() + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	var slots []struct {
		ID      int `json:"id"`
		Tokens  int `json:"n_tokens"`
		Context int `json:"n_ctx"`
	}
	err = json.NewDecoder(resp.Body).Decode(&slots)
	resp.Body.Close()
	if err != nil || len(slots) != 5 {
		t.Fatalf("/slots: %v, %d slots, want 2 + 3: %+v", err, len(slots), slots)
	}
	held := 0
	for i, s := range slots {
		if s.ID != i || s.Context != 4096 {
			t.Errorf("slot %d: %+v", i, s)
		}
		held += s.Tokens
	}
	if held == 0 {
		t.Errorf("no slot says it holds tokens after three turns: %+v", slots)
	}

	off := startLlamaFake(t, "b-2025-06", 2)
	gw2 := startLlamaGateway(t, nil, off)
	if tr := apptest.Post(t, gw2, map[string]any{"messages": apptest.Msgs("user", "hi"), "max_tokens": 4}); tr.Status != 200 {
		t.Fatalf("a backend without /slots: %d %s", tr.Status, tr.Body)
	}
	off.waitSlotsRead(t, 0)
	resp, err = http.Get(gw2.URL() + "/kvwin/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var st app.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Backends) != 1 {
		t.Fatalf("status: %v %+v", err, st)
	}
	if b := st.Backends[0]; b.Residency != "learned" || !strings.Contains(b.ResidencyNote, "learned, not read") {
		t.Errorf("status of a backend without /slots: residency %q, note %q", b.Residency, b.ResidencyNote)
	}
}

// TestGatewayCorrectsARestartedBackend: a backend restarted between turns
// (its KV empty, the gateway believing its slots full) is corrected by the
// first turn that reuses less than believed, which has its /slots read:
// the other conversation's next turn is routed predicting nothing cached
// there, as the server then reuses nothing.
func TestGatewayCorrectsARestartedBackend(t *testing.T) {
	lf := startLlamaFake(t, "b-2026-08", 2)
	gw := startLlamaGateway(t, nil, lf)
	x := apptest.Msgs("system", "X "+apptest.Words(10, 600), "user", "first")
	y := apptest.Msgs("system", "Y "+apptest.Words(11, 600), "user", "first")
	for _, msgs := range [][]map[string]string{x, y, x, y} {
		if tr := apptest.Post(t, gw, map[string]any{"messages": msgs, "max_tokens": 4}); tr.Status != 200 {
			t.Fatalf("%d %s", tr.Status, tr.Body)
		}
	}
	if before := lastDecision(t, gw); before.PredictedCached < 500 {
		t.Fatalf("before the restart y's turn predicted %d cached", before.PredictedCached)
	}
	lf.restart()
	read := lf.slotsRead()
	if tr := apptest.Post(t, gw, map[string]any{"messages": x, "max_tokens": 4}); tr.Status != 200 || tr.Cached != 0 || lf.lastReused() != 0 {
		t.Fatalf("x after the restart: %d, %d cached (the server reused %d)", tr.Status, tr.Cached, lf.lastReused())
	}
	// The turn that reused less than the gateway believed has the slots
	// read at the next check, not at the next poll (5 s).
	lf.waitSlotsRead(t, read)
	tr := apptest.Post(t, gw, map[string]any{"messages": y, "max_tokens": 4})
	if d := lastDecision(t, gw); tr.Status != 200 || d.PredictedCached != 0 {
		t.Fatalf("y after the correction: %d, routed predicting %d cached (the server reused %d)", tr.Status, d.PredictedCached, lf.lastReused())
	}
}

// lastDecision is the gateway's latest routing decision.
func lastDecision(t *testing.T, gw *app.App) struct {
	PredictedCached int `json:"predicted_cached"`
} {
	t.Helper()
	resp, err := http.Get(gw.URL() + "/kvwin/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Routing []struct {
			PredictedCached int `json:"predicted_cached"`
		} `json:"routing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Routing) == 0 {
		t.Fatalf("status: %v, %d decisions", err, len(st.Routing))
	}
	return st.Routing[len(st.Routing)-1]
}
