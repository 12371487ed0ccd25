package web

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
)

// Turn is what the server knows of one request as it is served. The first
// middleware (accessLog) makes it when the request arrives, authenticate
// names its tenant, and the handler completes it: the backend serving the
// model it names (selectBackend, once per request) and, for a chat, its
// window and conversation (applyWindow). Each step after the middleware is
// handed it explicitly; it is never shared between requests.
type Turn struct {
	// Start is when the request arrived.
	Start time.Time
	// RequestID is the request's id (X-Request-Id).
	RequestID string
	// Tenant is the tenant the request acts as; Admin whether it holds the
	// admin key (or no key is configured at all).
	Tenant string
	Admin  bool
	// Backend serves the request and Info is what it said of itself when
	// chosen: the server's own backend until selectBackend picks one of a
	// Catalog's.
	Backend engine.Backend
	Info    engine.Info
	// Conversation is the conversation the request continues, if it names
	// one; Window how its chat was windowed (nil without a window).
	Conversation string
	Window       *WindowLayout
}

// turnKey is the request-context key of a request's *Turn.
type turnKey struct{}

// newTurn starts the Turn of a request arriving now, and puts it into the
// request's context, where turnOf finds it.
func (s *Server) newTurn(c *gin.Context, start time.Time, requestID string) *Turn {
	t := &Turn{Start: start, RequestID: requestID, Tenant: s.cfg.Tenant, Backend: s.backend}
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), turnKey{}, t))
	return t
}

// turnOf is the request's Turn. A request that did not pass accessLog (no
// route does) gets a fresh one, so a handler never sees nil.
func (s *Server) turnOf(c *gin.Context) *Turn {
	if t, ok := c.Request.Context().Value(turnKey{}).(*Turn); ok {
		return t
	}
	return s.newTurn(c, time.Now(), "")
}

// handler is a route's handler: it is given the request's Turn.
type handler func(c *gin.Context, t *Turn)

// serve adapts h to Gin, handing it the request's Turn.
func (s *Server) serve(h handler) gin.HandlerFunc {
	return func(c *gin.Context) { h(c, s.turnOf(c)) }
}
