package api

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Beyond fishtest, request_task paces the workers it turns away ("too busy", or over the
// account's or address's rate): the reply carries retry_after, the seconds to wait before asking
// again, drawn at random over a window long enough for the workers turned away in the last
// second or two to come back at the rate this server has lately been giving out tasks, so that
// a fleet returning at once (a restart, a healed network) comes back spread out instead of in
// waves of fishtest's fixed backoff. Shoal's worker honours it in place of its own backoff;
// fishtest's worker ignores the key and keeps its backoff.
const (
	// minPacedReturns is the return rate assumed when the server has given out fewer tasks a
	// second than this lately (at start, or with little work).
	minPacedReturns = 100
	paceFloor       = time.Second      // the least wait asked for
	paceWindowMax   = 60 * time.Second // the widest spread, however many were turned away
)

// requestPacer counts, per second, the request_task calls turned away and those given a task,
// and draws each turned-away call's wait. Safe for concurrent use.
type requestPacer struct {
	// speed is how much faster than real time the server runs (as taskLimiter's): the floor,
	// a protocol period, is divided by it; the spread is not, since it follows what the
	// server's processor serves, which no time scale changes.
	speed float64

	mu     sync.Mutex
	second int64  // the Unix second the counts' first cells are for
	away   [2]int // turned away in that second, and in the one before it
	served [2]int // given a task in that second, and in the one before it
}

func newRequestPacer(speed float64) *requestPacer { return &requestPacer{speed: speed} }

// advance moves the counts to now's second. p.mu is held.
func (p *requestPacer) advance(now time.Time) {
	switch sec := now.Unix(); {
	case sec == p.second+1:
		p.second, p.away, p.served = sec, [2]int{0, p.away[0]}, [2]int{0, p.served[0]}
	case sec != p.second:
		p.second, p.away, p.served = sec, [2]int{}, [2]int{}
	}
}

// gaveTask records a request_task call given a task at now.
func (p *requestPacer) gaveTask(now time.Time) {
	p.mu.Lock()
	p.advance(now)
	p.served[0]++
	p.mu.Unlock()
}

// turnedAway records one more request_task turned away at now and returns the wait to ask of
// it, in seconds; u is a uniform draw in [0, 1).
func (p *requestPacer) turnedAway(now time.Time, u float64) float64 {
	p.mu.Lock()
	p.advance(now)
	p.away[0]++
	recent := p.away[0] + p.away[1]
	rate := max(p.served[0], p.served[1], minPacedReturns)
	p.mu.Unlock()
	window := min(time.Duration(recent)*time.Second/time.Duration(rate), paceWindowMax)
	return paceFloor.Seconds()/p.speed + u*window.Seconds()
}

// retryAfter is turnedAway with the time now and a random draw.
func (p *requestPacer) retryAfter() *float64 {
	w := p.turnedAway(time.Now(), rand.Float64())
	return &w
}
