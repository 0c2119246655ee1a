// Package runcache keeps the primary's active runs in memory and writes changed ones behind to
// the runs collection (rundb.RunStore), most overdue first. With a journal (package journal),
// the changes acknowledged to workers are journaled before they are acknowledged, runs are
// written only while the journal's lease holds, and the journal is replayed as the cache
// preloads.
package runcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
)

// Prio is how urgently a changed run must reach the database. Each level above Normal counts as
// one minute of age when the flusher picks the next run to write.
type Prio int

// Write priorities, fishtest's values.
const (
	PrioNormal  Prio = 0    // everything else (a result, a beat)
	PrioMedium  Prio = 1    // a task finished
	PrioHigh    Prio = 2    // a task was created
	PrioSaveNow Prio = 1000 // written before the change returns: run created, finished, modified, approved or purged
)

// prioAge is what one priority level is worth in the flush order.
const prioAge = 60 * time.Second

// Cache keeps runs in memory on the primary and writes changed ones behind to the database,
// one per FlushOne call, most overdue first; PrioSaveNow changes are written synchronously.
// A failed write leaves the run dirty, so it is retried and nothing is lost; FlushAll writes
// everything on shutdown. A run changes in one of two ways: Change, written behind, and
// ChangeDurably, for a change acknowledged to a worker, which is stored before it is
// acknowledged.
//
// Safe for concurrent use. Each cached run has its own lock, held while a View, Change or
// ChangeDurably callback runs, so callbacks must be short and must not call back into the cache.
//
// Lock order: entry.write before entry.mu; Cache.mu is a leaf, never held while taking
// another lock.
type Cache struct {
	store   *rundb.RunStore
	now     func() time.Time
	logger  *slog.Logger
	metrics *metrics.Metrics
	journal *journal.Journal // nil without one
	// beforeWrite, if set, is called as each run write begins (fault-injection tests).
	beforeWrite func()
	// encoders holds flushEntry's *rundb.Encoder, each keeping its buffers from one run's
	// encoding to the next: a run document of hundreds of kilobytes, encoded afresh, would
	// grow its buffer from nothing on every flush. An Encoder returns once the write that
	// sends its bytes has returned.
	encoders sync.Pool

	mu      sync.Mutex
	entries map[rundb.ObjectID]*cacheEntry
	// changed is closed, and replaced, when any run changes, if watched: if Changed has handed
	// it out since it was made. Unwatched, no one can be waiting on it, and a change, thousands
	// a second, need not make a new one.
	changed chan struct{}
	watched bool
}

type cacheEntry struct {
	// write serialises database writes of this run, so an older encoding never overwrites a
	// newer one.
	write sync.Mutex
	// mu guards run.
	mu  sync.Mutex
	run *rundb.Run

	// Guarded by Cache.mu.
	dirty      bool
	priority   Prio
	lastSync   time.Time
	lastAccess time.Time
	// users counts the calls holding the entry; Evict leaves such entries alone,
	// so a change is never made to an entry that has just left the map.
	users int
}

// Options configures New. The zero value is a cache without a journal or metrics, on the
// system clock.
type Options struct {
	// Now is the clock; nil means time.Now (tests pass a fake one).
	Now func() time.Time
	// Logger receives the cache's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, if set, receives the number of dirty and cached runs and the duration and
	// failures of the run writes.
	Metrics *metrics.Metrics
	// Journal, if set, makes ChangeDurably journal its changes, makes the cache write runs only
	// while the journal's lease holds, and replays the journal when the cache preloads.
	Journal *journal.Journal
	// BeforeWrite, if set, is called as each run write begins, for tests that crash the server
	// in the middle of one.
	BeforeWrite func()
}

