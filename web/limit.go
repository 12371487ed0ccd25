package web

import (
	"fmt"
	"sync"

	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// Per-tenant limits (--tenant-max-concurrent, --tenant-max-queued): one
// tenant cannot take every slot and queue place of a shared server. At most
// MaxConcurrent generations of a tenant run at once; up to MaxQueued more
// wait for one of them to end, watching their client's context; beyond
// that, 429 at once. Off (no limit) when MaxConcurrent is 0.

// generationPaths are the routes that run a generation (or an embedding):
// the ones the tenant limits count.
var generationPaths = map[string]bool{
	"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true,
	"/v1/messages": true,
	"/completion":  true,
	"/api/chat":    true, "/api/generate": true, "/api/embed": true, "/api/embeddings": true,
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

// limitTenant admits a generation request under its tenant's limits, or
// answers 429. It blocks while the request waits its turn.
func (s *Server) limitTenant(c *gin.Context) {
	if s.limits == nil || !generationPaths[c.Request.URL.Path] {
		return
	}
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
			return
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
			return
		}
	}
	defer func() { <-t.run }()
	c.Next()
}
