// Package web is kvwin's HTTP server: its configuration, the middleware
// (access log and request ids, panics, Host and CORS guards, keys and
// tenants, tenant limits), the catalog's model selection, the window, the
// turn's one streaming state machine (turn.go) and the operator routes
// (/health, /metrics, /kvwin/v1/*, the dashboard). The APIs it speaks are
// dialect packages that register their routes on it given its services:
// web/openai, web/ollama, web/anthropic and web/llamaserver (the node routes), over
// web/core (the turn's contract, errors, decoding) and web/toolcall.
//
// Every wire format goes through one turn pipeline: a handler only
// translates (decode its body into one engine.Request; the window for
// chats), then RunTurn runs the backend and its one streaming state
// machine, and the format's encoder renders the answer. What to serve and
// how belongs to the backend; which HTTP status an error gets is decided
// in core.Classify only.
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"kvwin/engine"
	"kvwin/web/anthropic"
	"kvwin/web/core"
	"kvwin/web/llamaserver"
	"kvwin/web/ollama"
	"kvwin/web/openai"
	"kvwin/web/toolcall"
)

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is 0. Long
// conversations are resent whole each turn, so it is generous.
const DefaultMaxBodyBytes = 8 << 20

// DefaultMaxItems is the most messages (chat messages, Responses input
// items, Messages content blocks) one request may hold when
// Config.MaxItems is 0: 2^18 = 262,144. The rule: above the longest
// conversation any test or benchmark resends whole, 100,000 stored turns
// as user and assistant messages (200,000 items), with room; a 2,000-turn
// Responses chain (about 4,000 items) is far below it. The body's bytes
// are bounded apart (MaxBodyBytes).
const DefaultMaxItems = 1 << 18

// DefaultBodyTimeout bounds the reading of a request body when
// Config.BodyTimeout is 0: 8 MiB at a slow 1 Mbit/s takes about a minute.
const DefaultBodyTimeout = 60 * time.Second

// DefaultStallTimeout ends a stream whose client has read nothing for this
// long when Config.StallTimeout is 0: a reader that keeps up, however
// slowly, never waits that long for its socket.
const DefaultStallTimeout = 2 * time.Minute

// DefaultKeepAlive is the time between keep-alives of a stream waiting for
// its first token (queued or prefilling) when Config.KeepAlive is 0. The
// rule: a quarter of the shortest idle timeout common on a stream's way,
// 60 s (nginx's proxy_read_timeout, AWS load balancers' idle timeout), so
// three may be lost or delayed before a proxy cuts the stream; far inside
// Claude Code's 300 s stream watchdog. A keep-alive is a few bytes.
const DefaultKeepAlive = 15 * time.Second

