package web

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine/queue"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// Priority classes, fair shares and tokens per minute
// (docs/tenants.md, "Priority and fair shares"):
//
//   - A key's line in the keys file may set its class (interactive, the
//     default, or batch), its weight (default 1) and its tokens per minute
//     (default none); KeyPolicy holds them.
//   - X-Kvwin-Priority may lower a request's class below its key's, never
//     raise it: asking for more keeps the key's class (so an operator can
//     demote a key without breaking its clients). A value that is not a
//     class is 400 invalid_value in the route's shape.
//   - The admin key (a gateway passing its clients' requests) acts with
//     the class it is sent and the weight in X-Kvwin-Weight; anyone else's
//     X-Kvwin-Weight is ignored.
//   - Tokens per minute: a key's generations (prompt and generated tokens)
//     are charged to a bucket holding a minute's tokens that refills
//     continuously. A request of a work route is admitted while the bucket
//     holds a token (so one request may overdraw it); else it is 429
//     rate_limit_exceeded, before its body is read, with Retry-After the
//     seconds until the bucket holds a token again.

// KeyPolicy is what a tenant key sets besides its tenant.
type KeyPolicy struct {
	// Class is the key's class; its requests may ask for a lower one.
	Class queue.Class
	// Weight is the key's tenant's share within its class relative to other
	// tenants' (queue.MinWeight to queue.MaxWeight); 0 means 1.
	Weight float64
	// TokensPerMinute bounds the tokens the key's generations use; 0 means
	// no bound.
	TokensPerMinute int
}

// Check reports whether p is a policy a key may have.
func (p KeyPolicy) Check() error {
	switch {
	case p.Class != queue.Interactive && p.Class != queue.Batch:
		return fmt.Errorf("class %v: want interactive or batch", p.Class)
	case p.TokensPerMinute < 0:
		return fmt.Errorf("tokens per minute %d: must not be negative", p.TokensPerMinute)
	case p.Weight != 0:
		return queue.CheckWeight(p.Weight)
	}
	return nil
}

// ParseKeyOptions reads the options of a keys-file line after its
// TENANT=KEY: space-separated class=interactive|batch, weight=W and
// tpm=N, each at most once.
func ParseKeyOptions(fields []string) (KeyPolicy, error) {
	var p KeyPolicy
	seen := map[string]bool{}
	for _, f := range fields {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			// Not quoted: a word without '=' may be a key (a key holds
			// no white space, so a second key on the line lands here).
			return p, errors.New("after TENANT=KEY, want only class=interactive|batch, weight=W and tpm=N")
		}
		if seen[name] {
			return p, fmt.Errorf("option %q given twice", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "class":
			p.Class, err = queue.ParseClass(value)
		case "weight":
			p.Weight, err = strconv.ParseFloat(value, 64)
			if err == nil {
				err = queue.CheckWeight(p.Weight)
			}
		case "tpm":
			p.TokensPerMinute, err = strconv.Atoi(value)
			if err == nil && p.TokensPerMinute < 1 {
				err = fmt.Errorf("tpm %d: want at least 1", p.TokensPerMinute)
			}
		default:
			return p, fmt.Errorf("option %.20q: want class=interactive|batch, weight=W or tpm=N", name)
		}
		if err != nil {
			return p, fmt.Errorf("option %s: %w", name, err)
		}
	}
	return p, nil
}

// classify sets t's class and weight from its key's policy and the
// request's headers, and answers 400 for a header that is not valid.
func (s *Server) classify(c *gin.Context, t *core.Turn, p KeyPolicy) bool {
	t.Class, t.Weight = p.Class, p.Weight
	if h := c.GetHeader(wire.HeaderPriority); h != "" {
		asked, err := queue.ParseClass(h)
		if err != nil {
			s.reject(c, core.BadInput(core.CodeInvalidValue, wire.HeaderPriority, "%s: %v", wire.HeaderPriority, err))
			return false
		}
		t.Class = queue.Within(p.Class, asked)
	}
	if h := c.GetHeader(wire.HeaderWeight); h != "" && t.Admin {
		w, err := strconv.ParseFloat(strings.TrimSpace(h), 64)
		if err == nil {
			err = queue.CheckWeight(w)
		}
		if err != nil {
			s.reject(c, core.BadInput(core.CodeInvalidValue, wire.HeaderWeight, "%s %.32q: %v", wire.HeaderWeight, h, err))
			return false
		}
		t.Weight = w
	}
	return true
}

// tokenBudget is one key's tokens per minute: a bucket of a minute's
// tokens refilled continuously, charged after each generation. Safe for
// concurrent use.
type tokenBudget struct {
	perMinute float64
	mu        sync.Mutex
	level     float64   // tokens left; negative when overdrawn
	at        time.Time // when level was last brought up to date
}

func newTokenBudget(perMinute int) *tokenBudget {
	return &tokenBudget{perMinute: float64(perMinute), level: float64(perMinute)}
}

// refill brings level up to now; under mu.
func (b *tokenBudget) refill(now time.Time) {
	if !b.at.IsZero() && now.After(b.at) {
		b.level = min(b.perMinute, b.level+b.perMinute*now.Sub(b.at).Minutes())
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
}

// admit reports whether a request may start now, or how long until one
// may.
func (b *tokenBudget) admit(now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.level >= 1 {
		return 0, true
	}
	// Until it holds a token again, at the refill rate.
	minutes := (1 - b.level) / b.perMinute
	// Rounded to the millisecond, so float noise does not add a second.
	return time.Duration(minutes * float64(time.Minute)).Round(time.Millisecond), false
}

// charge takes tokens from the bucket.
func (b *tokenBudget) charge(now time.Time, tokens int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level -= float64(tokens)
}

// checkBudget admits a request of a work route under its key's tokens per
// minute, or answers 429; it arranges for the turn's generation to be
// charged.
func (s *Server) checkBudget(c *gin.Context, t *core.Turn, b *tokenBudget) bool {
	if b == nil || c.Request.Method != "POST" || !workPaths[c.Request.URL.Path] {
		return true
	}
	if wait, ok := b.admit(s.now()); !ok {
		s.reject(c, &core.RateLimitError{Tenant: t.Tenant, TokensPerMinute: int(b.perMinute), RetryAfter: wait})
		return false
	}
	t.Charge = func(tokens int) { b.charge(s.now(), tokens) }
	return true
}
