package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/server/guard"
)

// knownGood remembers, for a few minutes, the credentials of API calls that just succeeded, so
// that a fleet's workers, which log in on every call, bypass the failed-login limiter: it
// reserves a token per check in flight, which would bound an honest fleet behind one address
// to a few dozen calls at a time. A guess is never known good, so guesses stay limited. The
// password is still checked on every call; this only decides whether the limiter is asked.
// Keys are HMACs under a per-process key, so the map holds no passwords. Safe for concurrent
// use.
type knownGood struct {
	key []byte
	ttl time.Duration
	max int

	// macs holds HMAC states under key (*mac), reset and reused: sum runs on every API call.
	macs sync.Pool

	mu   sync.Mutex
	seen map[[32]byte]time.Time
}

func newKnownGood(ttl time.Duration, max int) *knownGood {
	return &knownGood{key: []byte(guard.NewToken()), ttl: ttl, max: max, seen: make(map[[32]byte]time.Time)}
}

// mac is an HMAC state with a buffer for its input and its sum: a hash.Hash takes bytes
// through an interface, so strings converted for it, and a sum's array, were allocated on
// every call.
type mac struct {
	h   hash.Hash
	buf []byte
}

// sum identifies a username and password: computed once per call, for has and settle.
func (k *knownGood) sum(username, password string) [32]byte {
	m, _ := k.macs.Get().(*mac)
	if m == nil {
		m = &mac{h: hmac.New(sha256.New, k.key)}
	}
	defer func() { m.h.Reset(); k.macs.Put(m) }()
	m.buf = append(append(append(m.buf[:0], username...), 0), password...)
	m.h.Write(m.buf)
	clear(m.buf) // the pool keeps no password
	m.buf = m.h.Sum(m.buf[:0])
	var out [32]byte
	copy(out[:], m.buf)
	return out
}

// has reports whether the credentials of sum s succeeded within the ttl.
func (k *knownGood) has(s [32]byte, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.seen[s]
	return ok && now.Sub(t) < k.ttl
}

// settle records the outcome for the credentials of sum s: a success is remembered, anything
// else forgotten.
func (k *knownGood) settle(s [32]byte, ok bool, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !ok {
		delete(k.seen, s)
		return
	}
	if len(k.seen) >= k.max {
		for key, t := range k.seen {
			if now.Sub(t) >= k.ttl {
				delete(k.seen, key)
			}
		}
		if len(k.seen) >= k.max {
			clear(k.seen) // a flood of distinct good credentials: start over
		}
	}
	k.seen[s] = now
}
