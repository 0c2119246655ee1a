package server

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// The limits on logging in and signing up. A login that fails counts against both the client's
// address and the username tried, so neither guessing one account's password from many
// addresses nor trying many accounts from one address gets far; a login that succeeds costs
// nothing (the credential cache makes it cheap), so people sharing an address are not locked
// out by each other's successes. A signup counts once its form is valid, as that is when it
// costs a password hash and leaves an account for an approver to look at.
const (
	loginPerIPRate     = rate.Limit(10.0 / 60) // 10 a minute
	loginPerIPBurst    = 5
	loginPerUserRate   = rate.Limit(5.0 / 60) // 5 a minute
	loginPerUserBurst  = 5
	signupPerIPRate    = rate.Limit(3.0 / 3600) // 3 an hour
	signupPerIPBurst   = 3
	limiterMaxKeys     = 100_000 // about 150 bytes a key
	limiterMinIdleTime = 10 * time.Minute
)

// keyedLimiter is a token bucket per key (a client address, a username). Keys idle long
// enough to have refilled their bucket are dropped, as a fresh bucket is the same; the map
// never holds more than max keys. Safe for concurrent use.
type keyedLimiter struct {
	limit rate.Limit
	burst int
	max   int
	// idle is how long a key must go unused before it is dropped: at least the time its
	// bucket takes to fill from empty.
	idle time.Duration
	now  func() time.Time

	mu        sync.Mutex
	keys      map[string]*limiterEntry
	lastSweep time.Time
}

type limiterEntry struct {
	lim  *rate.Limiter
	used time.Time
}

// newKeyedLimiter returns a limiter allowing burst events at once per key, refilled at limit
// events a second, remembering at most maxKeys keys.
func newKeyedLimiter(limit rate.Limit, burst, maxKeys int, now func() time.Time) *keyedLimiter {
	fill := time.Duration(float64(burst) / float64(limit) * float64(time.Second))
	return &keyedLimiter{limit: limit, burst: burst, max: maxKeys, idle: max(fill, limiterMinIdleTime),
		now: now, keys: map[string]*limiterEntry{}}
}

// entry returns key's bucket, creating it, and sweeps idle keys from time to time. The caller
// holds k.mu.
func (k *keyedLimiter) entry(key string, now time.Time) *limiterEntry {
	if now.Sub(k.lastSweep) >= k.idle || (len(k.keys) >= k.max && k.keys[key] == nil) {
		k.sweep(now)
	}
	e := k.keys[key]
	if e == nil {
		e = &limiterEntry{lim: rate.NewLimiter(k.limit, k.burst)}
		k.keys[key] = e
	}
	e.used = now
	return e
}

// sweep drops idle keys and, if the map is still full, arbitrary ones (map order is random)
// down to nine tenths of the bound, so a full map is swept once per max/10 new keys rather
// than on every one. The caller holds k.mu.
func (k *keyedLimiter) sweep(now time.Time) {
	k.lastSweep = now
	for key, e := range k.keys {
		if now.Sub(e.used) >= k.idle {
			delete(k.keys, key)
		}
	}
	target := k.max - k.max/10 - 1
	for key := range k.keys {
		if len(k.keys) <= target {
			break
		}
		delete(k.keys, key)
	}
}

// wait reports how long key must wait before its next event is allowed: 0 if one is allowed
// now. It takes nothing from the bucket.
func (k *keyedLimiter) wait(key string) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	e := k.keys[key]
	if e == nil {
		return 0
	}
	tokens := e.lim.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - tokens) / float64(k.limit) * float64(time.Second)))
}

// take counts one event for key, allowed or not (an empty bucket stays empty).
func (k *keyedLimiter) take(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	k.entry(key, now).lim.AllowN(now, 1)
}

// size returns how many keys the limiter remembers.
func (k *keyedLimiter) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// accountLimiters are one server's login and signup limits.
type accountLimiters struct {
	loginIP, loginUser, signupIP *keyedLimiter
}

func newAccountLimiters(now func() time.Time) *accountLimiters {
	return &accountLimiters{
		loginIP:   newKeyedLimiter(loginPerIPRate, loginPerIPBurst, limiterMaxKeys, now),
		loginUser: newKeyedLimiter(loginPerUserRate, loginPerUserBurst, limiterMaxKeys, now),
		signupIP:  newKeyedLimiter(signupPerIPRate, signupPerIPBurst, limiterMaxKeys, now),
	}
}

// limits returns s's login and signup limiters.
func (s *Server) limits() *accountLimiters { return s.limiters }

// tooMany sets the headers of a refused request: 429 is the status, Retry-After the whole
// seconds to wait (at least 1). It returns the wait, rounded up, for the page's message.
func tooMany(c *gin.Context, wait time.Duration) time.Duration {
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	c.Header("Retry-After", strconv.FormatInt(secs, 10))
	return time.Duration(secs) * time.Second
}

// statusTooMany is the status of a rate-limited form.
const statusTooMany = http.StatusTooManyRequests

// waitText says how long to wait in words: "40 seconds", "3 minutes".
func waitText(d time.Duration) string {
	switch {
	case d < 2*time.Minute:
		return strconv.Itoa(int(math.Ceil(d.Seconds()))) + " seconds"
	case d < 2*time.Hour:
		return strconv.Itoa(int(math.Ceil(d.Minutes()))) + " minutes"
	default:
		return strconv.Itoa(int(math.Ceil(d.Hours()))) + " hours"
	}
}
