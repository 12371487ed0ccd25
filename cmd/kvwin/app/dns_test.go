package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/router"
)

// fakeResolver answers each name with the addresses a test sets: none is
// "no such name"; a name set failing gets a temporary error instead.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	failing map[string]bool
	lookups atomic.Int64
}

// fail makes the lookups of name fail with a temporary error (a DNS
// server that does not answer), not "no such name".
func (r *fakeResolver) fail(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing == nil {
		r.failing = map[string]bool{}
	}
	r.failing[name] = true
}

func (r *fakeResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[name] = addrs
}

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.lookups.Add(1)
	if r.failing[host] {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	if a := r.answers[host]; len(a) > 0 {
		return slices.Clone(a), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var _ app.Resolver = (*fakeResolver)(nil)

// gatedProxy serves a node at another address; once armed, it holds the
// next POST /completion until opened, so a turn is in flight (sent, its
// answer awaited) for as long as the test wants.
type gatedProxy struct {
	proxy       *httputil.ReverseProxy
	armed       atomic.Bool
	started     chan struct{} // closed when the held request arrived
	gate        chan struct{} // close to let it through
	completions atomic.Int64
}

func newGatedProxy(t *testing.T, ln net.Listener, target string) *gatedProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &gatedProxy{started: make(chan struct{}), gate: make(chan struct{})}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = u.Host },
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *gatedProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/completion" {
		p.completions.Add(1)
		if p.armed.CompareAndSwap(true, false) {
			close(p.started)
			select {
			case <-p.gate:
			case <-r.Context().Done():
				return
			}
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// postTurn sends one chat turn to base and returns its status, backend and
// body; it may run on any goroutine.
func postTurn(base, text string) (int, string, []byte, error) {
	body, _ := json.Marshal(map[string]any{"model": "kvwin-tiny", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Kvwin-Backend"), data, err
}

// waitFleet waits, on the router's change signal, until cond holds of its
// backends' status.
func waitFleet(t *testing.T, gw *app.App, what string, cond func(map[string]router.BackendStatus) bool) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := gw.Router().Changed()
		st := map[string]router.BackendStatus{}
		for _, s := range gw.Router().Status() {
			st[s.Name] = s
		}
		if cond(st) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: not within 30s; fleet %+v", what, st)
		}
	}
}

// TestBackendsFoundByDNS: --backend llamaserver=dns://NAME:PORT over nodes
// at 127.0.0.2 and 127.0.0.3 (the first through a proxy that can hold a
// turn in flight). An address that appears joins, one that vanishes
// drains: its turn in flight finishes there, no new turn goes there, and it
// is removed once it finished; it may come back. No restart.
func TestBackendsFoundByDNS(t *testing.T) {
	ln2, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no loopback alias 127.0.0.2: %v", err)
	}
	port := ln2.Addr().(*net.TCPAddr).Port
	node2 := apptest.Start(t, func(f *app.Config) { f.Slots = 2 })
	proxy := newGatedProxy(t, ln2, node2.URL())
	apptest.Start(t, func(f *app.Config) { f.Slots, f.Addr = 2, fmt.Sprintf("127.0.0.3:%d", port) })
	at2, at3 := fmt.Sprintf("127.0.0.2:%d", port), fmt.Sprintf("127.0.0.3:%d", port)

	res := &fakeResolver{answers: map[string][]string{}}
	res.set("nodes.test", "127.0.0.2")
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends = []string{fmt.Sprintf("llamaserver=dns://nodes.test:%d", port)}
		f.Resolver, f.BackendResolveInterval = res, 50*time.Millisecond
	})
	waitFleet(t, gw, "the first address serves", func(st map[string]router.BackendStatus) bool {
		return len(st) == 1 && st[at2].Healthy
	})

	// A turn in flight on .2 when .2 vanishes and .3 appears.
	proxy.armed.Store(true)
	type answer struct {
		status  int
		backend string
		body    []byte
		err     error
	}
	inflight := make(chan answer, 1)
	go func() {
		s, b, body, err := postTurn(gw.URL(), "a turn that is in flight while its node leaves")
		inflight <- answer{s, b, body, err}
	}()
	<-proxy.started
	res.set("nodes.test", "127.0.0.3")
	waitFleet(t, gw, ".3 joins and .2 drains", func(st map[string]router.BackendStatus) bool {
		return st[at3].Healthy && !st[at3].Draining && st[at2].Draining && st[at2].InFlight == 1
	})
	for i := range 3 {
		s, b, body, err := postTurn(gw.URL(), fmt.Sprintf("a new turn %d while .2 drains", i))
		if err != nil || s != 200 || b != at3 {
			t.Fatalf("turn while .2 drains: %v %d on %q, want 200 on %s: %s", err, s, b, at3, body)
		}
	}
	close(proxy.gate)
	a := <-inflight
	if a.err != nil || a.status != 200 || a.backend != at2 {
		t.Fatalf("the turn in flight on .2: %v %d on %q, want 200 on %s: %s", a.err, a.status, a.backend, at2, a.body)
	}
	waitFleet(t, gw, ".2 removed once drained", func(st map[string]router.BackendStatus) bool {
		_, listed := st[at2]
		return !listed && len(st) == 1
	})
	if n := proxy.completions.Load(); n != 1 {
		t.Errorf(".2 got %d completions, want only the one in flight when it left", n)
	}

	// It comes back.
	res.set("nodes.test", "127.0.0.2", "127.0.0.3")
	waitFleet(t, gw, ".2 rejoins", func(st map[string]router.BackendStatus) bool {
		return len(st) == 2 && st[at2].Healthy && st[at3].Healthy
	})
	// A lookup that fails (not "no such name") keeps the fleet: wait for
	// two failed lookups, so at least one was acted on.
	res.fail("nodes.test")
	deadline := time.Now().Add(3 * time.Minute)
	for from := res.lookups.Load(); res.lookups.Load() < from+2; {
		if time.Now().After(deadline) {
			t.Fatal("the gateway stopped resolving its DNS backend")
		}
		time.Sleep(5 * time.Millisecond) // lookups run on the resolve interval; nothing signals them
	}
	if n := len(gw.Router().Status()); n != 2 {
		t.Fatalf("after failed lookups the fleet has %d backends, want 2", n)
	}
	if s, _, body, err := postTurn(gw.URL(), "after the name stopped resolving"); err != nil || s != 200 {
		t.Fatalf("a turn after the lookups failed: %v %d %s", err, s, body)
	}
}
