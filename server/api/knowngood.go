package api

import (
	"sync"
	"time"

	"github.com/shoal-chess/shoal/rundb"
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
	keys *rundb.KeyedHash // under a key of this process's
	ttl  time.Duration
	max  int

	mu   sync.Mutex
	seen map[[32]byte]time.Time
}

func newKnownGood(ttl time.Duration, max int) *knownGood {
	return &knownGood{keys: rundb.NewKeyedHash([]byte(guard.NewToken())), ttl: ttl, max: max, seen: make(map[[32]byte]time.Time)}
}

// sum identifies a username and password: computed once per call, for has and settle.
func (k *knownGood) sum(username, password string) [32]byte { return k.keys.Sum(username, password) }

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
