package rundb

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// UserCacheTTL bounds how long a user or worker document read for the worker and submit
	// APIs is trusted. A change made through this process (a block, a new password) drops the
	// cached copy at once; one made by another instance or the CLI is seen within this time.
	UserCacheTTL = 10 * time.Second
	// readCacheSize bounds each cache; past it, expired entries go, then arbitrary ones.
	readCacheSize = 50_000
)

// readCache keeps recently read documents by key, so that the worker API, which authenticates
// every call, does not read the database a thousand times a second. An absent document is not
// cached. Safe for concurrent use.
type readCache[T any] struct {
	ttl  time.Duration
	now  func() time.Time
	copy func(*T) *T

	mu      sync.Mutex
	entries map[string]readCacheEntry[T]
	// gen counts invalidations: a read that began before one must not store what it read.
	gen  uint64
	load singleflight.Group
}

type readCacheEntry[T any] struct {
	doc     *T
	expires time.Time
}

func newReadCache[T any](ttl time.Duration, now func() time.Time, copy func(*T) *T) *readCache[T] {
	return &readCache[T]{ttl: ttl, now: now, copy: copy,
		entries: make(map[string]readCacheEntry[T])}
}

// get returns a copy of the cached document (nil, ErrNotFound when it is absent), reading it
// with read on a miss. Concurrent misses for one key share a read.
func (c *readCache[T]) get(ctx context.Context, key string, read func(context.Context) (*T, error)) (*T, error) {
	if doc, ok := c.peek(key); ok {
		return found(doc)
	}
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	// The shared read must not fail because the first caller's request was cancelled.
	v, err, _ := c.load.Do(key, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		doc, err := read(rctx)
		absent := isNotFound(err)
		if err != nil && !absent {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen && !absent {
			c.putLocked(key, doc)
		}
		return doc, nil
	})
	if err != nil {
		return nil, err
	}
	// Every caller sharing the read gets its own copy: the document read may be the cached one.
	return found(c.clone(v.(*T)))
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrNotFound) }

// found turns a cached nil into ErrNotFound.
func found[T any](doc *T) (*T, error) {
	if doc == nil {
		return nil, ErrNotFound
	}
	return doc, nil
}

// peek returns a copy of the cached document (nil when cached as absent), if it is cached and
// fresh.
func (c *readCache[T]) peek(key string) (*T, bool) {
	doc, ok := c.peekShared(key)
	if !ok {
		return nil, false
	}
	return c.clone(doc), true
}

// peekShared is peek without the copy: the cached document itself, shared with every caller
// of key, which must change nothing of it (nor of what it points to). A document is never
// changed once cached (a change replaces or drops it), so reading it needs no lock.
func (c *readCache[T]) peekShared(key string) (*T, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || !c.now().Before(e.expires) {
		return nil, false
	}
	return e.doc, true
}

// clone copies doc, so that its caller may change it without touching the cached one; nil
// (absent) stays nil.
func (c *readCache[T]) clone(doc *T) *T {
	if doc == nil {
		return nil
	}
	return c.copy(doc)
}

func (c *readCache[T]) putLocked(key string, doc *T) {
	if len(c.entries) >= readCacheSize {
		// Make room for a tenth of the bound at once, so a full cache is swept once per
		// readCacheSize/10 inserts: expired entries, and arbitrary ones while still over.
		target, now := readCacheSize-readCacheSize/10, c.now()
		for k, e := range c.entries {
			if !now.Before(e.expires) || len(c.entries) > target {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = readCacheEntry[T]{doc: doc, expires: c.now().Add(c.ttl)}
}

// invalidate drops a document's cached copy after this process changed it.
func (c *readCache[T]) invalidate(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.entries, key)
	// A read in flight for this key must not be shared with callers that come after the
	// change.
	c.load.Forget(key)
}

// copyUser returns a copy of u that its caller may change without touching the cached one.
func copyUser(u *User) *User {
	cp := *u
	cp.Groups = slices.Clone(u.Groups)
	cp.Sessions = slices.Clone(u.Sessions)
	cp.Tokens = slices.Clone(u.Tokens)
	cp.TokenUses = maps.Clone(u.TokenUses)
	cp.Extra = maps.Clone(u.Extra)
	return &cp
}

// copyWorker is copyUser for a worker's record.
func copyWorker(w *Worker) *Worker {
	cp := *w
	cp.Extra = maps.Clone(w.Extra)
	return &cp
}
