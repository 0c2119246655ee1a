package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"github.com/shoal-chess/shoal/rundb"
)

// The limits on checking passwords and signing up. Only failed logins (a wrong username or
// password) count; a login that succeeds costs nothing (the credential cache makes it cheap),
// so people sharing an address are not locked out by each other's successes.
//
// A check holds a token of each of its buckets while the password is checked: kept if the
// login fails, given back otherwise. A check starts only while a bucket has a token for it
// beyond those held, and waits while the rest are held by checks in flight (until they end),
// so that any number of parallel guesses gets no more checks than the bucket has tokens, while
// many parallel right passwords (a fleet starting up) are delayed, not refused.
//
// On the login and profile forms a failure counts against the client's address (guessing
// many accounts from one place), the username from that address (the strict limit) and the
// username from anywhere (a loose backstop against guessing from many addresses, loose so that
// strangers cannot lock a person out of the form). The worker and submission API count
// failures per address only, and loosely: a large fleet shares an address, and its workers
// use the right password. A signup counts once its form is valid, as that is when it costs a
// password hash and leaves an account for an approver to look at.
const (
	loginPerIPRate       = rate.Limit(10.0 / 60) // 10 a minute
	LoginPerIPBurst      = 5
	loginPerUserIPRate   = rate.Limit(5.0 / 60) // 5 a minute
	LoginPerUserIPBurst  = 5
	loginPerUserRate     = rate.Limit(30.0 / 60) // 30 a minute
	LoginPerUserBurst    = 30
	apiLoginPerIPRate    = rate.Limit(30.0 / 60) // 30 a minute
	APILoginPerIPBurst   = 30
	apiLoginPerUserRate  = rate.Limit(30.0 / 60) // 30 a minute
	APILoginPerUserBurst = 30
	// trustedClientTTL is how long a client that logged in as a user stays exempt from that
	// user's limit from anywhere; trustedClientMax bounds how many such pairs are kept.
	trustedClientTTL    = 30 * 24 * time.Hour
	trustedClientMax    = 200_000
	signupPerIPRate     = rate.Limit(3.0 / 3600) // 3 an hour
	SignupPerIPBurst    = 3
	limiterMaxKeys      = 100_000 // about 200 bytes a key
	limiterMinIdleTime  = 10 * time.Minute
	maxHeldWait         = 10 * time.Second // the longest a check waits for others in flight
	ipv6LimitPrefixBits = 64               // one site's share of IPv6 addresses
	userIPKeySeparator  = "\x00"
)

// keyedLimiter is a token bucket per key (a client address, a username). Keys idle long
// enough to have refilled their bucket are dropped, as a fresh bucket is the same; the map
// never holds more than max keys (but keys with checks in flight). Safe for concurrent use.
type keyedLimiter struct {
	limit rate.Limit // tokens added a second
	burst int        // a bucket's size; a fresh bucket is full
	max   int
	// idle is how long a key must go unused before it is dropped: at least the time its
	// bucket takes to fill from empty.
	idle time.Duration
	now  func() time.Time

	mu        sync.Mutex
	keys      map[string]*limiterEntry
	lastSweep time.Time
}

// limiterEntry is one key's bucket: tokens at time last, held of them by checks in flight.
type limiterEntry struct {
	tokens float64
	held   int
	last   time.Time
	// freed, when someone waits, is closed (and cleared) when a held token is settled.
	freed chan struct{}
}

// newKeyedLimiter returns a limiter allowing burst events at once per key, refilled at limit
// events a second, remembering at most maxKeys keys.
func newKeyedLimiter(limit rate.Limit, burst, maxKeys int, now func() time.Time) *keyedLimiter {
	fill := time.Duration(float64(burst) / float64(limit) * float64(time.Second))
	return &keyedLimiter{limit: limit, burst: burst, max: maxKeys, idle: max(fill, limiterMinIdleTime),
		now: now, keys: map[string]*limiterEntry{}}
}

// refill brings e's tokens up to now. The caller holds k.mu.
func (k *keyedLimiter) refill(e *limiterEntry, now time.Time) {
	if now.After(e.last) {
		e.tokens = min(float64(k.burst), e.tokens+now.Sub(e.last).Seconds()*float64(k.limit))
		e.last = now
	}
}

