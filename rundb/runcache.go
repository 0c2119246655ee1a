package rundb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/metrics"
)

// Prio is how urgently a changed run must reach the database. Each level above Normal counts as
// one minute of age when the flusher picks the next run to write.
type Prio int

// Write priorities, fishtest's values.
const (
	PrioNormal  Prio = 0    // everything else (a result, a beat)
	PrioMedium  Prio = 1    // a task finished
	PrioHigh    Prio = 2    // a task was created
	PrioSaveNow Prio = 1000 // written before Update returns: run created, finished, modified, approved or purged
)

// prioAge is what one priority level is worth in the flush order.
const prioAge = 60 * time.Second

// RunCache keeps runs in memory on the primary and writes changed ones behind to the database,
// one per FlushOne call, most overdue first; PrioSaveNow changes are written synchronously.
// A failed write leaves the run dirty, so it is retried and nothing is lost; FlushAll writes
// everything on shutdown.
//
// Safe for concurrent use. Each cached run has its own lock, held while a View or Update
// callback runs, so callbacks must be short and must not call back into the cache.
//
// Lock order: entry.write before entry.mu; RunCache.mu is a leaf, never held while taking
// another lock.
type RunCache struct {
	store   *RunStore
	now     func() time.Time
	logger  *slog.Logger
	metrics *metrics.Metrics // set once by SetMetrics, before use
	journal *Journal         // set once by SetJournal, before use; nil without one
	// beforeWrite, if set, is called as each run write begins (fault-injection tests).
	beforeWrite func()

	mu      sync.Mutex
	entries map[ObjectID]*cacheEntry
	// changed is closed, and replaced, when any run changes; see Changed.
	changed chan struct{}
}

type cacheEntry struct {
	// write serialises database writes of this run, so an older encoding never overwrites a
	// newer one.
	write sync.Mutex
	// mu guards run.
	mu  sync.Mutex
	run *Run

	// Guarded by RunCache.mu.
	dirty      bool
	priority   Prio
	lastSync   time.Time
	lastAccess time.Time
	// users counts View and Update calls holding the entry; Evict leaves such entries alone,
	// so a change is never made to an entry that has just left the map.
	users int
}

// NewRunCache returns an empty cache that writes to store. now is the clock (time.Now in
// production; tests pass a fake one).
func NewRunCache(store *RunStore, now func() time.Time, logger *slog.Logger) *RunCache {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &RunCache{store: store, now: now, logger: logger, entries: make(map[ObjectID]*cacheEntry),
		changed: make(chan struct{})}
}

// SetMetrics makes the cache report its dirty and cached runs and the duration and failures of
// its run writes to m. Call it before the cache is used.
func (c *RunCache) SetMetrics(m *metrics.Metrics) {
	c.metrics = m
	m.WatchRunCache(c.Dirty, c.Len)
}

// SetJournal makes the cache journal the changes made with ModifyDurable, write runs only while
// the journal's lease holds, and replay the journal when it preloads. Call it before the cache is
// used.
func (c *RunCache) SetJournal(j *Journal) { c.journal = j }

// SetWriteHook makes the cache call fn as each run write begins, for tests that crash the
// server in the middle of one. Call it before the cache is used.
func (c *RunCache) SetWriteHook(fn func()) { c.beforeWrite = fn }

// acquire returns the cache entry for id, loading the run from the database on a miss, and pins
// it against eviction until release.
func (c *RunCache) acquire(ctx context.Context, id ObjectID) (*cacheEntry, error) {
	c.mu.Lock()
	e, ok := c.entries[id]
	if ok {
		e.lastAccess = c.now()
		e.users++
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
		e.lastAccess = c.now()
		e.users++
		return e, nil
	}
	now := c.now()
	e = &cacheEntry{run: run, lastSync: now, lastAccess: now, users: 1}
	c.entries[id] = e
	return e, nil
}

// release unpins an entry returned by acquire.
func (c *RunCache) release(e *cacheEntry) {
	c.mu.Lock()
	e.users--
	c.mu.Unlock()
}