// Config configures a Server. The zero value is valid and means defaults.
type Config struct {
	// MaxBodyBytes bounds a request body; a larger body is answered 413.
	// 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64 `json:"max_body_bytes"`

	// Registry, if set, is served as GET /kvwin/v1/registry.
	Registry RegistryView `json:"-"`
	// Metrics, if set, is served as GET /metrics (Prometheus text format).
	Metrics prometheus.Gatherer `json:"-"`
	// Registerer, if set, receives the server's own collectors: latency
	// and prompt histograms by model and backend, token counters and
	// responses by status (metrics.go).
	Registerer prometheus.Registerer `json:"-"`
	// Window, if set, bounds every chat request's prompt (the window
	// policies); nil sends every message.
	Window Windower `json:"-"`
	// Shift lets backends move kept history's KV at eviction steps instead
	// of recomputing it (--shift; approximate).
	Shift bool `json:"shift"`
	// Tenant is the one tenant of a server without keys; default
	// DefaultTenant. With keys, each request's tenant comes from its key.
	Tenant string `json:"tenant"`

	// APIKeys maps each tenant key to its tenant. With no key here and no
	// AdminKey, every route is open and every request is Tenant's.
	APIKeys map[string]string `json:"-"`
	// KeyPolicies holds, by key as APIKeys, each key's class, weight and
	// tokens per minute (priority.go); a key without one has the defaults.
	KeyPolicies map[string]KeyPolicy `json:"-"`
	// AdminKey opens /metrics and /kvwin/v1/*, and lets its holder act as
	// any tenant (HeaderTenant). Empty: those routes are forbidden once
	// tenant keys exist.
	AdminKey string `json:"-"`
	// ListenAddr is the address the server listens on (host:port). When
	// its host is a loopback address, or AllowedHosts is set, requests
	// whose Host is neither it, a loopback name nor an allowed host get 403.
	ListenAddr   string   `json:"listen_addr"`
	AllowedHosts []string `json:"allowed_hosts"`
	// CORSOrigins are the origins a browser page may call from ("*" for
	// any); none by default.
	CORSOrigins []string `json:"cors_origins"`
	// TenantMaxConcurrent bounds each tenant's running generations and
	// TenantMaxQueued those waiting behind them (429 beyond); 0 concurrent
	// means no per-tenant limit.
	TenantMaxConcurrent int `json:"tenant_max_concurrent"`
	TenantMaxQueued     int `json:"tenant_max_queued"`
	// MaxWorking bounds the requests of the work routes (chats,
	// completions, Responses, Messages and count_tokens, embeddings, the
	// node routes) the server serves at once, from before their body is
	// read to their answer's end: their decoding, window and tokenizing
	// count as the generation does. Beyond it, 429 queue_full at once. 0:
	// no bound here (the backend's own queue still answers). kvwin serve
	// sets it to the embedded engine's slots plus --queue.
	MaxWorking int `json:"max_working"`
	// MaxItems bounds the messages (input items, content blocks) of one
	// request: more is a 400 naming the limit, in the route's shape. 0
	// means DefaultMaxItems.
	MaxItems int `json:"max_items"`
	// BodyTimeout bounds the reading of a request body (408 past it); it
	// never bounds the answer, so long streams are not cut. 0 means
	// DefaultBodyTimeout.
	BodyTimeout time.Duration `json:"body_timeout"`
	// StallTimeout ends a streamed answer whose client reads nothing for
	// that long (its slot is freed); 0 means DefaultStallTimeout.
	StallTimeout time.Duration `json:"stall_timeout"`
	// KeepAlive is the time between keep-alives of a stream the backend
	// has accepted and not yet answered (stream.go); 0 means
	// DefaultKeepAlive, negative none (the stream still opens on
	// acceptance).
	KeepAlive time.Duration `json:"keep_alive"`
	// Status, if set, serves GET /kvwin/v1/status (the dashboard's view of
	// backends, models and routing); it may ask remote backends for their
	// slots, bounded by its own short deadline and the request's context.
	Status func(ctx context.Context) any `json:"-"`
	// Forget, if set, serves DELETE /kvwin/v1/conversations/{id}: it
	// deletes a tenant's conversation (stored turns and KV snapshots).
	Forget Forgetter `json:"-"`
	// MemoryUnavailable, if set, is why the memory store failed to open or
	// verify: chats are served without it, DELETE of a conversation
	// answers 503 (its stored turns cannot be reached; its KV is deleted
	// all the same), and /health answers 200 with "status": "degraded".
	// It is logged, never sent to clients.
	MemoryUnavailable error `json:"-"`
	// Responses, if set, keeps the Responses API's stored responses (the
	// memory store); nil answers them without keeping them.
	Responses openai.ResponseStore `json:"-"`
	// MemoryHealth, if set, says at each /health and DELETE of a
	// conversation why the memory store cannot be used now (a shared
	// database that went away; nil while it can): the same degraded
	// answers as MemoryUnavailable, for as long as it lasts.
	MemoryHealth func() error `json:"-"`
	// Tracer, if set, makes each turn a span with its phases as children
	// (trace.go); nil is OpenTelemetry's no-op provider: nothing is
	// recorded, and a caller's traceparent is only passed on to backends.
	Tracer trace.TracerProvider `json:"-"`
}