// New returns an empty cache that writes to store.
func New(store *rundb.RunStore, opts Options) *Cache {
	c := &Cache{store: store, now: opts.Now, logger: opts.Logger, metrics: opts.Metrics, journal: opts.Journal,
		beforeWrite: opts.BeforeWrite, entries: make(map[rundb.ObjectID]*cacheEntry), changed: make(chan struct{})}
	c.encoders.New = func() any { return store.Codec().NewEncoder() }
	if c.now == nil {
		c.now = time.Now
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	c.metrics.WatchRunCache(c.Dirty, c.Len)
	return c
}

// acquire returns the cache entry for id, loading the run from the database on a miss, and pins
// it against eviction until release.
func (c *Cache) acquire(ctx context.Context, id rundb.ObjectID) (*cacheEntry, error) {
	c.mu.Lock()
	e, ok := c.entries[id]
	if ok {
		e.pin(c.now())
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()

	run, err := c.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[id]; ok { // loaded concurrently: keep the first
		e.pin(c.now())
		return e, nil
	}
	now := c.now()
	e = &cacheEntry{run: run, lastSync: now, lastAccess: now, users: 1}
	c.entries[id] = e
	return e, nil
}

// pin marks the entry used at now and pins it against eviction until released. c.mu must be
// held.
func (e *cacheEntry) pin(now time.Time) {
	e.lastAccess = now
	e.users++
}

// release unpins an entry returned by acquire.
func (c *Cache) release(e *cacheEntry) {
	c.mu.Lock()
	e.users--
	c.mu.Unlock()
}

// Cached reports whether the run is in the cache, without loading it: a View or Change of it
// now needs no database read.
func (c *Cache) Cached(id rundb.ObjectID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[id]
	return ok
}

// Preload caches every unfinished run, so the primary schedules from memory from its first
// request. Runs already cached are kept as they are. With a journal, each run first gets the
// journal's records newer than its document, and the first Preload hands what they changed to
// this epoch's journal (see Journal). It returns the unfinished runs' IDs, oldest first.
func (c *Cache) Preload(ctx context.Context) ([]rundb.ObjectID, error) {
	runs, err := c.store.Unfinished(ctx)
	if err != nil {
		return nil, err
	}
	if c.journal != nil {
		if err := c.journal.Replay(ctx, runs, c.Cached); err != nil {
			return nil, err
		}
	}
	now := c.now()
	ids := make([]rundb.ObjectID, len(runs))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range runs {
		ids[i] = r.ID
		if _, ok := c.entries[r.ID]; !ok {
			e := &cacheEntry{run: r, lastSync: now, lastAccess: now}
			if c.journal != nil && r.JournalEpoch == c.journal.Epoch() {
				// Replayed: its document is behind the journal until written.
				e.dirty, e.priority = true, PrioHigh
			}
			c.entries[r.ID] = e
		}
	}
	return ids, nil
}

// View calls fn with the run, loading it if needed. fn must not keep the pointer or change the
// run.
func (c *Cache) View(ctx context.Context, id rundb.ObjectID, fn func(*rundb.Run)) error {
	e, err := c.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer c.release(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e.run)
	return nil
}

// ViewEach calls fn with each run of ids in turn, as View would, loading those not cached; a run
// that cannot be read is passed as nil with the error. fn must not keep the pointer or change
// the run. It takes the cache's own lock twice in all rather than twice per run, so that going
// through every active run (request_task does, on every call) contends little with the
// changes of other calls.
func (c *Cache) ViewEach(ctx context.Context, ids []rundb.ObjectID, fn func(id rundb.ObjectID, r *rundb.Run, err error)) {
	var buf [64]*cacheEntry
	entries := buf[:0]
	c.mu.Lock()
	now := c.now()
	for _, id := range ids {
		e := c.entries[id]
		if e != nil {
			e.pin(now)
		}
		entries = append(entries, e)
	}
	c.mu.Unlock()
	defer func() { // every entry pinned above or by acquire below
		c.mu.Lock()
		for _, e := range entries {
			if e != nil {
				e.users--
			}
		}
		c.mu.Unlock()
	}()
	for i, id := range ids {
		e := entries[i]
		if e == nil {
			var err error
			if e, err = c.acquire(ctx, id); err != nil {
				fn(id, nil, err)
				continue
			}
			entries[i] = e
		}
		e.view(id, fn)
	}
}

// view calls fn with the entry's run under its lock.
func (e *cacheEntry) view(id rundb.ObjectID, fn func(rundb.ObjectID, *rundb.Run, error)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(id, e.run, nil)
}

// Change calls fn to change the run, loading it if needed, and marks it for writing behind with
// the priority fn returns (a result is PrioNormal, a finished task PrioMedium, a finished run
// PrioSaveNow). It promises no durability: a crash before the run's next write loses the
// change, but for PrioSaveNow, which writes the run before Change returns; if that write fails,
// Change returns the error but the change stays made in memory and queued, and the flusher
// retries it. ErrUnchanged from fn means the run was left as it was: nothing is marked and
// Change returns nil. Any other error from fn means the same (fn must not have changed the run)
// and is returned.
func (c *Cache) Change(ctx context.Context, id rundb.ObjectID, fn func(*rundb.Run) (Prio, error)) error {
	_, err := c.change(ctx, id, -1, false, fn)
	return err
}

// ChangeDurably is Change for a change acknowledged to a worker, which a crash must not lose. It
// returns once the change is made, with stored, which waits until the change is stored and
// must be called (and return nil) before the change is acknowledged. Below PrioSaveNow that is
// a journal record of task (the task the change is about, or -1) and of the tasks fn appends;
// at PrioSaveNow, the run's document, written before ChangeDurably returns; without a journal,
// stored has nothing to wait for. A caller that holds a lock other changes need makes its
// change, lets the lock go, and only then waits: the lock is never held across a journal write.
// stored is never nil when err is nil. If the record cannot be written, stored returns an error
// wrapping rundb.ErrNotStored: the change stays made in memory and is written behind as usual,
// but must not be acknowledged.
func (c *Cache) ChangeDurably(ctx context.Context, id rundb.ObjectID, task int, fn func(*rundb.Run) (Prio, error)) (stored func(context.Context) error, err error) {
	return c.change(ctx, id, task, c.journal != nil, fn)
}

// storedNow is the stored of a change with nothing left to wait for.
func storedNow(context.Context) error { return nil }

func (c *Cache) change(ctx context.Context, id rundb.ObjectID, task int, durable bool, fn func(*rundb.Run) (Prio, error)) (func(context.Context) error, error) {
	e, err := c.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer c.release(e)
	var record <-chan error
	var recErr error
	prio, err := func() (Prio, error) {
		e.mu.Lock()
		defer e.mu.Unlock() // a panicking callback must not leave the run locked
		var m journal.Mark
		if durable {
			m = journal.MarkOf(e.run, task)
		}
		prio, err := fn(e.run)
		if err == nil && durable && prio < PrioSaveNow {
			// Queued under the run's lock, so the run's records keep their order.
			record, recErr = c.journal.Record(e.run, task, m)
		}
		return prio, err
	}()
	if errors.Is(err, ErrUnchanged) {
		return storedNow, nil
	}
	if err != nil {
		return nil, err
	}
	c.markDirty(e, prio)
	if prio >= PrioSaveNow {
		return storedNow, c.flushEntry(ctx, id, e)
	}
	if recErr != nil {
		return nil, recErr
	}
	if record == nil {
		return storedNow, nil
	}
	return func(ctx context.Context) error {
		select {
		case err := <-record:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", rundb.ErrNotStored, ctx.Err())
		}
	}, nil
}

// ErrUnchanged is returned by a Change or ChangeDurably callback that looked at the run and
// changed nothing.
var ErrUnchanged = errors.New("run unchanged")

// Create stores a new run, writing it at once, and caches it; ErrConflict if a run with its ID
// exists. The cache owns r afterwards.
func (c *Cache) Create(ctx context.Context, r *rundb.Run) error {
	if err := c.store.Insert(ctx, r); err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[r.ID]; ok {
		return fmt.Errorf("cache run %s: %w", r.ID, rundb.ErrConflict)
	}
	c.entries[r.ID] = &cacheEntry{run: r, lastSync: now, lastAccess: now}
	c.signalLocked()
	return nil
}

// Changed returns a channel that is closed the next time any run is created or changed, so
// that live pages can wait for news without polling. Take a new channel after each wake-up.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = true
	return c.changed
}

// signalLocked wakes every Changed waiter. c.mu must be held.
func (c *Cache) signalLocked() {
	if !c.watched {
		return
	}
	close(c.changed)
	c.changed, c.watched = make(chan struct{}), false
}

func (c *Cache) markDirty(e *cacheEntry, prio Prio) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.lastAccess = c.now()
	c.signalLocked()
	if !e.dirty {
		e.dirty = true
		e.priority = prio
		return
	}
	e.priority = max(e.priority, prio)
}