// entry returns key's bucket refilled to now, creating it, and sweeps idle keys from time to
// time. The caller holds k.mu.
func (k *keyedLimiter) entry(key string, now time.Time) *limiterEntry {
	if now.Sub(k.lastSweep) >= k.idle || (len(k.keys) >= k.max && k.keys[key] == nil) {
		k.sweep(now)
	}
	e := k.keys[key]
	if e == nil {
		e = &limiterEntry{tokens: float64(k.burst), last: now}
		k.keys[key] = e
	}
	k.refill(e, now)
	return e
}

// sweep drops idle keys and, if the map is still full, arbitrary ones (map order is random)
// down to nine tenths of the bound, so a full map is swept once per max/10 new keys rather
// than on every one. Keys with checks in flight stay. The caller holds k.mu.
func (k *keyedLimiter) sweep(now time.Time) {
	k.lastSweep = now
	for key, e := range k.keys {
		if e.held == 0 && now.Sub(e.last) >= k.idle {
			delete(k.keys, key)
		}
	}
	target := k.max - k.max/10 - 1
	for key, e := range k.keys {
		if len(k.keys) <= target {
			break
		}
		if e.held == 0 {
			delete(k.keys, key)
		}
	}
}

// waitFor is how long a bucket holding tokens takes to hold one. The caller holds k.mu.
func (k *keyedLimiter) waitFor(tokens float64) time.Duration {
	if tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - tokens) / float64(k.limit) * float64(time.Second)))
}

// wait reports how long key must wait before its next event is allowed: 0 if one is allowed
// now (or once the checks in flight end, if they all succeed). It takes nothing.
func (k *keyedLimiter) wait(key string) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.keys[key]
	if e == nil {
		return 0
	}
	k.refill(e, k.now())
	return k.waitFor(e.tokens)
}

// reserve holds one token of key's bucket for a check and returns 0; or, if the bucket has
// none to spare, holds nothing and returns how long to wait. While the bucket's tokens are all
// held by checks in flight it waits for them to end (at most maxHeldWait, or until ctx ends),
// as they may give their tokens back. Every 0 must be followed by one settle(key, …).
func (k *keyedLimiter) reserve(ctx context.Context, key string) time.Duration {
	deadline := time.NewTimer(maxHeldWait)
	defer deadline.Stop()
	for {
		k.mu.Lock()
		e := k.entry(key, k.now())
		free := e.tokens - float64(e.held)
		if free >= 1 {
			e.held++
			k.mu.Unlock()
			return 0
		}
		wait := k.waitFor(free)
		if e.held == 0 {
			k.mu.Unlock()
			return wait
		}
		if e.freed == nil {
			e.freed = make(chan struct{})
		}
		freed := e.freed
		k.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return max(wait, time.Second)
		case <-deadline.C:
			return max(wait, time.Second)
		}
	}
}

// settle ends a check that reserve let start: a failure keeps its token (the bucket loses
// it), anything else gives it back. Checks waiting for the bucket look again.
func (k *keyedLimiter) settle(key string, failed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.keys[key]
	if e == nil || e.held == 0 {
		return
	}
	k.refill(e, k.now())
	e.held--
	if failed {
		e.tokens = max(0, e.tokens-1)
	}
	if e.freed != nil {
		close(e.freed)
		e.freed = nil
	}
}

// size returns how many keys the limiter remembers.
func (k *keyedLimiter) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// limitKey is one bucket: a limiter and a key of it.
type limitKey struct {
	lim *keyedLimiter
	key string
}

// Reservation is the tokens a check holds until its outcome is known. A nil Reservation
// holds nothing. Call Release in a defer right after reserving, so that no path (a panic
// included) leaves a token held; Settle, Consume and Release end it once, later calls do
// nothing.
type Reservation struct {
	held []limitKey
}

// reserve holds a token of every bucket, in order, or of none: if any bucket has none to
// spare, it gives back what it holds and returns that bucket's wait.
func reserve(ctx context.Context, buckets ...limitKey) (*Reservation, time.Duration) {
	r := &Reservation{}
	for _, b := range buckets {
		if w := b.lim.reserve(ctx, b.key); w > 0 {
			r.Release()
			return nil, w
		}
		r.held = append(r.held, b)
	}
	return r, 0
}

