package web

import (
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/anthropic"
	"kvwin/web/core"
	"kvwin/web/llamaserver"
	"kvwin/web/ollama"
	"kvwin/web/openai"
)

// Decode reads the request body into v within the server's body limit and
// timeout (core.Decode).
func (s *Server) Decode(c *gin.Context, v any) error {
	err := core.Decode(c, v, s.cfg.MaxBodyBytes, s.cfg.BodyTimeout)
	s.turnOf(c).Decoded = time.Now() // the read phase ends here
	return err
}

// CheckItems fails when n, the items of param, is over Config.MaxItems:
// a 400 naming the limit, which every dialect's shaper writes in its
// route's shape. It is called right after the body is decoded, before
// any work in proportion to the items (the window, the chain).
func (s *Server) CheckItems(param string, n int) error {
	if n > s.cfg.MaxItems {
		return core.BadInput(core.CodeTooManyItems, param, "%s holds %d items; this server takes at most %d in one request (--max-items)", param, n, s.cfg.MaxItems)
	}
	return nil
}

// KeysEnabled reports whether the server has keys, so tenants.
func (s *Server) KeysEnabled() bool { return s.keys.enabled() }

// Backend is the server's own backend: a Catalog, or one model's.
func (s *Server) Backend() engine.Backend { return s.backend }

// Started is when the server was made, reported as its models' creation.
func (s *Server) Started() time.Time { return s.started }

// Now is the server's clock (fixed in tests, for byte-exact bodies).
func (s *Server) Now() time.Time { return s.now() }

// NewID returns a response id starting with prefix.
func (s *Server) NewID(prefix string) string { return s.newID(prefix) }

// Log is the server's logger.
func (s *Server) Log() *slog.Logger { return s.log }

// The dialects are served through the server.
var (
	_ llamaserver.Services = (*Server)(nil)
	_ ollama.Services      = (*Server)(nil)
	_ openai.Services      = (*Server)(nil)
	_ anthropic.Services   = (*Server)(nil)
)
