package web

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// dashboardHTML is the operator's page: one file, its styles and script
// inline, embedded in the binary (air-gapped sites have no CDN). It draws
// from GET /kvwin/v1/status and /kvwin/v1/traffic, fetched every few
// seconds; each fetch completes (no held-open stream). With keys configured
// it asks for the admin key and sends it as Bearer.
//
//go:embed dashboard/index.html
var dashboardHTML []byte

// Dashboard serves the page.
func (s *Server) Dashboard(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// The page runs only its own inline code and talks only to this server.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	c.Status(http.StatusOK)
	_, _ = c.Writer.Write(dashboardHTML)
}
