package web

import (
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine/wire"
	"kvwin/web/core"
)

// statusClientClosed is nginx's 499, used only in the access log for a
// request whose client left before the answer: no status was sent.
const statusClientClosed = 499

// accessLog names the request (requestID) and starts its Turn, then logs one line for it:
// method, path, status, duration and bytes written, plus the error that
// decided the answer, if any. Requests are logged at Info, health probes at
// Debug (they come every few seconds), and server errors at Error.
func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	s.newTurn(c, start, s.requestID(c))
	c.Next()

	status, level := c.Writer.Status(), slog.LevelInfo
	var err error
	if last := c.Errors.Last(); last != nil {
		err = last.Err
	}
	switch {
	case errors.Is(err, core.ErrClientGone):
		status = statusClientClosed
	case status >= http.StatusInternalServerError:
		level = slog.LevelError
	case c.Request.URL.Path == "/health":
		level = slog.LevelDebug
	}
	s.metrics.respond(c, status)
	attrs := []slog.Attr{
		slog.String("method", c.Request.Method),
		loggedPath(c.Request.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
		slog.Int("bytes", max(c.Writer.Size(), 0)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.log.LogAttrs(c.Request.Context(), level, "http request", attrs...)
}

// MaxLoggedPathBytes bounds the path a log line quotes. A path holds ids a
// client chose (DELETE /v1/responses/{id} with a 200,000-byte id): past
// the bound the line quotes the path's first MaxLoggedPathBytes bytes (cut
// at a character) and its length.
const MaxLoggedPathBytes = 256

// loggedPath is the "path" attribute of a log line: p, or its start and
// its length when it is longer than MaxLoggedPathBytes.
func loggedPath(p string) slog.Attr {
	if len(p) <= MaxLoggedPathBytes {
		return slog.String("path", p)
	}
	return slog.Group("", slog.String("path", core.CutAt(p, MaxLoggedPathBytes)+"…"), slog.Int("path_bytes", len(p)))
}

// requestID gives the request its id: the caller's X-Request-Id if the
// caller is trusted and the id well-formed (wire.ValidRequestID), else a new
// one. It goes into the request's context, so every line logged with that
// context carries it and backend clients send it on, and back to the caller
// as X-Request-Id. Trusted is whoever may act as any tenant: the admin key
// (a gateway in front of this node sends it), or anyone on a server without
// keys. From anyone else an id could be chosen to collide with another
// tenant's lines, so it is replaced.
func (s *Server) requestID(c *gin.Context) string {
	id := c.GetHeader(wire.HeaderRequestID)
	if !wire.ValidRequestID(id) || !s.trustsCaller(c) {
		id = wire.NewRequestID()
	}
	c.Request = c.Request.WithContext(wire.WithRequestID(c.Request.Context(), id))
	c.Header(wire.HeaderRequestID, id)
	return id
}

// trustsCaller reports whether the caller holds the admin key, or no key is
// configured. It runs before authenticate, which decides the rest.
func (s *Server) trustsCaller(c *gin.Context) bool {
	if !s.keys.enabled() {
		return true
	}
	key := apiKey(c.Request)
	if key == "" {
		return false
	}
	_, admin, _ := s.keys.lookup(key)
	return admin
}

// recoverPanics turns a panic in a handler (or in a backend, which runs on
// the handler's goroutine) into a 500 OpenAI error and a logged stack, so
// one bad request never takes the server down. If the response had already
// started, its status cannot change: the stream just ends, without [DONE].
func (s *Server) recoverPanics(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v) // net/http's deliberate "abort this response"; it handles it
		}
		s.log.ErrorContext(c.Request.Context(), "panic serving request",
			"method", c.Request.Method, loggedPath(c.Request.URL.Path),
			"panic", v, "stack", string(debug.Stack()))
		c.Abort()
		if c.Writer.Written() {
			_ = c.Error(core.ErrPanic)
			return
		}
		core.Fail(c, core.ErrPanic)
	}()
	c.Next()
}
