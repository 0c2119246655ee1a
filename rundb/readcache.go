package rundb

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// UserCacheTTL bounds how long a user document read for the worker and submit APIs is
	// trusted. A change made through this process (a block, a new password) drops the cached
	// copy at once; one made by another instance or the CLI is seen within this time.
	UserCacheTTL = 10 * time.Second
	// userCacheSize bounds the cache; past it, expired entries go, then arbitrary ones.
	userCacheSize = 50_000
)

// userCache keeps recently read user documents, so that the worker API, which authenticates
// every call, does not read the users collection a thousand times a second. Safe for
// concurrent use.
type userCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]userCacheEntry
	// gen counts invalidations: a read that began before one must not store what it read.
	gen  uint64
	load singleflight.Group
}

type userCacheEntry struct {
	user    *User
	expires time.Time
}

func newUserCache(ttl time.Duration, now func() time.Time) *userCache {
	return &userCache{ttl: ttl, now: now, entries: make(map[string]userCacheEntry)}
}

// get returns a copy of the cached user, reading it with read on a miss. Concurrent misses for
// one username share a read; absent users are not cached.
func (c *userCache) get(ctx context.Context, username string, read func(context.Context) (*User, error)) (*User, error) {
	c.mu.Lock()
	e, ok := c.entries[username]
	gen := c.gen
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return copyUser(e.user), nil
	}
	// The shared read must not fail because the first caller's request was cancelled.
	v, err, _ := c.load.Do(username, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		u, err := read(rctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen {
			c.putLocked(username, u)
		}
		return u, nil
	})
	if err != nil {
		return nil, err
	}
	return copyUser(v.(*User)), nil
}

func (c *userCache) putLocked(username string, u *User) {
	if len(c.entries) >= userCacheSize {
		// Make room for a tenth of the bound at once, so a full cache is swept once per
		// userCacheSize/10 inserts: expired entries, and arbitrary ones while still over.
		target, now := userCacheSize-userCacheSize/10, c.now()
		for name, e := range c.entries {
			if !now.Before(e.expires) || len(c.entries) > target {
				delete(c.entries, name)
			}
		}
	}
	c.entries[username] = userCacheEntry{user: u, expires: c.now().Add(c.ttl)}
}

// invalidate drops a user's cached document after this process changed it.
func (c *userCache) invalidate(username string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.entries, username)
	// A read in flight for this user must not be shared with callers that come after the
	// change.
	c.load.Forget(username)
}

// copyUser returns a copy of u that its caller may change without touching the cached one.
func copyUser(u *User) *User {
	cp := *u
	cp.Groups = slices.Clone(u.Groups)
	if u.Extra != nil {
		cp.Extra = make(Extra, len(u.Extra))
		for k, v := range u.Extra {
			cp.Extra[k] = v
		}
	}
	return &cp
}
