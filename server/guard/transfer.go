package guard

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// DefaultTransferTimeout is how long an upload or download of a PGN or a network may take when
// Transfers.Transfer is zero: longer than the server's read and write timeouts, which bound
// every other request.
const DefaultTransferTimeout = 10 * time.Minute

// Transfers are the time limits of large uploads and downloads: the routes that take or send
// them extend the HTTP server's deadlines for their own connection.
type Transfers struct {
	// Read is the HTTP server's read timeout: the grace a large upload gets before it must keep
	// up a minimum rate; zero means 30 s.
	Read time.Duration
	// Transfer is how long an upload or download of a PGN or a network may take, past the
	// HTTP server's read and write timeouts; zero means DefaultTransferTimeout.
	Transfer time.Duration
}

// transferTimeout is how long a large upload or download may take.
func (t Transfers) transferTimeout() time.Duration {
	if t.Transfer > 0 {
		return t.Transfer
	}
	return DefaultTransferTimeout
}

// minBodyRate is the slowest a large upload may arrive, on average, once its first
// read-timeout's grace has passed: a slow home uplink sends 64 KiB/s and more, a client that
// trickles a byte a second is holding a connection, not uploading.
const minBodyRate = 16 << 10 // bytes per second

// readTimeout is the HTTP server's read timeout, the grace a paced body starts with.
func (t Transfers) readTimeout() time.Duration {
	if t.Read > 0 {
		return t.Read
	}
	return 30 * time.Second
}

// AllowSlowBody lets this request's body arrive for as long as it keeps up minBodyRate after a
// read-timeout's grace, up to the transfer timeout, past the server's read timeout; the reply
// may leave until the transfer timeout. Only routes that take large bodies use it.
func (t Transfers) AllowSlowBody(c *gin.Context) {
	rc := http.NewResponseController(c.Writer)
	start := time.Now()
	last := start.Add(t.transferTimeout())
	p := &pacedBody{ReadCloser: c.Request.Body, rc: rc, start: start, grace: t.readTimeout(), last: last}
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

// SlowReply wraps a download: its reply may take the transfer timeout from now to leave, past
// the server's write timeout.
func (t Transfers) SlowReply(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(t.transferTimeout()))
		h(c)
	}
}
