package pgtest

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards a loopback port to the test server. Down cuts every
// connection and refuses new ones (the database going away); Up listens on
// the same port again (the database back). It stops with its test. It
// counts the round trips its clients make (RoundTrips).
type Proxy struct {
	t      testing.TB
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
	ready  atomic.Int64 // ReadyForQuery messages the server sent
}

// RoundTrips is how many times the server has said it is ready for the
// next query (ReadyForQuery): once per statement or transaction step a
// client waited on, and once per connection established. A test takes the
// difference across the calls it counts.
func (p *Proxy) RoundTrips() int64 { return p.ready.Load() }

// NewProxy starts a proxy to target (host:port), up.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, addr: "127.0.0.1:0", target: target}
	p.Up()
	p.addr = p.ln.Addr().String()
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// Addr is the proxy's host:port, the same across Down and Up.
func (p *Proxy) Addr() string { return p.addr }

// Up accepts connections again.
func (p *Proxy) Up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(c, io.TeeReader(u, &messages{ready: &p.ready}))
				_ = c.Close()
			}()
		}
	}()
}

// Down closes the listener and every connection through it.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// messages splits the server's side of a connection into its messages (a
// type byte and a big-endian length that counts itself; every message the
// server sends is typed, and the tests' URLs ask for no TLS) and counts
// ReadyForQuery ('Z').
type messages struct {
	ready *atomic.Int64
	head  []byte // the current message's header, while incomplete
	left  int    // bytes of the current message's body still to come
}

// Write consumes p; it never fails.
func (m *messages) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if m.left > 0 {
			k := min(m.left, len(p))
			m.left, p = m.left-k, p[k:]
			continue
		}
		k := min(5-len(m.head), len(p))
		m.head, p = append(m.head, p[:k]...), p[k:]
		if len(m.head) < 5 {
			continue
		}
		if m.head[0] == 'Z' {
			m.ready.Add(1)
		}
		m.left = int(binary.BigEndian.Uint32(m.head[1:])) - 4
		m.head = m.head[:0]
	}
	return n, nil
}

// ProxiedSchema is Schema reached through a Proxy as well: it returns the
// schema's DSN, the same DSN through the proxy, and the proxy.
func ProxiedSchema(t testing.TB) (dsn, proxied string, p *Proxy) {
	t.Helper()
	dsn = Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p = NewProxy(t, u.Host)
	u.Host = p.Addr()
	return dsn, u.String(), p
}
