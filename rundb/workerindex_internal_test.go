package rundb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock for the index's age.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A storm of workers none of which the collection holds reads the database once, not once each.
func TestWorkerIndexReadsTheCollectionOnceForAStorm(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	x := &workerIndex{ttl: time.Minute, now: clock.now}
	var reads atomic.Int32
	readAll := func(context.Context) (map[string]*Worker, error) {
		reads.Add(1)
		time.Sleep(10 * time.Millisecond) // callers arriving meanwhile wait for this load
		return map[string]*Worker{"bob-1cores-0000": {WorkerName: "bob-1cores-0000", Blocked: true}}, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for i := range 500 {
		wg.Go(func() {
			if _, err := x.get(context.Background(), fmt.Sprintf("w%d-1cores-0000", i), readAll); !errors.Is(err, ErrNotFound) {
				errs <- fmt.Errorf("worker %d: %v, want ErrNotFound", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w, err := x.get(context.Background(), "bob-1cores-0000", readAll); err != nil || !w.Blocked {
		t.Errorf("the blocked worker: %+v, %v", w, err)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads of the collection, want 1", n)
	}
}

// Once the copy is old, one caller reloads it while the others go on with the old copy; a Put
// made during the reload is not undone by what the reload read.
func TestWorkerIndexReloadsWithoutHoldingUpOthers(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	x := &workerIndex{ttl: time.Minute, now: clock.now}
	ctx := context.Background()
	stored := map[string]*Worker{"a": {WorkerName: "a", Blocked: true}}
	first := func(context.Context) (map[string]*Worker, error) { return clone(stored), nil }
	if w, err := x.get(ctx, "a", first); err != nil || !w.Blocked {
		t.Fatalf("first load: %+v, %v", w, err)
	}

	clock.advance(2 * time.Minute)
	entered, release := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (map[string]*Worker, error) {
		close(entered)
		<-release
		// Read before the unblock below was written: still blocked, and b blocked elsewhere.
		return map[string]*Worker{"a": {WorkerName: "a", Blocked: true}, "b": {WorkerName: "b", Blocked: true}}, nil
	}
	reloaded := make(chan error, 1)
	go func() { _, err := x.get(ctx, "a", slow); reloaded <- err }()
	<-entered
	unexpected := func(context.Context) (map[string]*Worker, error) {
		t.Error("a second load while one is in flight")
		return nil, errors.New("unexpected")
	}
	if _, err := x.get(ctx, "b", unexpected); !errors.Is(err, ErrNotFound) {
		t.Errorf("during the reload, b from the old copy: %v, want ErrNotFound", err)
	}
	x.put(&Worker{WorkerName: "a", Blocked: false}, false)
	if w, err := x.get(ctx, "a", unexpected); err != nil || w.Blocked {
		t.Errorf("right after the unblock: %+v, %v", w, err)
	}
	close(release)
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if w, err := x.get(ctx, "a", unexpected); err != nil || w.Blocked {
		t.Errorf("after the reload the unblock stands: %+v, %v", w, err)
	}
	if w, err := x.get(ctx, "b", unexpected); err != nil || !w.Blocked {
		t.Errorf("after the reload b's block made elsewhere is seen: %+v, %v", w, err)
	}

	// A failing reload keeps the old copy and is tried again after a tenth of the TTL.
	clock.advance(2 * time.Minute)
	var fails atomic.Int32
	failing := func(context.Context) (map[string]*Worker, error) {
		fails.Add(1)
		return nil, errors.New("database down")
	}
	for range 3 {
		if w, err := x.get(ctx, "b", failing); err != nil || !w.Blocked {
			t.Errorf("with the database down, b from the old copy: %+v, %v", w, err)
		}
	}
	if n := fails.Load(); n != 1 {
		t.Errorf("%d reads with the database down, want 1 until a tenth of the TTL passed", n)
	}
}

func clone(m map[string]*Worker) map[string]*Worker {
	out := make(map[string]*Worker, len(m))
	for k, w := range m {
		out[k] = copyWorker(w)
	}
	return out
}
