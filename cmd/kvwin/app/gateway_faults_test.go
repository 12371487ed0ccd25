package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Gateway end-to-end tests against misbehaving backends: real kvwin nodes
// and a gateway on 127.0.0.1, with a proxy in front of one node that can be
// told to hang its generations while answering everything else.

// hangingProxy forwards every request to a kvwin node; while hang is set,
// it accepts POST /completion and never answers (until the client leaves),
// while /health, /props, /tokenize and the rest still answer.
type hangingProxy struct {
	srv  *httptest.Server
	hang atomic.Bool
	// accepts: a hung generation first answers its status and a
	// keep-alive, as a node that queued the request does, and only then
	// hangs (a node whose prefill never ends).
	accepts     atomic.Bool
	completions atomic.Int64 // POST /completion received
}

func startHangingProxy(t *testing.T, node *app.App) *hangingProxy {
	t.Helper()
	target, err := url.Parse(node.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := &hangingProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // stream SSE as it comes
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/completion" {
			p.completions.Add(1)
			if p.hang.Load() {
				_, _ = io.Copy(io.Discard, r.Body)
				if p.accepts.Load() {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, ": keep-alive\n")
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// name is the proxy's backend name in X-Kvwin-Backend (its host:port).
func (p *hangingProxy) name() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// testFirstToken is the gateways' first-token timeout here: far above the
// tiny model's first token on a short prompt, far below the default.
const testFirstToken = 4 * time.Second

// A backend that answers everything but generations: its turns come back
// from the other node, under prefix and round-robin routing alike, and it
// gets no more turns once it timed out.
func TestHungBackendsTurnsComeBackFromTheOtherNode(t *testing.T) {
	for _, policy := range []string{"prefix", "round-robin"} {
		t.Run(policy, func(t *testing.T) {
			behind := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 2048 })
			good := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 2048 })
			p := startHangingProxy(t, behind)
			gw := apptest.Start(t, func(f *app.Config) {
				f.Backends = []string{"llamaserver=" + p.srv.URL, "llamaserver=" + good.URL()}
				f.Route, f.BackendFirstToken = policy, testFirstToken
			})
			goodName := strings.TrimPrefix(good.URL(), "http://")

			// Find a conversation the gateway sends to the proxy while it
			// still answers.
			var conv []map[string]string
			for i := 0; conv == nil; i++ {
				if i == 20 {
					t.Fatal("no conversation went to the proxied node in 20")
				}
				c := apptest.Msgs("system", apptest.Words(40+i, 300), "user", apptest.Words(60+i, 100))
				tr := apptest.Post(t, gw, map[string]any{"messages": c, "max_tokens": 4, "temperature": 0})
				if tr.Status != 200 {
					t.Fatalf("status %d before the hang: %s", tr.Status, tr.Body)
				}
				if tr.Header.Get("X-Kvwin-Backend") == p.name() {
					conv = append(c, map[string]string{"role": "assistant", "content": tr.Content})
				}
			}
			p.hang.Store(true)
			before := p.completions.Load()
			for turn := range 4 {
				conv = append(conv, map[string]string{"role": "user", "content": apptest.Words(80+turn, 60)})
				tr := apptest.Post(t, gw, map[string]any{"messages": conv, "max_tokens": 4, "temperature": 0, "stream": turn%2 == 0})
				if tr.Status != 200 || tr.Header.Get("X-Kvwin-Backend") != goodName {
					t.Fatalf("turn %d with the proxied node hanging: status %d from %q (want 200 from %s): %s",
						turn, tr.Status, tr.Header.Get("X-Kvwin-Backend"), goodName, tr.Body)
				}
				conv = append(conv, map[string]string{"role": "assistant", "content": tr.Content})
			}
			// Exactly one turn was tried on the hung backend (and retried
			// on the good one); after its timeout it is out, its /health
			// answers notwithstanding.
			if got := p.completions.Load() - before; got < 1 {
				t.Fatalf("the hung backend got %d generations: the test did not exercise the timeout", got)
			}
			for _, st := range gw.Router().Status() {
				if st.Name == p.name() && st.Healthy {
					t.Fatalf("the hung backend is healthy again: %+v", st)
				}
			}
		})
	}
}

// With no other backend, a turn the only backend does not answer in time
// is 504 backend_timeout, streamed or not, never a hang.
func TestHungOnlyBackendIs504(t *testing.T) {
	behind := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	p := startHangingProxy(t, behind)
	p.hang.Store(true)
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{"llamaserver=" + p.srv.URL}
		f.BackendFirstToken = testFirstToken
	})
	tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", "anyone?"), "max_tokens": 4, "stream": true})
	if tr.Status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504: %s", tr.Status, tr.Body)
	}
	if e := apptest.DecodeError(t, tr.Body); e.Error.Code != "backend_timeout" {
		t.Fatalf("code %q: %s", e.Error.Code, tr.Body)
	}
	if p.completions.Load() != 1 {
		t.Fatalf("the backend got %d generations, want 1", p.completions.Load())
	}
}

