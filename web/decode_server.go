package web

import (
	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// decode reads the request body into v within the server's body limit and
// timeout (core.Decode).
func (s *Server) decode(c *gin.Context, v any) error {
	return core.Decode(c, v, s.cfg.MaxBodyBytes, s.cfg.BodyTimeout)
}
