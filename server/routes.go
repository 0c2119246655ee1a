package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/static"
)

// getAndHead registers a GET route that also answers HEAD, as every read route does.
func getAndHead(r gin.IRoutes, path string, h gin.HandlerFunc) {
	r.GET(path, h)
	r.HEAD(path, h)
}

// routes builds the engine with every route Shoal serves.
func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(stamp, s.accessLog, gin.CustomRecovery(s.recovery), s.shutdownGuard)

	// Health and operations.
	r.GET("/healthz", s.healthz)
	r.HEAD("/healthz", s.healthz)

	// Read API.
	getAndHead(r, "/api/calc_elo", s.calcElo)

	// UI pages.
	r.GET("/", s.index)

	// Assets.
	r.StaticFS("/static", http.FS(static.FS))

	r.NoRoute(func(c *gin.Context) { s.fail(c, http.StatusNotFound, "no such page") })
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, "method not allowed") })
	return r
}
