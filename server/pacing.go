package server

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Beyond fishtest, request_task paces the workers it turns away ("too busy", or over the
// account's or address's rate): the reply carries retry_after, the seconds to wait before asking
// again, drawn at random over a window that grows with how many were turned away in the last
// second or two, so that a fleet returning at once (a restart, a healed network) comes back
// spread out instead of in waves of fishtest's fixed backoff. Shoal's worker honours it in place
// of its own backoff; fishtest's worker ignores the key and keeps its backoff.
const (
	// pacedReturnsPerSecond is the rate at which the turned-away workers are asked to return:
	// below what one core gives tasks to in a storm (5,000 workers in 2.6 to 4.3 s, measured
	// by the bench's storm), leaving room for workers arriving meanwhile.
	pacedReturnsPerSecond = 1000
	paceFloor             = time.Second      // the least wait asked for
	paceWindowMax         = 60 * time.Second // the widest spread, however many were turned away
)

// requestPacer counts the request_task calls turned away and draws each one's wait. Safe for
// concurrent use.
type requestPacer struct {
	// speed is how much faster than real time the server runs (as taskLimiter's): the floor,
	// a protocol period, is divided by it; the spread is not, since it follows what the
	// server's processor can serve, which no time scale changes.
	speed float64

	mu        sync.Mutex
	second    int64 // the Unix second count is for
	count     int   // turned away in that second
	prevCount int   // turned away in the second before it
}

func newRequestPacer(speed float64) *requestPacer { return &requestPacer{speed: speed} }

// turnedAway records one more request_task turned away at now and returns the wait to ask of
// it, in seconds; u is a uniform draw in [0, 1).
func (p *requestPacer) turnedAway(now time.Time, u float64) float64 {
	p.mu.Lock()
	switch sec := now.Unix(); {
	case sec == p.second+1:
		p.second, p.prevCount, p.count = sec, p.count, 0
	case sec != p.second:
		p.second, p.prevCount, p.count = sec, 0, 0
	}
	p.count++
	recent := p.count + p.prevCount
	p.mu.Unlock()
	window := min(time.Duration(recent)*time.Second/pacedReturnsPerSecond, paceWindowMax)
	return paceFloor.Seconds()/p.speed + u*window.Seconds()
}

// retryAfter is turnedAway with the time now and a random draw.
func (p *requestPacer) retryAfter() *float64 {
	w := p.turnedAway(time.Now(), rand.Float64())
	return &w
}
