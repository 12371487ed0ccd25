package web

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/web/anthropic"
	"kvwin/web/core"
	"kvwin/web/llamaserver"
)

// The browser guards: a web page must not reach kvwin through its user's
// browser. A cross-site form or fetch can send a "simple" request (text/plain,
// no custom headers) to any address, including a loopback one, and DNS
// rebinding can make a foreign name resolve to it. So:
//
//   - JSON routes answer 415 to a request from a web page (see fromPage)
//     unless its body is application/json, which a page can send
//     cross-origin only after a CORS preflight; other clients (curl, SDKs,
//     the ollama CLI) may send JSON under any Content-Type, as Ollama's and
//     llama-server's own examples do (`curl … -d '{…}'` says
//     application/x-www-form-urlencoded);
//   - preflights and CORS headers are granted only to Config.CORSOrigins;
//   - when kvwin listens on loopback, or when Config.AllowedHosts is set, a
//     Host header that is neither the listen address, a loopback name nor an
//     allowed host is refused (403): that is what DNS rebinding sends.

// api is which API a route speaks, which decides the shape of its errors.
type api int

const (
	apiOpenAI    api = iota // {"error": {"message", "type", "code"}}
	apiOllama               // {"error": "…"}
	apiNode                 // llama-server's {"error": {"code", "message", "type"}}
	apiAnthropic            // {"type": "error", "error": {"type", "message"}}
)

// apiOf tells a route's API by its path (and Anthropic's by its
// anthropic-version header too), so routes added later get their API's
// error shape from the middleware without being listed.
func apiOf(r *http.Request) api {
	path := r.URL.Path
	switch {
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return apiOllama
	case llamaserver.Speaks(r):
		return apiNode
	case anthropic.Speaks(r):
		return apiAnthropic
	default:
		return apiOpenAI
	}
}

// reject answers err in the shape of the route's API and stops the chain.
func (s *Server) reject(c *gin.Context, err error) {
	c.Abort()
	switch apiOf(c.Request) {
	case apiAnthropic:
		anthropic.Fail(c, err)
	case apiOllama:
		core.FailOllama(c, err)
	case apiNode:
		llamaserver.Fail(c, err)
	default:
		core.Fail(c, err)
	}
}

// hostGuard is the Host check; nil when it is off.
type hostGuard struct {
	listen  string          // the listen host (no port), lower case
	allowed map[string]bool // allowed hosts, lower case, "host" or "host:port"
}

// newHostGuard returns the Host check for a server listening on listen:
// on when listen is a loopback address or allowed is not empty.
func newHostGuard(listen string, allowed []string) *hostGuard {
	host := listen
	if h, _, err := net.SplitHostPort(listen); err == nil {
		host = h
	}
	if !isLoopback(host) && len(allowed) == 0 {
		return nil
	}
	g := &hostGuard{listen: strings.ToLower(host), allowed: map[string]bool{}}
	for _, a := range allowed {
		g.allowed[strings.ToLower(strings.TrimSpace(a))] = true
	}
	return g
}

// isLoopback reports whether host (no port) names the loopback interface.
func isLoopback(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// allows reports whether a request's Host header is acceptable.
func (g *hostGuard) allows(hostport string) bool {
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	switch {
	case hostport == "":
		return false
	case isLoopback(host), host == strings.Trim(g.listen, "[]"):
		return true
	default:
		return g.allowed[hostport] || g.allowed[host]
	}
}

// checkHost refuses foreign Host headers (DNS rebinding).
func (s *Server) checkHost(c *gin.Context) {
	if s.hosts == nil || s.hosts.allows(c.Request.Host) {
		return
	}
	s.reject(c, fmt.Errorf("%w: host %q is not this server's; add it with --allowed-host", core.ErrForbiddenHost, c.Request.Host))
}

// CORS headers kvwin allows and exposes.
const (
	corsAllowMethods  = "GET, POST, DELETE, HEAD, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, X-Conversation-Id, X-Kvwin-Window-Policy"
	corsExposeHeaders = "X-Kvwin-Backend, X-Kvwin-Prompt-Tokens, X-Kvwin-Cached-Tokens, X-Kvwin-Cached-Estimated, X-Kvwin-Prompt-Ms, X-Kvwin-Window, Retry-After"
	corsMaxAge        = "600"
)

// cors answers preflights and marks responses readable for the configured
// origins only. A request from another origin gets no CORS header (the
// browser keeps the answer from the page) and its preflight gets 403.
func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		return
	}
	preflight := c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != ""
	if !s.origins[origin] && !s.origins["*"] {
		if preflight {
			s.reject(c, fmt.Errorf("%w: origin %q is not allowed; add it with --cors-origin", core.ErrForbidden, origin))
		}
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if preflight {
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAge)
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
}

// requireJSON answers 415 to a request from a web page that carries a body
// not declared as application/json: a page can send text/plain or a form
// cross-origin without a preflight, but not JSON.
func (s *Server) requireJSON(c *gin.Context) {
	r := c.Request
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
		return
	}
	if r.ContentLength == 0 {
		return // no body: nothing to misread
	}
	if !fromPage(r) {
		return // not a browser: the body is read as JSON whatever it says
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return
	}
	s.reject(c, fmt.Errorf("%w: Content-Type is %q; send application/json", core.ErrUnsupportedMediaType, ct))
}

// fromPage reports whether a request may have been sent by a web page:
// browsers mark a page's POST with Origin (every current browser, also for
// plain HTML forms), with Sec-Fetch-Site other than "none" (since 2019–2021)
// and, unless the page forbids it, with Referer. Clients that are not
// browsers send none of them.
func fromPage(r *http.Request) bool {
	if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
		return true
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return site != "" && site != "none"
}
