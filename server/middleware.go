package server

import (
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
)

// stamp records when the request started, for the duration every API reply carries, and names
// the instance that answers. Every reply, JSON and files included, says that its content type
// is to be believed. Once every handler has returned, the request's state goes back to be
// reused (guard.Done).
func (s *Server) stamp(c *gin.Context) {
	guard.Start(c)
	if s.deps.TrustedProxies.ContainsIP(c.RemoteIP()) {
		guard.MarkFromProxy(c)
	}
	// The values are shared, not made per reply (Header.Set makes a slice for each): net/http
	// only reads them, and a handler that changes one replaces the slice.
	h := c.Writer.Header()
	h["X-Content-Type-Options"] = nosniff
	if inst := s.role().instance; inst != nil {
		h["X-Shoal-Instance"] = inst
	}
	c.Next()
	guard.Done(c)
}

// nosniff is the value of every reply's X-Content-Type-Options.
var nosniff = []string{"nosniff"}

// accessLog logs each request at debug level and each 5xx at error level, with the context
// known here. Below 500, with debug off (the default), it builds nothing: every worker call
// passes here, and the record's attributes were 5 of a beat's 69 allocations.
func (s *Server) accessLog(c *gin.Context) {
	c.Next()
	status := c.Writer.Status()
	if status < 500 && !s.logger.Enabled(c.Request.Context(), slog.LevelDebug) {
		return
	}
	attrs := []any{"method", c.Request.Method, "path", c.Request.URL.Path, "status", status,
		"duration", guard.SinceStart(c).Seconds(), "remote", guard.ClientIP(c)}
	if status == http.StatusServiceUnavailable && s.shuttingDown.Load() {
		s.logger.Debug("refused while shutting down", attrs...) // expected, by the thousand
		return
	}
	if guard.RefusalExpected(c) {
		s.logger.Debug("refused: a limit was reached", attrs...) // any client can flood these
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

// shutdownGuard refuses every request once shutdown has begun with a 503: worker calls get
// api.RetryLater's text, which fishtest's worker and Shoal's retry (a JSON error would make them
// drop the update and the task), everything else the path's error shape.
func (s *Server) shutdownGuard(c *gin.Context) {
	if s.shuttingDown.Load() {
		if workerPaths[c.Request.URL.Path] {
			api.RetryLater(c, "server is shutting down")
			return
		}
		c.Header("Retry-After", "15")
		s.fail(c, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	c.Next()
}
