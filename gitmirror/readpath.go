package gitmirror

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// flightGroup runs one computation per key at a time: callers asking for a key meanwhile wait
// for it and share its result. The zero value is ready for use.
type flightGroup[V any] struct {
	mu    sync.Mutex
	calls map[string]*call[V]
}

// call is one computation of a flightGroup.
type call[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// do returns fn's result for key, from a computation in progress if there is one. A caller
// whose ctx ends stops waiting; a computation that failed because its own caller's ctx ended
// is started again for those still waiting.
func (g *flightGroup[V]) do(ctx context.Context, key string, fn func() (V, error)) (V, error) {
	for {
		g.mu.Lock()
		if c := g.calls[key]; c != nil {
			g.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				var zero V
				return zero, ctx.Err()
			}
			if isContextError(c.err) && ctx.Err() == nil {
				continue
			}
			return c.val, c.err
		}
		if g.calls == nil {
			g.calls = map[string]*call[V]{}
		}
		c := &call[V]{done: make(chan struct{})}
		g.calls[key] = c
		g.mu.Unlock()
		func() {
			defer func() {
				g.mu.Lock()
				delete(g.calls, key)
				g.mu.Unlock()
				close(c.done)
			}()
			c.val, c.err = fn()
		}()
		return c.val, c.err
	}
}

// isContextError reports whether err is a context's end rather than an answer.
func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// failure is a failed Diff or Relation, remembered so that pages asking again within
// failureMemory get the same answer without running git.
type failure struct {
	err error
	at  time.Time
	gen uint64 // the repository's fetches ended then: a fetch since forgets it
}

// failed returns the error remembered for key, if any.
func (m *Mirrors) failed(st *repoState, key string) error {
	f, ok := m.failures.get(key)
	if !ok {
		return nil
	}
	m.mu.Lock()
	gen := st.gen
	m.mu.Unlock()
	if f.gen != gen || m.now().Sub(f.at) >= failureMemory {
		return nil
	}
	return f.err
}

// remember keeps err for key, unless it is no answer about the commits (the caller's context
// ended, the mirrors closed). gen is the repository's fetch count when the computation began.
func (m *Mirrors) remember(key string, gen uint64, err error) {
	if err == nil || isContextError(err) || errors.Is(err, errClosed) {
		return
	}
	m.failures.add(key, failure{err: err, at: m.now(), gen: gen})
}

// fetchGen is the count of st's fetches ended.
func (m *Mirrors) fetchGen(st *repoState) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.gen
}

// readSlot waits for one of the parallelReads slots of the run pages' reads and returns its
// release.
func (m *Mirrors) readSlot(ctx context.Context) (func(), error) {
	select {
	case m.readSem <- struct{}{}:
		return func() { <-m.readSem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.ctx.Done():
		return nil, fmt.Errorf("read: %w", errClosed)
	}
}
