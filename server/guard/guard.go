// Package guard holds what the server's two audiences, the worker and JSON API (server/api)
// and the web UI (server/ui), share in taking a request: who the client is and whether it came
// through the local proxy, the limits on password checks and signups, the slots of the reads
// that scan, the pace a large body must keep, when the request arrived, and the mark on a
// refusal made by design. It knows nothing of either audience's routes or reply shapes.
package guard

import (
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/gin-gonic/gin"
)

// startedKey is where the request's start time is kept, for the duration field.
const startedKey = "shoal.started"

// Start records that the request arrives now; the server's first middleware calls it.
func Start(c *gin.Context) { c.Set(startedKey, time.Now()) }

// SinceStart is the time since Start saw the request arrive, 0 for a request it did not see.
func SinceStart(c *gin.Context) time.Duration {
	if t, ok := c.Get(startedKey); ok {
		return time.Since(t.(time.Time))
	}
	return 0
}

// expectedRefusalKey marks a 5xx that a limit answered by design (a refused live stream, a busy
// upload): the access log keeps it at debug level, as any client can cause as many as it likes.
const expectedRefusalKey = "shoal.expectedRefusal"

// ExpectRefusal marks the request's refusal as one made by design (see expectedRefusalKey).
func ExpectRefusal(c *gin.Context) { c.Set(expectedRefusalKey, true) }

// RefusalExpected reports whether ExpectRefusal marked the request.
func RefusalExpected(c *gin.Context) bool { return c.GetBool(expectedRefusalKey) }

// StatusClientClosedRequest is nginx's status for a request whose client disconnected.
const StatusClientClosedRequest = 499

// NewToken returns 32 random bytes in URL-safe base64: a session id, a CSRF token, a key.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
