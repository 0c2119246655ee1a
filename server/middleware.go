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
	if status == http.StatusServiceUnavailable && s.shuttingDown.Load() {
		s.logger.Debug("refused while shutting down", attrs...) // expected, by the thousand
		return
	}
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

// shutdownGuard refuses every request once shutdown has begun: 503 in the path's error shape,
// except for request_version, which gets plain text. A fishtest worker quits for good on a
// JSON error from request_version but backs off from a reply that is not JSON, as from
// fishtest's own shutdown; every other endpoint's JSON error only makes it back off.
func (s *Server) shutdownGuard(c *gin.Context) {
	if s.shuttingDown.Load() {
		c.Header("Retry-After", "15")
		if c.Request.URL.Path == "/api/request_version" {
			c.String(http.StatusServiceUnavailable, "server is shutting down")
			c.Abort()
			return
		}
		s.fail(c, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	c.Next()
}
