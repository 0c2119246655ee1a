package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// stamp records when the request started, for the duration every API reply carries, and names
// the instance that answers.
func (s *Server) stamp(c *gin.Context) {
	c.Set(startedKey, time.Now())
	if s.deps.Instance != "" {
		c.Header("X-Shoal-Instance", s.deps.Instance)
	}
	c.Next()
}

// accessLog logs each request at debug level and each 5xx at error level, with the context
// known here.
func (s *Server) accessLog(c *gin.Context) {
	c.Next()
	status := c.Writer.Status()
	attrs := []any{"method", c.Request.Method, "path", c.Request.URL.Path, "status", status,
		"duration", duration(c), "remote", c.ClientIP()}
	if status >= 500 {
		s.logger.Error("request failed", append(attrs, "errors", c.Errors.String())...)
		return
	}
	s.logger.Debug("request", attrs...)
}

// recovery turns a panic into a 500 in the path's error shape, so a worker still gets JSON with
// a duration.
func (s *Server) recovery(c *gin.Context, recovered any) {
	s.logger.Error("panic in handler", "path", c.Request.URL.Path, "panic", recovered)
	s.fail(c, http.StatusInternalServerError, "Internal Server Error")
}

// shutdownGuard refuses every request once shutdown has begun.
func (s *Server) shutdownGuard(c *gin.Context) {
	if s.shuttingDown.Load() {
		c.Header("Retry-After", "15")
		s.fail(c, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	c.Next()
}