// Cached reports whether the run is in the cache, without loading it: a View or Update of it
// now needs no database read.
func (c *RunCache) Cached(id ObjectID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[id]
	return ok
}

// Preload caches every unfinished run, so the primary schedules from memory from its first
// request. Runs already cached are kept as they are. With a journal, each run first gets the
// journal's records newer than its document, and the first Preload hands what they changed to
// this epoch's journal (see Journal). It returns the unfinished runs' IDs, oldest first.
func (c *RunCache) Preload(ctx context.Context) ([]ObjectID, error) {
	runs, err := c.store.Unfinished(ctx)
	if err != nil {
		return nil, err
	}
	if c.journal != nil {
		if err := c.journal.replayRuns(ctx, runs, c.Cached); err != nil {
			return nil, err
		}
	}
	now := c.now()
	ids := make([]ObjectID, len(runs))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range runs {
		ids[i] = r.ID
		if _, ok := c.entries[r.ID]; !ok {
			e := &cacheEntry{run: r, lastSync: now, lastAccess: now}
			if c.journal != nil && r.JournalEpoch == c.journal.epoch {
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
func (c *RunCache) View(ctx context.Context, id ObjectID, fn func(*Run)) error {
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

// Update calls fn to change the run and marks it for writing with priority prio. With
// PrioSaveNow it also writes the run before returning; if that write fails, Update returns the
// error but the change stays made in memory and queued, and the flusher retries it. If fn
// returns an error the run is taken as unchanged (fn must not have changed it) and the error is
// returned.
func (c *RunCache) Update(ctx context.Context, id ObjectID, prio Prio, fn func(*Run) error) error {
	return c.Modify(ctx, id, func(r *Run) (Prio, error) { return prio, fn(r) })
}

// Modify is Update for changes whose urgency is known only once they are made: fn returns the
// priority (a result is NORMAL, a finished task MEDIUM, a finished run SAVE_NOW). ErrUnchanged
// from fn means the run was left as it was: nothing is marked and Modify returns nil.
func (c *RunCache) Modify(ctx context.Context, id ObjectID, fn func(*Run) (Prio, error)) error {
	_, err := c.modify(ctx, id, -1, false, fn)
	return err
}

// ModifyDurable is Modify for a change acknowledged to a worker: it returns once the change is
// stored, so that a crash cannot lose it. Below PrioSaveNow that is a journal record of task (the
// task the change is about, or -1) and of the tasks fn appends; at PrioSaveNow, the run's
// document. Without a journal it is Modify. If the record cannot be written the change stays
// made in memory and is written behind as usual, and the error is returned.
func (c *RunCache) ModifyDurable(ctx context.Context, id ObjectID, task int, fn func(*Run) (Prio, error)) error {
	stored, err := c.ModifyStored(ctx, id, task, fn)
	if err != nil {
		return err
	}
	return stored(ctx)
}

// ModifyStored is ModifyDurable that returns once the change is made, with stored, which waits
// until it is stored (and returns what ModifyDurable would). A caller that holds a lock other
// changes need makes its change, lets the lock go, and only then waits: the lock is never held
// across a journal write. stored is never nil when err is nil, and must be called before the
// change is acknowledged.
func (c *RunCache) ModifyStored(ctx context.Context, id ObjectID, task int, fn func(*Run) (Prio, error)) (stored func(context.Context) error, err error) {
	return c.modify(ctx, id, task, c.journal != nil, fn)
}

// storedNow is the stored of a change with nothing left to wait for.
func storedNow(context.Context) error { return nil }

func (c *RunCache) modify(ctx context.Context, id ObjectID, task int, durable bool, fn func(*Run) (Prio, error)) (func(context.Context) error, error) {
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
		var m mark
		if durable {
			m = markOf(e.run, task)
		}
		prio, err := fn(e.run)
		if err == nil && durable && prio < PrioSaveNow {
			// Queued under the run's lock, so the run's records keep their order.
			record, recErr = c.journal.record(e.run, task, m)
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
			return fmt.Errorf("%w: %w", ErrNotStored, ctx.Err())
		}
	}, nil
}

// ErrUnchanged is returned by a Modify callback that looked at the run and changed nothing.
var ErrUnchanged = errors.New("run unchanged")

// Create stores a new run, writing it at once, and caches it; ErrConflict if a run with its ID
// exists. The cache owns r afterwards.
func (c *RunCache) Create(ctx context.Context, r *Run) error {
	if err := c.store.Insert(ctx, r); err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[r.ID]; ok {
		return fmt.Errorf("cache run %s: %w", r.ID, ErrConflict)
	}
	c.entries[r.ID] = &cacheEntry{run: r, lastSync: now, lastAccess: now}
	c.signalLocked()
	return nil
}

// Changed returns a channel that is closed the next time any run is created or changed, so
// that live pages can wait for news without polling. Take a new channel after each wake-up.
func (c *RunCache) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// signalLocked wakes every Changed waiter. c.mu must be held.
func (c *RunCache) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *RunCache) markDirty(e *cacheEntry, prio Prio) {
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
func (c *RunCache) FlushOne(ctx context.Context) (ObjectID, bool, error) {
	c.mu.Lock()
	var (
		bestID ObjectID
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
		return ObjectID{}, false, nil
	}
	return bestID, true, c.flushEntry(ctx, bestID, best)
}

// flushEntry writes e's run if it is dirty. The dirty flag is cleared before the run is encoded,
// so a change made during the write marks it dirty again and is written later.
func (c *RunCache) flushEntry(ctx context.Context, id ObjectID, e *cacheEntry) error {
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
	e.mu.Lock()
	if c.journal != nil {
		e.run.JournalEpoch = c.journal.epoch // the document is this epoch's
	}
	covers := pos(e.run)
	doc, err := c.store.encode(e.run)
	e.mu.Unlock()
	if err == nil && c.beforeWrite != nil {
		c.beforeWrite()
	}
	if err == nil && c.journal != nil {
		// Fenced by a lease check right before the write rather than by a condition in the
		// write: the embedded database answers any filter but a bare _id with a scan of every
		// run. A primary frozen between the check and the write's sending (microseconds) is
		// the one case this leaves.
		err = c.journal.checkLease(ctx)
	}
	if err == nil {
		err = c.store.replaceRaw(ctx, id, doc, true)
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
func (c *RunCache) FlushAll(ctx context.Context) error {
	c.mu.Lock()
	dirty := make(map[ObjectID]*cacheEntry)
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
func (c *RunCache) Dirty() int {
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
func (c *RunCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Evict drops runs that are clean, have no cores working on them (or are finished), and have not
// been accessed for idle. It returns how many it dropped.
func (c *RunCache) Evict(idle time.Duration) int {
	cutoff := c.now().Add(-idle)
	c.mu.Lock()
	candidates := make(map[ObjectID]*cacheEntry)
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
func (c *RunCache) Snapshot(ctx context.Context, id ObjectID) (*Run, error) {
	return c.copyRun(ctx, id, false)
}

// Listing returns a copy of a run as run listings show it: without its tasks, bad tasks and
// SPSA history (RunStore.Active's projection), so that listing every unfinished run from the
// cache costs little.
func (c *RunCache) Listing(ctx context.Context, id ObjectID) (*Run, error) {
	return c.copyRun(ctx, id, true)
}

func (c *RunCache) copyRun(ctx context.Context, id ObjectID, listing bool) (*Run, error) {
	var doc []byte
	var err error
	encode := func(r *Run) {
		if listing {
			r = r.Listed()
		}
		doc, err = c.store.encode(r)
	}
	if verr := c.View(ctx, id, encode); verr != nil {
		return nil, verr
	}
	if err != nil {
		return nil, fmt.Errorf("copy run %s: %w", id, err)
	}
	return c.store.decode(doc)
}