// FlushOne writes the dirty run whose last write is oldest once each priority level counts as
// a minute of age, and returns its ID. It returns false if nothing is dirty. On a write error
// the run stays dirty with its priority.
func (c *Cache) FlushOne(ctx context.Context) (rundb.ObjectID, bool, error) {
	c.mu.Lock()
	var (
		bestID rundb.ObjectID
		best   *cacheEntry
		bestAt time.Time
	)
	for id, e := range c.entries {
		if !e.dirty {
			continue
		}
		at := e.lastSync.Add(-time.Duration(e.priority) * prioAge)
		if best == nil || at.Before(bestAt) || (at.Equal(bestAt) && id.Compare(bestID) < 0) {
			bestID, best, bestAt = id, e, at
		}
	}
	c.mu.Unlock()
	if best == nil {
		return rundb.ObjectID{}, false, nil
	}
	return bestID, true, c.flushEntry(ctx, bestID, best)
}

// flushEntry writes e's run if it is dirty. The dirty flag is cleared before the run is encoded,
// so a change made during the write marks it dirty again and is written later.
func (c *Cache) flushEntry(ctx context.Context, id rundb.ObjectID, e *cacheEntry) error {
	// Pinned, so that Evict cannot drop the entry while its dirty flag is clear but the
	// write has not landed; a reload then would miss the change.
	c.mu.Lock()
	e.users++
	c.mu.Unlock()
	defer c.release(e)
	e.write.Lock()
	defer e.write.Unlock()

	c.mu.Lock()
	if !e.dirty {
		c.mu.Unlock()
		return nil // written by a concurrent flush
	}
	e.dirty, e.priority = false, PrioNormal
	c.mu.Unlock()

	start := time.Now()
	enc := c.encoders.Get().(*rundb.Encoder)
	defer c.encoders.Put(enc) // after the write: doc is enc's
	e.mu.Lock()
	if c.journal != nil {
		e.run.JournalEpoch = c.journal.Epoch() // the document is this epoch's
	}
	covers := journal.PositionOf(e.run)
	doc, err := enc.Encode(e.run)
	e.mu.Unlock()
	if err == nil && c.beforeWrite != nil {
		c.beforeWrite()
	}
	if err == nil && c.journal != nil {
		// Fenced by a lease check right before the write rather than by a condition in the
		// write: the embedded database answers any filter but a bare _id with a scan of every
		// run. A primary frozen between the check and the write's sending (microseconds) is
		// the one case this leaves.
		err = c.journal.CheckLease(ctx)
	}
	if err == nil {
		err = c.store.ReplaceEncoded(ctx, id, doc)
	}
	c.metrics.ObserveFlush(time.Since(start), err)
	if err == nil && c.journal != nil {
		c.journal.Covered(id, covers)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// A failed write counts as a write at normal priority for the flush order, so a run that
	// keeps failing (one over MongoDB's 16 MiB limit, say) goes to the back of the queue
	// instead of blocking every other run; it stays dirty and is retried.
	e.lastSync = c.now()
	if err != nil {
		e.dirty = true
		return fmt.Errorf("flush run %s: %w", id, err)
	}
	return nil
}

// FlushAll writes every dirty run, for shutdown. It tries them all and returns the errors of
// those that failed (they stay dirty).
func (c *Cache) FlushAll(ctx context.Context) error {
	c.mu.Lock()
	dirty := make(map[rundb.ObjectID]*cacheEntry)
	for id, e := range c.entries {
		if e.dirty {
			dirty[id] = e
		}
	}
	c.mu.Unlock()
	var errs []error
	for id, e := range dirty {
		if err := c.flushEntry(ctx, id, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Dirty returns the number of runs waiting to be written.
func (c *Cache) Dirty() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.entries {
		if e.dirty {
			n++
		}
	}
	return n
}

// Len returns the number of cached runs.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Evict drops runs that are clean, have no cores working on them (or are finished), and have not
// been accessed for idle. It returns how many it dropped.
func (c *Cache) Evict(idle time.Duration) int {
	cutoff := c.now().Add(-idle)
	c.mu.Lock()
	candidates := make(map[rundb.ObjectID]*cacheEntry)
	for id, e := range c.entries {
		if !e.dirty && e.users == 0 && e.lastAccess.Before(cutoff) {
			candidates[id] = e
		}
	}
	c.mu.Unlock()

	n := 0
	for id, e := range candidates {
		e.mu.Lock()
		idleRun := e.run.Cores <= 0 || e.run.Finished
		e.mu.Unlock()
		if !idleRun {
			continue
		}
		c.mu.Lock()
		if cur, ok := c.entries[id]; ok && cur == e && !e.dirty && e.users == 0 && e.lastAccess.Before(cutoff) {
			delete(c.entries, id)
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// Snapshot returns a deep copy of the run, loading it if needed; the caller may keep and change
// it freely. It costs an encode and a decode of the whole run, so it is for reads that leave the
// process (API replies, pages), not for the scheduler's hot path.
func (c *Cache) Snapshot(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error) {
	return c.copyRun(ctx, id, false)
}

// Listing returns a copy of a run as run listings show it: without its tasks, bad tasks and
// SPSA history (RunStore.Active's projection), so that listing every unfinished run from the
// cache costs little.
func (c *Cache) Listing(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error) {
	return c.copyRun(ctx, id, true)
}

func (c *Cache) copyRun(ctx context.Context, id rundb.ObjectID, listing bool) (*rundb.Run, error) {
	var doc []byte
	var err error
	encode := func(r *rundb.Run) {
		if listing {
			r = r.Listed()
		}
		doc, err = c.store.Codec().Encode(r)
	}
	if verr := c.View(ctx, id, encode); verr != nil {
		return nil, verr
	}
	if err != nil {
		return nil, fmt.Errorf("copy run %s: %w", id, err)
	}
	var r rundb.Run
	if err := c.store.Codec().Decode(doc, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
