package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine/wire"
	"kvwin/web/core"
)

// Who may call what (docs/architecture.md, "Conversations and tenants"; docs/tenants.md):
//
//   - With no key configured every route is open, Authorization is ignored
//     and every request acts as the one tenant, DefaultTenant.
//   - With keys, /health and GET or HEAD / stay open; /metrics and
//     /kvwin/v1/* need the admin key (401 without a key, 403 with a tenant
//     key); DELETE /kvwin/v1/conversations/{id} takes the owner's tenant key
//     or the admin key with ?tenant=NAME; every other route (OpenAI,
//     Ollama, node routes, and unknown paths, so that they reveal nothing)
//     takes any tenant key and acts as its tenant.
//   - The admin key on a tenant route acts as the tenant named by the
//     X-Kvwin-Tenant header (a gateway passes its client's tenant that way),
//     or as AdminTenant without one. The header is ignored from anyone else.
//
// A key comes as Authorization: Bearer KEY or, as Anthropic's clients
// send it, x-api-key: KEY (Bearer first when both are there).
//
// Keys are compared in constant time (over their SHA-256, so neither the
// length nor the content of a key leaks through timing) and never logged.

// Tenants.
const (
	// DefaultTenant is the one tenant of a server without keys.
	DefaultTenant = "default"
	// AdminTenant is the tenant the admin key acts as on tenant routes when
	// it names none with HeaderTenant.
	AdminTenant = "admin"
	// HeaderTenant names the tenant a request acts for; trusted only with
	// the admin key (a gateway in front of kvwin nodes sends it).
	HeaderTenant = wire.HeaderTenant
)

// tenantName is what a tenant may be called: it appears in keys of the
// memory store, in headers and in query strings.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// MinKeyLength is the shortest key accepted: 16 characters carry enough
// entropy only if random, but anything shorter is guessable whatever it is.
const MinKeyLength = 16

// ValidTenant reports whether name is a valid tenant name: 1 to 64 letters,
// digits, '.', '_' or '-', starting with a letter or digit.
func ValidTenant(name string) bool { return tenantName.MatchString(name) }

// keyring holds the configured keys as SHA-256 digests. Immutable after
// newKeyring; safe for concurrent use.
type keyring struct {
	tenants []keyEntry
	admin   *[sha256.Size]byte // nil: no admin key
}

type keyEntry struct {
	digest [sha256.Size]byte
	tenant string
	policy KeyPolicy
	budget *tokenBudget // nil: no tokens per minute
}

// newKeyring checks and hashes the keys: tenant names must be valid, keys at
// least MinKeyLength characters without white space, and no key used twice.
// policies holds the keys' policies, by key (a key without one has the
// defaults).
func newKeyring(keys map[string]string, policies map[string]KeyPolicy, admin string) (*keyring, error) {
	k := &keyring{}
	check := func(what, key string) error {
		if len(key) < MinKeyLength || strings.ContainsAny(key, " \t\r\n") {
			return fmt.Errorf("web: %s: a key must be at least %d characters without white space", what, MinKeyLength)
		}
		return nil
	}
	seen := map[[sha256.Size]byte]bool{}
	for key, tenant := range keys {
		if !ValidTenant(tenant) {
			return nil, fmt.Errorf("web: tenant name %q: want 1-64 letters, digits, '.', '_' or '-'", tenant)
		}
		if err := check("the key of tenant "+tenant, key); err != nil {
			return nil, err
		}
		p := policies[key]
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("web: the key of tenant %s: %w", tenant, err)
		}
		d := sha256.Sum256([]byte(key))
		seen[d] = true
		e := keyEntry{digest: d, tenant: tenant, policy: p}
		if p.TokensPerMinute > 0 {
			e.budget = newTokenBudget(p.TokensPerMinute)
		}
		k.tenants = append(k.tenants, e)
	}
	if admin != "" {
		if err := check("the admin key", admin); err != nil {
			return nil, err
		}
		d := sha256.Sum256([]byte(admin))
		if seen[d] {
			return nil, errors.New("web: the admin key is also a tenant's key")
		}
		k.admin = &d
	}
	return k, nil
}

