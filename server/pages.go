package server

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
)

// healthz answers 200 while the server is serving: requests are answered only once the
// database is ready (connections made earlier wait in the listen backlog), and shutdownGuard
// answers 503 once shutdown has begun.
func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok", "version": s.deps.Version})
}

// index is the landing page.
func (s *Server) index(c *gin.Context) {
	var users int64
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		users, err = s.deps.Users.Count(ctx)
		return err
	})
	if err != nil {
		s.logger.Error("count users", "err", err)
		s.fail(c, http.StatusServiceUnavailable, "the database is not answering; try again shortly")
		return
	}
	s.render(c, http.StatusOK, "index", struct {
		page
		Database string
		Users    int64
	}{page{"Home", s.deps.Version}, s.deps.Database, users})
}