func (r *Reservation) end(failed bool) {
	if r == nil {
		return
	}
	for _, b := range r.held {
		b.lim.settle(b.key, failed)
	}
	r.held = nil
}

// Release gives the tokens back: the attempt does not count.
func (r *Reservation) Release() { r.end(false) }

// Consume keeps the tokens: the attempt counts.
func (r *Reservation) Consume() { r.end(true) }

// Settle ends a password check's reservation: a failed login (rundb.ErrBadCredentials: an
// unknown user or a wrong password) keeps its tokens; any other outcome, success included,
// gives them back. A blocked or pending account's error only comes after its password matched,
// and a database error tells the client nothing about the password.
func (r *Reservation) Settle(authErr error) { r.end(errors.Is(authErr, rundb.ErrBadCredentials)) }

// accountLimiters are one server's limits on password checks and signups.
type accountLimiters struct {
	loginIP, loginUserIP, loginUser, apiLoginIP, apiLoginUser, signupIP *keyedLimiter
	// trusted are the clients that logged in as a user: the user's limit from anywhere, which
	// strangers can exhaust, does not apply to them.
	trusted *trustedClients
}

func newAccountLimiters(now func() time.Time) *accountLimiters {
	return &accountLimiters{
		loginIP:      newKeyedLimiter(loginPerIPRate, LoginPerIPBurst, limiterMaxKeys, now),
		loginUserIP:  newKeyedLimiter(loginPerUserIPRate, LoginPerUserIPBurst, limiterMaxKeys, now),
		loginUser:    newKeyedLimiter(loginPerUserRate, LoginPerUserBurst, limiterMaxKeys, now),
		apiLoginIP:   newKeyedLimiter(apiLoginPerIPRate, APILoginPerIPBurst, limiterMaxKeys, now),
		apiLoginUser: newKeyedLimiter(apiLoginPerUserRate, APILoginPerUserBurst, limiterMaxKeys, now),
		signupIP:     newKeyedLimiter(signupPerIPRate, SignupPerIPBurst, limiterMaxKeys, now),
		trusted:      newTrustedClients(trustedClientTTL, trustedClientMax, now),
	}
}

// reserveLogin reserves a web login's tokens (the login form, the profile's current password)
// for username (any case) from address ip. The buckets are always taken in the same order, so
// checks waiting for each other cannot wait in a circle. A client that logged in as the user
// before is not held to the user's limit from anywhere: guesses from elsewhere cannot lock the
// owner out.
func (l *accountLimiters) reserveLogin(ctx context.Context, ip, username string) (*Reservation, time.Duration) {
	name := strings.ToLower(username)
	buckets := []limitKey{{l.loginIP, ip}, {l.loginUserIP, name + userIPKeySeparator + ip}}
	if !l.trusted.has(name, ip) {
		buckets = append(buckets, limitKey{l.loginUser, name})
	}
	return reserve(ctx, buckets...)
}

// trustedClients remembers which client addresses logged in as which users, for a while. Safe
// for concurrent use.
type trustedClients struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
}

func newTrustedClients(ttl time.Duration, max int, now func() time.Time) *trustedClients {
	return &trustedClients{ttl: ttl, max: max, now: now, seen: map[string]time.Time{}}
}

func (t *trustedClients) has(name, ip string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[strings.ToLower(name)+userIPKeySeparator+ip]
	return ok && t.now().Sub(at) < t.ttl
}

// remember records a successful login as name from ip.
func (t *trustedClients) remember(name, ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.seen) >= t.max {
		for k, at := range t.seen {
			if now.Sub(at) >= t.ttl {
				delete(t.seen, k)
			}
		}
		if len(t.seen) >= t.max {
			clear(t.seen) // a flood of distinct logins: owners are limited as strangers until they log in again
		}
	}
	t.seen[strings.ToLower(name)+userIPKeySeparator+ip] = now
}

// Logins are one server's limits on password checks and signups, which the API's and the web
// UI's checks count against alike, and the log of the logins that failed or were refused. Safe
// for concurrent use.
type Logins struct {
	limits *accountLimiters
	log    *throttledLog // failed and refused logins, a line a minute per user and client
}

