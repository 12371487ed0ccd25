package web

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvwin/kvcache"
	"kvwin/web/core"
)

// RegistryView is what GET /kvwin/v1/registry shows: the prefix registry's
// totals, per backend and per slot (kvcache.Registry implements it).
type RegistryView interface {
	Snapshot() kvcache.Stats
}

// adminRoutes mounts the operator endpoints that are configured.
func (s *Server) adminRoutes(r *gin.Engine) {
	if s.cfg.Registry != nil {
		r.GET("/kvwin/v1/registry", s.registry)
	}
	r.GET("/kvwin/v1/traffic", s.serveTraffic)
	r.GET("/kvwin/v1/events", s.Bind(core.Fail)(s.events))
	if s.cfg.Status != nil {
		r.GET("/kvwin/v1/status", func(c *gin.Context) { core.WriteJSON(c.Writer, http.StatusOK, s.cfg.Status(c.Request.Context())) })
	}
	if s.cfg.Forget != nil {
		r.DELETE(conversationsPath+"*id", s.Bind(core.Fail)(s.deleteConversation))
	}
	if s.cfg.Metrics != nil {
		h := promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{})
		r.GET("/metrics", gin.WrapH(h))
	}
}

// registry serves the registry snapshot as JSON.
func (s *Server) registry(c *gin.Context) {
	c.JSON(http.StatusOK, s.cfg.Registry.Snapshot())
}
