// Package guard holds what the server's two audiences, the worker and JSON API (server/api)
// and the web UI (server/ui), share in taking a request: who the client is and whether it came
// through the local proxy, the limits on password checks and signups, the slots of the reads
// that scan, the pace a large body must keep, when the request arrived, and the mark on a
// refusal made by design. It knows nothing of either audience's routes or reply shapes.
package guard

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// startedKey is where the request's requestState is kept: its start time, for the duration
// field.
const startedKey = "shoal.started"

// requestState is what a request carries from Start to Done: when it arrived, and the map of
// its gin keys (c.Set). Gin makes a new map for every request that sets a key, and every
// request sets some (the start time, the scheduler of a worker call): reusing one spares a
// map of a few hundred bytes per request. It also keeps what is worked out once per request:
// whether the peer is a trusted proxy, and the client's address (ClientIP).
type requestState struct {
	start     time.Time
	keys      map[any]any
	fromProxy bool
	// clientIP is gin's ClientIP, once hasClientIP.
	clientIP    string
	hasClientIP bool
}

// stateOf is the request's requestState, nil for a request Start did not see.
func stateOf(c *gin.Context) *requestState {
	v, _ := c.Get(startedKey)
	st, _ := v.(*requestState)
	return st
}

// maxPooledKeys bounds the maps that go back to the pool: a request that set many keys (a
// web page's) would keep a large map alive for the worker calls that need a few.
const maxPooledKeys = 8

var requestStates = sync.Pool{New: func() any {
	return &requestState{keys: make(map[any]any, maxPooledKeys)}
}}

// Start records that the request arrives now, and gives it a map for its keys; the server's
// first middleware calls it, and Done once the handlers after it have returned.
func Start(c *gin.Context) {
	st := requestStates.Get().(*requestState)
	st.start = time.Now()
	if c.Keys == nil {
		c.Keys = st.keys
	}
	c.Set(startedKey, st)
}

// Done ends what Start began: the request's map of keys is emptied and reused, so neither the
// request nor anything it started may read its keys after Done (gin's own rule for a Context
// once its handlers have returned).
func Done(c *gin.Context) {
	st := stateOf(c)
	if st == nil {
		return
	}
	c.Keys = nil
	st.fromProxy, st.clientIP, st.hasClientIP = false, "", false
	if len(st.keys) > maxPooledKeys {
		st.keys = make(map[any]any, maxPooledKeys)
	} else {
		clear(st.keys)
	}
	requestStates.Put(st)
}

// SinceStart is the time since Start saw the request arrive, 0 for a request it did not see.
func SinceStart(c *gin.Context) time.Duration {
	if st := stateOf(c); st != nil {
		return time.Since(st.start)
	}
	return 0
}

// ClientIP is c.ClientIP(), worked out once per request: gin's parses the peer's address and,
// for a trusted proxy, its forwarding headers each time, and a worker call asks for it up to
// three times. Only from the request's own goroutine, as the Context itself.
func ClientIP(c *gin.Context) string {
	st := stateOf(c)
	if st == nil {
		return c.ClientIP()
	}
	if !st.hasClientIP {
		st.clientIP, st.hasClientIP = c.ClientIP(), true
	}
	return st.clientIP
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
