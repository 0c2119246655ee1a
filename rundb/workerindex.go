package rundb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// workerIndex holds the whole workers collection in memory for request_task's blocked-worker
// check, so that the check reads no database: in a reconnection storm every worker is new to a
// per-name cache, and a read per worker (a token held, the embedded database's one connection
// busy) is what turned most of a storm away. The collection is small: it holds only the workers
// someone blocked or noted, and the blocked ones' last attempts.
//
// The copy is read whole, at the first check and again once it is older than ttl; while one
// caller reloads it the others go on with the old copy, so only the very first check waits for
// the database. A Put through this process takes effect at once; a change made elsewhere (another
// instance, the CLI) within ttl. Safe for concurrent use.
type workerIndex struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	byName  map[string]*Worker // nil until the first load
	expires time.Time
	loading chan struct{} // non-nil while a load is in flight; closed when it ends
	// written are the Puts made while a load is in flight: the load may have read the
	// collection before them, so they are laid over what it read.
	written map[string]*Worker
}

// get returns a copy of the named worker's record, or ErrNotFound, reading the collection with
// readAll when the copy is missing or old.
func (x *workerIndex) get(ctx context.Context, name string, readAll func(context.Context) (map[string]*Worker, error)) (*Worker, error) {
	if err := x.ensure(ctx, readAll); err != nil {
		return nil, err
	}
	x.mu.Lock()
	w := x.byName[name]
	x.mu.Unlock()
	if w == nil {
		return nil, ErrNotFound
	}
	return copyWorker(w), nil
}

// ensure makes sure a copy is there, reloading it first if this caller finds it old.
func (x *workerIndex) ensure(ctx context.Context, readAll func(context.Context) (map[string]*Worker, error)) error {
	for {
		x.mu.Lock()
		if x.byName != nil && (x.loading != nil || x.now().Before(x.expires)) {
			x.mu.Unlock()
			return nil // fresh, or another caller is reloading: the old copy serves meanwhile
		}
		if wait := x.loading; wait != nil { // the first load, in flight
			x.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done := make(chan struct{})
		x.loading, x.written = done, map[string]*Worker{}
		x.mu.Unlock()

		started := x.now()
		// The shared load must not fail because this caller's request was cancelled.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		all, err := readAll(rctx)
		cancel()

		x.mu.Lock()
		switch {
		case err == nil:
			for name, w := range x.written {
				all[name] = w
			}
			x.byName, x.expires = all, started.Add(x.ttl)
		case x.byName != nil:
			// Keep the old copy and try again soon: a failing database must not be asked by
			// every request_task.
			x.expires = x.now().Add(x.ttl / 10)
		}
		first := x.byName == nil
		x.loading, x.written = nil, nil
		close(done)
		x.mu.Unlock()
		if err != nil && first {
			return err
		}
		return nil
	}
}

// put records a change this process wrote (or tried to: failed is set when the write's outcome
// is unknown, and the copy is then read again at the next check).
func (x *workerIndex) put(w *Worker, failed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if failed {
		x.expires = time.Time{}
		return
	}
	cp := copyWorker(w)
	if x.byName != nil {
		x.byName[w.WorkerName] = cp
	}
	if x.loading != nil {
		x.written[w.WorkerName] = cp
	}
}

// readAllWorkers reads every worker record, by name.
func readAllWorkers(ctx context.Context, coll *mongo.Collection) (map[string]*Worker, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("read workers: %w", mapError(err))
	}
	defer cur.Close(ctx)
	all := make(map[string]*Worker)
	for cur.Next(ctx) {
		var w Worker
		if err := cur.Decode(&w); err != nil {
			return nil, fmt.Errorf("read workers: %w", err)
		}
		all[w.WorkerName] = &w
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read workers: %w", mapError(err))
	}
	return all, nil
}
