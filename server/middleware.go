package server

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// expectedRefusalKey marks a 5xx that a limit answered by design (a refused live stream, a busy
// upload): the access log keeps it at debug level, as any client can cause as many as it likes.
const expectedRefusalKey = "shoal.expectedRefusal"

// stamp records when the request started, for the duration every API reply carries, and names
// the instance that answers. Every reply, JSON and files included, says that its content type
// is to be believed.
func (s *Server) stamp(c *gin.Context) {
	c.Set(startedKey, time.Now())
	c.Header("X-Content-Type-Options", "nosniff")
	if inst := s.instance(); inst != "" {
		c.Header("X-Shoal-Instance", inst)
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
	if c.GetBool(expectedRefusalKey) {
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
// retryLater's text, which fishtest's worker and Shoal's retry (a JSON error would make them
// drop the update and the task), everything else the path's error shape.
func (s *Server) shutdownGuard(c *gin.Context) {
	if s.shuttingDown.Load() {
		if workerPaths[c.Request.URL.Path] {
			retryLater(c, "server is shutting down")
			return
		}
		c.Header("Retry-After", "15")
		s.fail(c, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	c.Next()
}

// DefaultTransferTimeout is how long an upload or download of a PGN or a network may take when
// Deps.TransferTimeout is zero: longer than the server's read and write timeouts, which bound
// every other request.
const DefaultTransferTimeout = 10 * time.Minute

// transferTimeout is how long a large upload or download may take.
func (s *Server) transferTimeout() time.Duration {
	if s.deps.TransferTimeout > 0 {
		return s.deps.TransferTimeout
	}
	return DefaultTransferTimeout
}

// minBodyRate is the slowest a large upload may arrive, on average, once its first
// read-timeout's grace has passed: a slow home uplink sends 64 KiB/s and more, a client that
// trickles a byte a second is holding a connection, not uploading.
const minBodyRate = 16 << 10 // bytes per second

// readTimeout is the HTTP server's read timeout, the grace a paced body starts with.
func (s *Server) readTimeout() time.Duration {
	if s.deps.ReadTimeout > 0 {
		return s.deps.ReadTimeout
	}
	return 30 * time.Second
}

// allowSlowBody lets this request's body arrive for as long as it keeps up minBodyRate after a
// read-timeout's grace, up to the transfer timeout, past the server's read timeout; the reply
// may leave until the transfer timeout. Only routes that take large bodies use it.
func (s *Server) allowSlowBody(c *gin.Context) {
	rc := http.NewResponseController(c.Writer)
	start := time.Now()
	last := start.Add(s.transferTimeout())
	p := &pacedBody{ReadCloser: c.Request.Body, rc: rc, start: start, grace: s.readTimeout(), last: last}
	p.extend()
	_ = rc.SetWriteDeadline(last)
	c.Request.Body = p
}

// pacedBody moves its connection's read deadline on as bytes arrive: grace from the start, plus
// the time the bytes so far earn at minBodyRate, never past last.
type pacedBody struct {
	io.ReadCloser
	rc          *http.ResponseController
	start, last time.Time
	grace       time.Duration
	read        int64
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.read += int64(n)
	switch {
	case err == nil:
		p.extend()
	case errors.Is(err, io.EOF):
		// The whole body is in. net/http now watches the connection for the client leaving,
		// with no deadline; one left here would cancel the request's context while the
		// handler still works on the upload.
		_ = p.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (p *pacedBody) extend() {
	earned := time.Duration(float64(p.read) / minBodyRate * float64(time.Second))
	deadline := p.start.Add(p.grace + earned)
	if deadline.After(p.last) {
		deadline = p.last
	}
	_ = p.rc.SetReadDeadline(deadline)
}

// slowReply wraps a download: its reply may take the transfer timeout from now to leave, past
// the server's write timeout.
func (s *Server) slowReply(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(s.transferTimeout()))
		h(c)
	}
}
