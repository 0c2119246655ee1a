package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// healthz answers 200 while the server is serving: requests are answered only once the
// database is ready (connections made earlier wait in the listen backlog), and shutdownGuard
// answers 503 once shutdown has begun.
func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok", "version": s.deps.Version})
}
