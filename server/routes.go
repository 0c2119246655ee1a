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
	// Only a proxy on this machine (nginx) may say who the client is: a worker must not pick
	// its own address and so escape the per-IP machine limit.
	if err := r.SetTrustedProxies([]string{"127.0.0.1", "::1"}); err != nil {
		panic(err) // constant input
	}
	r.Use(stamp, s.accessLog, gin.CustomRecovery(s.recovery), s.shutdownGuard)

	// Health and operations.
	r.GET("/healthz", s.healthz)
	r.HEAD("/healthz", s.healthz)

	// Worker API (protocol version 325).
	s.workerRoutes(r)

	// Test submission without the UI.
	s.submitRoutes(r)

	// Read API.
	getAndHead(r, "/api/calc_elo", s.calcElo)
	s.readRoutes(r)

	// UI pages.
	r.GET("/", s.index)

	// Assets.
	r.StaticFS("/static", http.FS(static.FS))

	r.NoRoute(func(c *gin.Context) { s.fail(c, http.StatusNotFound, "no such page") })
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, "method not allowed") })
	return r
}