// NewLogins returns fresh limits that log to logger.
func NewLogins(logger *slog.Logger) *Logins {
	return &Logins{limits: newAccountLimiters(time.Now), log: newThrottledLog(logger, time.Minute, 100_000)}
}

// ReserveLogin reserves a web login's tokens (the login form, the profile's current password)
// for username (any case) from the client key ip (ClientKey): see accountLimiters.reserveLogin.
func (l *Logins) ReserveLogin(ctx context.Context, ip, username string) (*Reservation, time.Duration) {
	return l.limits.reserveLogin(ctx, ip, username)
}

// ReserveAPILogin reserves the tokens of an API call's password check (worker and submission
// calls) for the client key ip and, unless this client logged in as the user before, for the
// username from anywhere. A wait above 0 refuses the check.
func (l *Logins) ReserveAPILogin(ctx context.Context, ip, username string) (*Reservation, time.Duration) {
	buckets := []limitKey{{l.limits.apiLoginIP, ip}}
	if name := strings.ToLower(username); !l.limits.trusted.has(name, ip) {
		buckets = append(buckets, limitKey{l.limits.apiLoginUser, name})
	}
	return reserve(ctx, buckets...)
}

// SignupWait is how long the client key ip must wait before its next signup counts; 0 if one
// may count now. It takes nothing.
func (l *Logins) SignupWait(ip string) time.Duration { return l.limits.signupIP.wait(ip) }

// ReserveSignup reserves a signup's token for the client key ip, once its form is valid.
func (l *Logins) ReserveSignup(ctx context.Context, ip string) (*Reservation, time.Duration) {
	return reserve(ctx, limitKey{l.limits.signupIP, ip})
}

// Checked records the outcome of a password check as username from c's address: a success
// makes the client trusted for that user (the limit from anywhere no longer applies to it), a
// wrong username or password is logged. via names the entry point.
func (l *Logins) Checked(c *gin.Context, via, username string, err error) {
	switch {
	case err == nil:
		l.limits.trusted.remember(username, ClientKey(c))
	case errors.Is(err, rundb.ErrBadCredentials):
		l.log.warn("failed login", "user", strings.ToLower(username), "via", via, "remote", ClientIP(c))
	}
}

// Refused logs a login refused by the limits, without checking its password.
func (l *Logins) Refused(c *gin.Context, via, username string, wait time.Duration) {
	l.log.warn("login refused: too many failures", "user", strings.ToLower(username), "via", via,
		"remote", ClientIP(c), "retry_after", wait)
}

// throttledLog writes a warning at most once a period for each message, user and client: a
// flood of failed logins is a few lines a minute with how many were not written. Safe for
// concurrent use.
type throttledLog struct {
	logger *slog.Logger
	period time.Duration
	max    int

	mu   sync.Mutex
	last map[string]*throttled
}

type throttled struct {
	at      time.Time
	skipped int
}

func newThrottledLog(logger *slog.Logger, period time.Duration, max int) *throttledLog {
	return &throttledLog{logger: logger, period: period, max: max, last: map[string]*throttled{}}
}

// warn logs msg with attrs unless the same msg with the same attrs was logged within the
// period; the next line written says how many were not.
func (t *throttledLog) warn(msg string, attrs ...any) {
	key := msg + fmt.Sprint(attrs...)
	now := time.Now()
	t.mu.Lock()
	e := t.last[key]
	if e != nil && now.Sub(e.at) < t.period {
		e.skipped++
		t.mu.Unlock()
		return
	}
	skipped := 0
	if e != nil {
		skipped = e.skipped
	}
	if len(t.last) >= t.max {
		clear(t.last)
	}
	t.last[key] = &throttled{at: now}
	t.mu.Unlock()
	if skipped > 0 {
		attrs = append(attrs, "not_logged_since_last", skipped)
	}
	t.logger.Warn(msg, attrs...)
}

// TooMany sets the headers of a refused request: 429 is the status, Retry-After the whole
// seconds to wait (at least 1). It returns the wait, rounded up, for the page's message.
func TooMany(c *gin.Context, wait time.Duration) time.Duration {
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	c.Header("Retry-After", strconv.FormatInt(secs, 10))
	return time.Duration(secs) * time.Second
}