// withDefaults fills in defaults and checks ranges.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.MaxBodyBytes < 0:
		return c, fmt.Errorf("web: max body bytes is %d, must be positive or 0 for the default", c.MaxBodyBytes)
	case c.MaxBodyBytes == 0:
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Tenant == "" {
		c.Tenant = DefaultTenant
	}
	if !ValidTenant(c.Tenant) {
		return c, fmt.Errorf("web: tenant %q: want 1-64 letters, digits, '.', '_' or '-'", c.Tenant)
	}
	switch {
	case c.BodyTimeout < 0:
		return c, fmt.Errorf("web: body timeout %v is negative", c.BodyTimeout)
	case c.BodyTimeout == 0:
		c.BodyTimeout = DefaultBodyTimeout
	}
	switch {
	case c.StallTimeout < 0:
		return c, fmt.Errorf("web: stall timeout %v is negative", c.StallTimeout)
	case c.StallTimeout == 0:
		c.StallTimeout = DefaultStallTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	switch {
	case c.TenantMaxConcurrent < 0 || c.TenantMaxQueued < 0:
		return c, fmt.Errorf("web: tenant limits %d concurrent, %d queued: must not be negative", c.TenantMaxConcurrent, c.TenantMaxQueued)
	case c.TenantMaxQueued > 0 && c.TenantMaxConcurrent == 0:
		return c, fmt.Errorf("web: a tenant queue of %d needs a limit of concurrent requests (--tenant-max-concurrent) to queue behind", c.TenantMaxQueued)
	}
	switch {
	case c.MaxWorking < 0 || c.MaxItems < 0:
		return c, fmt.Errorf("web: max working %d, max items %d: must not be negative", c.MaxWorking, c.MaxItems)
	case c.MaxItems == 0:
		c.MaxItems = DefaultMaxItems
	}
	return c, nil
}

// Server serves the OpenAI API over one backend. It holds no per-request
// state; its Handler is safe for concurrent use.
type Server struct {
	cfg     Config
	backend engine.Backend
	log     *slog.Logger
	router  *gin.Engine
	started time.Time // reported as the model's "created"

	keys    *keyring
	hosts   *hostGuard // nil: no Host check
	origins map[string]bool
	limits  *limiter      // nil: no per-tenant limits
	working chan struct{} // a token per request of a work route served (MaxWorking); nil: no bound
	// admitted, if set (tests), hears the path of every request of a work
	// route admitted, before its body is read.
	admitted chan<- string
	metrics  *metrics
	traffic  *traffic
	tracer   trace.Tracer // Config.Tracer's, or a no-op one
	traced   bool         // Config.Tracer was set: turns are recorded
	// answers holds the tool-call answers generated per tenant, so the
	// turn after a call renders it as generated (toolcall.Answers).
	answers *toolcall.Answers

	// streamsDone is closed by EndStreams (the server shuts down).
	streamsDone chan struct{}
	endStreams  sync.Once

	// now and newID are fields so tests can make responses byte-exact.
	now   func() time.Time
	newID func(prefix string) string
}

// releaseMode switches Gin to release mode once per process: the mode is a
// Gin global, and debug mode prints route tables and warnings to stdout.
var releaseMode sync.Once

// New returns a Server for backend, logging to log (nil discards logs). It
// returns an error if cfg is out of range or backend is nil.
func New(cfg Config, backend engine.Backend, log *slog.Logger) (*Server, error) {
	if backend == nil {
		return nil, errors.New("web: backend is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	releaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })

	keys, err := newKeyring(cfg.APIKeys, cfg.KeyPolicies, cfg.AdminKey)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, backend: backend, log: log, started: time.Now(), now: time.Now, newID: core.NewID,
		keys: keys, hosts: newHostGuard(cfg.ListenAddr, cfg.AllowedHosts), origins: map[string]bool{},
		limits: newLimiter(cfg.TenantMaxConcurrent, cfg.TenantMaxQueued), metrics: newMetrics(), traffic: newTraffic(), streamsDone: make(chan struct{}),
		answers: toolcall.NewAnswers(0)}
	s.traced = cfg.Tracer != nil
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	s.tracer = cfg.Tracer.Tracer(tracerName)
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("web: metrics: %w", err)
		}
	}
	for _, o := range cfg.CORSOrigins {
		s.origins[o] = true
	}
	if cfg.MaxWorking > 0 {
		s.working = make(chan struct{}, cfg.MaxWorking)
	}
	s.router = s.routes()
	return s, nil
}

