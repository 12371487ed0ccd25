package web

import (
	"fmt"
	"sync"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// Per-tenant limits (--tenant-max-concurrent, --tenant-max-queued): one
// tenant cannot take every slot and queue place of a shared server. At most
// MaxConcurrent requests of a tenant work at once; up to MaxQueued more
// wait for one of them to end, watching their client's context; beyond
// that, 429 at once. Off (no limit) when MaxConcurrent is 0.
//
// A request counts from before its body is read: decoding a long
// conversation, cutting its window and tokenizing it take time and memory
// in proportion to the request (seconds and hundreds of megabytes at
// 80,000 items), so that work is admitted by the same limits as the
// generation it prepares. The server's own bound (Config.MaxWorking,
// --queue plus the slots) counts the same requests.

// workPaths are the routes whose requests do work in proportion to their
// body (decode, window, tokenize, count) and then generate, embed or
// count: the ones the tenant limits and the server's bound count.
var workPaths = map[string]bool{
	"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true,
	"/v1/responses": true,
	"/v1/messages":  true, "/v1/messages/count_tokens": true,
	"/completion": true, "/tokenize": true, "/detokenize": true,
	"/api/chat": true, "/api/generate": true, "/api/embed": true, "/api/embeddings": true,
}

// limiter holds each tenant's running and waiting counts. Tenants are few
// (one per key, plus those a gateway names), so entries are never removed.
type limiter struct {
	concurrent, maxQueued int

	mu      sync.Mutex
	tenants map[string]*tenantLoad

	// queued, if set (tests), hears of every request that starts waiting.
	queued chan<- string
}

// tenantLoad is one tenant's admission state: run holds a token per
// running request; waiting counts those waiting for one (under limiter.mu).
type tenantLoad struct {
	run     chan struct{}
	waiting int
}

// newLimiter returns nil (no limits) when concurrent is 0.
func newLimiter(concurrent, queued int) *limiter {
	if concurrent == 0 {
		return nil
	}
	return &limiter{concurrent: concurrent, maxQueued: queued, tenants: map[string]*tenantLoad{}}
}

func (l *limiter) load(tenant string) *tenantLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[tenant]
	if t == nil {
		t = &tenantLoad{run: make(chan struct{}, l.concurrent)}
		l.tenants[tenant] = t
	}
	return t
}

// limitWork admits a request of a work route under its tenant's limits and
// then the server's bound, or answers 429; the body is read only once it is
// admitted. It blocks while the request waits its tenant's turn; the
// server's bound never waits (the engine's queue is inside it).
func (s *Server) limitWork(c *gin.Context) {
	if c.Request.Method != "POST" || !workPaths[c.Request.URL.Path] {
		return
	}
	if s.limits != nil {
		release, ok := s.limitTenant(c)
		if !ok {
			return
		}
		defer release()
	}
	if s.working != nil {
		select {
		case s.working <- struct{}{}:
			defer func() { <-s.working }()
		default:
			s.reject(c, fmt.Errorf("%w: %d requests are being served or wait for a slot (--queue plus the slots)", engine.ErrQueueFull, cap(s.working)))
			return
		}
	}
	if s.admitted != nil {
		s.admitted <- c.Request.URL.Path
	}
	c.Next()
}

// limitTenant admits c under its tenant's limits, reporting whether it
// was and, if so, the function that gives its place back. It answers 429,
// or records the client gone, when not. It blocks while the request waits
// its turn.
func (s *Server) limitTenant(c *gin.Context) (release func(), ok bool) {
	tenant := s.turnOf(c).Tenant
	t := s.limits.load(tenant)
	select {
	case t.run <- struct{}{}:
	default:
		s.limits.mu.Lock()
		full := t.waiting >= s.limits.maxQueued
		if !full {
			t.waiting++
		}
		s.limits.mu.Unlock()
		if full {
			s.reject(c, fmt.Errorf("%w: tenant %q has %d requests running and %d waiting", core.ErrTenantLimit, tenant, s.limits.concurrent, s.limits.maxQueued))
			return nil, false
		}
		if s.limits.queued != nil {
			s.limits.queued <- tenant
		}
		ctx := c.Request.Context()
		admitted := false
		select {
		case t.run <- struct{}{}:
			admitted = true
		case <-ctx.Done():
		}
		s.limits.mu.Lock()
		t.waiting--
		s.limits.mu.Unlock()
		if !admitted {
			c.Abort()
			_ = c.Error(core.ErrClientGone)
			return nil, false
		}
	}
	return func() { <-t.run }, true
}