// A backend that stops sending mid-stream: the client already has a 200
// and text, so the stream ends with an error event.
func TestBackendSilentMidStreamEndsTheStreamWithAnError(t *testing.T) {
	behind := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 4096 })
	target, _ := url.Parse(behind.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path == "/completion" {
			resp.Body = &stallAfterFirstRead{ReadCloser: resp.Body, done: resp.Request.Context().Done()}
		}
		return nil
	}
	stall := httptest.NewServer(rp)
	// Closed after the gateway (cleanups run last first): Close waits for
	// every request, and the gateway's journal stream lasts until it stops.
	t.Cleanup(stall.Close)
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{"llamaserver=" + stall.URL}
		f.BackendIdle, f.BackendFirstToken = 500*time.Millisecond, 10*time.Second
	})
	b, _ := json.Marshal(map[string]any{"messages": apptest.Msgs("user", "go on"), "max_tokens": 2000, "stream": true, "ignore_eos": true})
	resp, err := http.Post(gw.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if last := apptest.LastLine(sc); !strings.Contains(last, `"error"`) || !strings.Contains(last, "sent nothing") {
		t.Fatalf("a stream whose backend went silent ended with %q, want an error event", last)
	}
}

// stallAfterFirstRead passes reads through up to the first that holds a
// chunk ("data:"; before it a node sends keep-alives), then blocks until
// done: a server that hangs after its first chunk.
type stallAfterFirstRead struct {
	io.ReadCloser
	done <-chan struct{}
	read bool
}

func (s *stallAfterFirstRead) Read(p []byte) (int, error) {
	if s.read {
		<-s.done
		return 0, io.ErrUnexpectedEOF
	}
	n, err := s.ReadCloser.Read(p)
	s.read = bytes.Contains(p[:n], []byte("data:"))
	return n, err
}

// A node restarted with fewer slots: every later turn is 200, the
// conversation pinned to the vanished slot included.
func TestNodeRestartedWithFewerSlotsServesEveryLaterTurn(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 2048 })
	addr := node.Addr()
	gw := apptest.Start(t, func(f *app.Config) { f.Backends = []string{"llamaserver=" + node.URL()} })
	var convs [][]map[string]string
	for i := range 2 {
		c := apptest.Msgs("system", apptest.Words(100+i, 400), "user", apptest.Words(110+i, 100))
		for range 2 { // the second turn is a continuation, pinned to its slot
			tr := apptest.Post(t, gw, map[string]any{"messages": c, "max_tokens": 4, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("before the restart: %d %s", tr.Status, tr.Body)
			}
			c = append(c, map[string]string{"role": "assistant", "content": tr.Content}, map[string]string{"role": "user", "content": apptest.Words(120+len(c), 40)})
		}
		convs = append(convs, c)
	}
	node.Abort()
	apptest.Start(t, func(f *app.Config) { f.Addr, f.Slots, f.Ctx = addr, 1, 2048 })
	for turn := range 3 {
		for i, c := range convs {
			tr := apptest.Post(t, gw, map[string]any{"messages": c, "max_tokens": 4, "temperature": 0})
			if tr.Status != 200 {
				t.Fatalf("conversation %d turn %d after the restart with one slot: %d %s", i, turn, tr.Status, tr.Body)
			}
			convs[i] = append(c, map[string]string{"role": "assistant", "content": tr.Content}, map[string]string{"role": "user", "content": apptest.Words(130+turn, 40)})
		}
	}
	// The gateway plans for the node as it is now (re-read when it refused
	// a pin, or at its next health check).
	deadline := time.After(3 * time.Minute)
	for {
		changed := gw.Router().Changed()
		if st := gw.Router().Status()[0]; st.Slots == 1 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the gateway still plans for %d slots", gw.Router().Status()[0].Slots)
		}
	}
}

// The gateway's /health is 503 while every backend is down, 200 once one
// is back.
func TestGatewayHealthFollowsItsBackends(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 1, 2048 })
	addr := node.Addr()
	gw := apptest.Start(t, func(f *app.Config) { f.Backends = []string{"llamaserver=" + node.URL()} })
	health := func() int {
		resp, err := http.Get(gw.URL() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			apptest.DecodeError(t, body)
		}
		return resp.StatusCode
	}
	// waitHealth waits, on the router's health changes, for /health to say want.
	waitHealth := func(want int) {
		t.Helper()
		deadline := time.After(3 * time.Minute)
		for {
			changed := gw.Router().Changed()
			if health() == want {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("/health never said %d", want)
			}
		}
	}
	waitHealth(200)
	node.Abort()
	waitHealth(503)
	apptest.Start(t, func(f *app.Config) { f.Addr, f.Slots, f.Ctx = addr, 1, 2048 })
	waitHealth(200)
	if tr := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", "back?"), "max_tokens": 4}); tr.Status != 200 {
		t.Fatalf("turn after the node returned: %d %s", tr.Status, tr.Body)
	}
}