// enabled reports whether any key is configured.
func (k *keyring) enabled() bool { return len(k.tenants) > 0 || k.admin != nil }

// lookup finds the entry of a tenant key, or whether key is the admin
// key. It takes the same time whichever key matches, or none.
func (k *keyring) lookup(key string) (entry *keyEntry, admin, ok bool) {
	d := sha256.Sum256([]byte(key))
	for i := range k.tenants {
		if subtle.ConstantTimeCompare(d[:], k.tenants[i].digest[:]) == 1 {
			entry, ok = &k.tenants[i], true
		}
	}
	if k.admin != nil && subtle.ConstantTimeCompare(d[:], k.admin[:]) == 1 {
		admin, ok = true, true
	}
	return entry, admin, ok
}

// access is the key a route needs.
type access int

const (
	accessTenant access = iota // any tenant key
	accessOpen                 // none
	accessAdmin                // the admin key
	accessOwner                // the owner's tenant key, or the admin key naming the tenant
)

// conversationsPath is the prefix of DELETE /kvwin/v1/conversations/{id}.
const conversationsPath = "/kvwin/v1/conversations/"

// accessOf classifies a request by method and path, so routes added later
// (the Ollama API, a dashboard) get the rule of their kind without being
// listed. A dashboard's HTML shell mounted at / is open; its data come from
// admin routes.
func accessOf(method, path string) access {
	switch {
	case path == "/health", path == "/" && (method == http.MethodGet || method == http.MethodHead):
		return accessOpen
	case method == http.MethodDelete && strings.HasPrefix(path, conversationsPath):
		return accessOwner
	case path == "/metrics", path == "/kvwin/v1", strings.HasPrefix(path, "/kvwin/v1/"):
		return accessAdmin
	default:
		return accessTenant
	}
}

// apiKey is the request's key: Authorization: Bearer KEY, else
// x-api-key: KEY (Anthropic's clients send their key so).
func apiKey(r *http.Request) string {
	if key := bearer(r.Header.Get("Authorization")); key != "" {
		return key
	}
	return strings.TrimSpace(r.Header.Get(headerAPIKey))
}

// headerAPIKey carries the key of Anthropic's clients.
const headerAPIKey = "x-api-key"

// bearer returns the key of an "Authorization: Bearer KEY" header.
func bearer(h string) string {
	scheme, key, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(key)
}

// authenticate decides who the caller is and whether it may call the route;
// see the rules above.
func (s *Server) authenticate(c *gin.Context) {
	level := accessOf(c.Request.Method, c.Request.URL.Path)
	t := s.turnOf(c) // its tenant is the server's until a key names another
	if !s.keys.enabled() {
		t.Admin = true // without keys everyone may do everything
		s.classify(c, t, KeyPolicy{})
		return
	}
	if level == accessOpen {
		return
	}
	key := apiKey(c.Request)
	if key == "" {
		s.reject(c, fmt.Errorf("%w: send Authorization: Bearer KEY or x-api-key: KEY", core.ErrUnauthorized))
		return
	}
	entry, admin, ok := s.keys.lookup(key)
	var tenant string
	var policy KeyPolicy
	var budget *tokenBudget
	if entry != nil {
		tenant, policy, budget = entry.tenant, entry.policy, entry.budget
	}
	switch {
	case !ok:
		s.reject(c, fmt.Errorf("%w: the key is not valid", core.ErrUnauthorized))
		return
	case level == accessAdmin && !admin:
		s.reject(c, fmt.Errorf("%w: %s needs the admin key", core.ErrForbidden, c.Request.URL.Path))
		return
	}
	if admin {
		tenant = AdminTenant
		if level == accessOwner {
			tenant = c.Query("tenant")
		} else if h := c.GetHeader(HeaderTenant); h != "" {
			tenant = h
		}
		if !ValidTenant(tenant) && level != accessAdmin {
			s.reject(c, core.BadInput(core.CodeInvalidValue, "tenant", "the admin key must name a valid tenant (1-64 letters, digits, '.', '_' or '-'), not %q", tenant))
			return
		}
	}
	t.Tenant, t.Admin = tenant, admin
	if s.classify(c, t, policy) {
		s.checkBudget(c, t, budget)
	}
}
