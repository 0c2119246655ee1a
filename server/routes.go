package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/static"
)

// routes builds the engine with every route Shoal serves.
func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(stamp, s.accessLog, gin.CustomRecovery(s.recovery), s.shutdownGuard)

	// Health and operations.
	r.GET("/healthz", s.healthz)
	r.HEAD("/healthz", s.healthz)

	// UI pages.
	r.GET("/", s.index)

	// Assets.
	r.StaticFS("/static", http.FS(static.FS))

	r.NoRoute(func(c *gin.Context) { s.fail(c, http.StatusNotFound, "no such page") })
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, "method not allowed") })
	return r
}