// Handler returns the HTTP handler serving every route. It is safe for
// concurrent use; each request blocks for as long as its generation runs.
func (s *Server) Handler() http.Handler {
	return s.router
}

// routes builds the router. Unknown paths and wrong methods get
// OpenAI-shaped errors rather than Gin's plain-text defaults, and paths are
// taken as they are (no redirects), since API clients do not follow a
// redirect of a POST body reliably.
func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false

	// Order: the Host check and CORS come before authentication (a
	// preflight carries no key); a body's type is checked once the caller
	// is known; tenant limits count only admitted requests, from before
	// their body is read.
	r.Use(s.accessLog, s.recoverPanics, s.checkHost, s.cors, s.authenticate, s.requireJSON, s.limitWork,
		anthropic.Models(s)) // GET /v1/models with anthropic-version, before the OpenAI route
	openai.Register(r, s)
	anthropic.Register(r, s)
	openai.RegisterResponses(r, s, s.cfg.Responses)
	r.GET("/health", s.health)
	s.adminRoutes(r)
	llamaserver.Register(r, s)
	ollama.Register(r, s)
	r.NoRoute(s.unknownRoute)
	r.NoMethod(s.wrongMethod)
	return r
}

// health serves GET /health, for operators, load balancers and as the node
// route llama-server clients probe: {"status":"ok"} with 200 is
// llama-server's "ready" answer. It is 503 (an OpenAI-shaped error) while
// nothing could be served: no model known, or a backend that says it is
// not ready (a gateway with no healthy backend). A server that serves
// without its memory store answers 200 with "status": "degraded".
func (s *Server) health(c *gin.Context) {
	err := error(nil)
	if r, ok := engine.As[engine.Readier](s.backend); ok {
		err = r.Ready()
	}
	if err == nil && s.backend.Info().Model == "" {
		err = fmt.Errorf("%w: no model to serve yet", engine.ErrUnavailable)
	}
	if err != nil {
		core.Fail(c, err) // 503 with Retry-After, as every 503
		return
	}
	if s.memoryDown() != nil {
		core.WriteJSON(c.Writer, http.StatusOK, map[string]string{"status": "degraded", "memory_store": "unavailable"})
		return
	}
	core.WriteJSON(c.Writer, http.StatusOK, map[string]string{"status": "ok"})
}

// memoryDown is why the memory store cannot be used now; nil if it can
// (or there is none).
func (s *Server) memoryDown() error {
	if s.cfg.MemoryUnavailable != nil {
		return s.cfg.MemoryUnavailable
	}
	if s.cfg.MemoryHealth != nil {
		return s.cfg.MemoryHealth()
	}
	return nil
}

func (s *Server) unknownRoute(c *gin.Context) {
	s.reject(c, fmt.Errorf("%w: %s %s", core.ErrUnknownRoute, c.Request.Method, c.Request.URL.Path))
}

// wrongMethod answers 405 with the Allow header RFC 9110 asks for, which
// Gin does not set.
func (s *Server) wrongMethod(c *gin.Context) {
	var allow []string
	for _, rt := range s.router.Routes() {
		if rt.Path == c.Request.URL.Path {
			allow = append(allow, rt.Method)
		}
	}
	for _, m := range allow {
		c.Writer.Header().Add("Allow", m)
	}
	s.reject(c, fmt.Errorf("%w: %s %s", core.ErrMethodNotAllowed, c.Request.Method, c.Request.URL.Path))
}
