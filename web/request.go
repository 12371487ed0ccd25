package web

import (
	"context"
	"kvwin/internal/ident"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// turnKey is the request-context key of a request's *Turn.
type turnKey struct{}

// newTurn starts the Turn of a request arriving now, and puts it into the
// request's context, where turnOf finds it.
func (s *Server) newTurn(c *gin.Context, start time.Time, requestID string) *core.Turn {
	t := &core.Turn{Start: start, RequestID: requestID, Owner: ident.Owner{Tenant: s.cfg.Tenant}, Backend: s.backend}
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), turnKey{}, t))
	return t
}

// turnOf is the request's Turn. A request that did not pass accessLog (no
// route does) gets a fresh one, so a handler never sees nil.
func (s *Server) turnOf(c *gin.Context) *core.Turn {
	if t, ok := c.Request.Context().Value(turnKey{}).(*core.Turn); ok {
		return t
	}
	return s.newTurn(c, time.Now(), "")
}

// Bind returns the adapter of a dialect's handlers to Gin: each is
// handed the request's Turn, and the error it returns is answered by fail,
// the dialect's error answer.
func (s *Server) Bind(fail func(c *gin.Context, err error)) func(core.Handler) gin.HandlerFunc {
	return func(h core.Handler) gin.HandlerFunc {
		return func(c *gin.Context) {
			if err := h(c, s.turnOf(c)); err != nil {
				fail(c, err)
			}
		}
	}
}
