package web

import (
	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// Decode reads the request body into v within the server's body limit and
// timeout (core.Decode).
func (s *Server) Decode(c *gin.Context, v any) error {
	return core.Decode(c, v, s.cfg.MaxBodyBytes, s.cfg.BodyTimeout)
}

// KeysEnabled reports whether the server has keys, so tenants.
func (s *Server) KeysEnabled() bool { return s.keys.enabled() }
