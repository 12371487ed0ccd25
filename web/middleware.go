package web

import (
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
)

// statusClientClosed is nginx's 499, used only in the access log for a
// request whose client left before the answer: no status was sent.
const statusClientClosed = 499

// accessLog logs one line per request: method, path, status, duration and
// bytes written, plus the error that decided the answer, if any. Requests
// are logged at Info, health probes at Debug (they come every few seconds),
// and server errors at Error.
func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Set(ctxStart, start)
	c.Next()

	status, level := c.Writer.Status(), slog.LevelInfo
	var err error
	if last := c.Errors.Last(); last != nil {
		err = last.Err
	}
	switch {
	case errors.Is(err, errClientGone):
		status = statusClientClosed
	case status >= http.StatusInternalServerError:
		level = slog.LevelError
	case c.Request.URL.Path == "/health":
		level = slog.LevelDebug
	}
	s.metrics.respond(c, status)
	attrs := []slog.Attr{
		slog.String("method", c.Request.Method),
		slog.String("path", c.Request.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
		slog.Int("bytes", max(c.Writer.Size(), 0)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.log.LogAttrs(c.Request.Context(), level, "http request", attrs...)
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
		s.log.Error("panic serving request",
			"method", c.Request.Method, "path", c.Request.URL.Path,
			"panic", v, "stack", string(debug.Stack()))
		c.Abort()
		if c.Writer.Written() {
			_ = c.Error(errPanic)
			return
		}
		s.fail(c, errPanic)
	}()
	c.Next()
}
