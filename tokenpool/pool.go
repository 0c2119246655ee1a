// Package tokenpool bounds how many operations may run at the same time.
//
// Shoal runs the blocking database work of its HTTP endpoints under one Pool
// (request_task's rare database work through the scheduler's DBGate; only
// /readyz's ping, bounded by its own 2 s timeout, goes without), so that a
// single server instance never has more than a fixed number of database
// operations in flight. When the database slows down, the excess
// load shows up as goroutines waiting for a token (visible through Waiting
// and Stats) instead of as an unbounded pile of concurrent queries.
//
// The number of tokens can be changed while the pool is in use (Resize), so
// an operator can retune a running server without dropping requests.
package tokenpool

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// MaxSize is the largest number of tokens a Pool can hold.
const MaxSize = 1 << 30

// Pool bounds the number of concurrent holders of a token.
//
// The bound itself is enforced by a golang.org/x/sync/semaphore.Weighted,
// which hands out tokens in FIFO order, so a waiter is never overtaken by a
// later caller. The semaphore always has MaxSize tokens; the MaxSize-Size of
// them that are not part of the pool are held by the pool itself as a
// reserve, which Resize draws from to grow and refills to shrink. The
// observability counters live in atomics next to it, so reading them never
// blocks and never contends with Acquire or Release.
//
// All methods are safe for concurrent use by multiple goroutines. A Pool must
// be created with New; the zero value is not usable.
type Pool struct {
	sem *semaphore.Weighted
	// size is the number of tokens in the pool (MaxSize minus the reserve).
	// It is only written by Resize, which stores a larger size before
	// handing out the extra tokens and a smaller one after taking tokens
	// back, so the number of holders never exceeds the size reported.
	size atomic.Int64
	// shrinkingTo is the size a Resize is shrinking the pool to while it
	// waits for tokens to come back; 0 when no shrink is waiting.
	shrinkingTo atomic.Int64
	// resizing is a lock (a one-slot channel, so that waiting for it can
	// honour a context) held for the whole of a Resize.
	resizing chan struct{}

	// inUse and waiting are gauges. inUse is incremented after the semaphore
	// is acquired and decremented before it is released, so it never reports
	// more holders than the semaphore actually has.
	inUse   atomic.Int64
	waiting atomic.Int64

	// Monotonic counters, exported later as Prometheus counters.
	acquired  atomic.Uint64
	waited    atomic.Uint64
	cancelled atomic.Uint64
	waitTime  atomic.Int64 // nanoseconds
}

// Stats is a point-in-time snapshot of a Pool's gauges and counters.
//
// The fields are read one by one without a lock, so while the pool is busy
// they may not be mutually consistent (for example, an Acquire that has just
// finished may already be counted in Acquired but not yet in InUse). Each
// field on its own is accurate.
type Stats struct {
	// Size is the number of tokens in the pool now. During a shrink it is
	// still the old size until the shrink has taken its tokens back.
	Size int
	// InUse is the number of tokens held at the moment of the snapshot.
	InUse int
	// Waiting is the number of goroutines blocked in Acquire at the moment
	// of the snapshot.
	Waiting int
	// Acquired is the total number of successful acquires.
	Acquired uint64
	// Waited is the number of successful acquires that could not take a
	// free token immediately and had to wait.
	Waited uint64
	// WaitTime is the total time spent waiting by acquires that had to wait,
	// whether they eventually succeeded or gave up.
	WaitTime time.Duration
	// Cancelled is the number of acquires that gave up because their context
	// ended, including those whose context had already ended on entry.
	Cancelled uint64
	// ShrinkingTo is the size a Resize in progress is shrinking the pool
	// to, waiting for tokens in use to come back; 0 when none is.
	ShrinkingTo int
}

// New returns a Pool holding size tokens.
//
// New panics if size < 1 or size > MaxSize: a pool that can never be
// acquired would deadlock every caller, and configuration validation is
// expected to reject such a value before it reaches this point, so getting
// here is a programming error.
func New(size int) *Pool {
	if size < 1 || size > MaxSize {
		panic(fmt.Sprintf("tokenpool: New called with size %d, outside [1, %d]", size, MaxSize))
	}
	p := &Pool{
		sem:      semaphore.NewWeighted(MaxSize),
		resizing: make(chan struct{}, 1),
	}
	if !p.sem.TryAcquire(int64(MaxSize - size)) { // the reserve
		panic("tokenpool: a fresh semaphore refused the reserve")
	}
	p.size.Store(int64(size))
	return p
}

// Resize changes the number of tokens in the pool to n, while the pool is
// in use. Holders are never interrupted: a token acquired before the change
// stays valid until it is released.
//
// Growing takes effect at once: the extra tokens go to the goroutines waiting
// in Acquire, in FIFO order, and then to new callers.
//
// Shrinking waits until enough tokens are free to take old-n of them back,
// collecting them as holders release them. It waits in the same FIFO queue
// as Acquire: while it waits, tokens released are kept for it rather than
// handed to later callers, and every Acquire that arrives after it queues
// behind it, even if tokens are free (callers already waiting when it
// starts are served before it). So the pool drains down to n holders
// instead of starving the shrink, and callers may wait for as long as the
// slowest holder keeps its token; pass a ctx with a deadline to bound that.
// Until the shrink completes, Size still reports the old size (which is the
// bound in force: nobody new gets a token meanwhile) and Stats.ShrinkingTo
// reports n.
//
// If ctx ends before a shrink has all its tokens, Resize returns ctx.Err()
// and the pool keeps its old size: the tokens collected so far are handed to
// the waiters in FIFO order, as if the shrink had never been asked for.
// Resize also returns ctx.Err(), changing nothing, if ctx has already ended
// when it is called, even for a grow.
//
// Resize calls are serialised: a Resize waits (honouring its ctx) until an
// earlier one has finished, including an earlier shrink that is still
// waiting for tokens. It returns an error, changing nothing, if n < 1 or
// n > MaxSize.
func (p *Pool) Resize(ctx context.Context, n int) error {
	if n < 1 || n > MaxSize {
		return fmt.Errorf("tokenpool: resize to %d: size must be in [1, %d]", n, MaxSize)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.resizing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.resizing }()

	old := p.size.Load()
	switch target := int64(n); {
	case target > old:
		// Report the larger size before anyone can hold more than the old.
		p.size.Store(target)
		p.sem.Release(target - old)
	case target < old:
		p.shrinkingTo.Store(target)
		defer p.shrinkingTo.Store(0)
		// All or nothing: on failure the semaphore is left unchanged and
		// whatever had been set aside for this acquire goes to the waiters.
		if err := p.sem.Acquire(ctx, old-target); err != nil {
			return err
		}
		p.size.Store(target)
	}
	return nil
}

// Acquire takes one token, blocking until a token is free or ctx is done.
//
// On success it returns nil and the caller must call Release exactly once.
// On failure it returns ctx.Err() itself (so errors.Is(err, context.Canceled)
// and errors.Is(err, context.DeadlineExceeded) work) and holds nothing.
//
// If ctx is already done on entry, Acquire fails even when a token is free:
// a request whose client has gone away must never touch the database.
//
// A token that is free right away is taken without counting as a wait; only
// callers that fall through to the blocking path are reported by Waiting and
// counted in Stats.Waited and Stats.WaitTime. Waiters are served in FIFO
// order, and a caller arriving while others wait queues behind them.
func (p *Pool) Acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		p.cancelled.Add(1)
		return err
	}

	// Fast path: a free token and nobody queued ahead of us.
	if p.sem.TryAcquire(1) {
		p.inUse.Add(1)
		p.acquired.Add(1)
		return nil
	}

	// Slow path: we have to queue for a token.
	p.waiting.Add(1)
	start := time.Now()
	err := p.sem.Acquire(ctx, 1)
	p.waitTime.Add(int64(time.Since(start)))
	p.waiting.Add(-1)
	if err != nil {
		p.cancelled.Add(1)
		return err
	}
	p.inUse.Add(1)
	p.acquired.Add(1)
	p.waited.Add(1)
	return nil
}

// Release returns one token to the pool, waking the longest waiter if any.
//
// Release panics if more tokens are released than are held, because that
// would silently raise the bound. It cannot tell which goroutine holds a
// token, so a stray Release is only detected when no token is held at all,
// whatever the current size; pair every successful Acquire with exactly one
// Release (or use Do). Tokens acquired before a Resize are released the
// same way as any other.
func (p *Pool) Release() {
	for {
		n := p.inUse.Load()
		if n <= 0 {
			panic("tokenpool: Release called without a matching Acquire")
		}
		if p.inUse.CompareAndSwap(n, n-1) {
			break
		}
	}
	p.sem.Release(1)
}

// Do acquires a token, runs fn with ctx, and releases the token when fn
// returns or panics.
//
// If the token cannot be acquired, fn is not called and Do returns ctx.Err().
// Otherwise Do returns whatever fn returns; a panic in fn propagates to the
// caller after the token has been released.
func (p *Pool) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := p.Acquire(ctx); err != nil {
		return err
	}
	defer p.Release()
	return fn(ctx)
}

// Size returns the number of tokens in the pool now; see Resize for how it
// changes.
func (p *Pool) Size() int {
	return int(p.size.Load())
}

// InUse returns the number of tokens held right now. It is a lock-free
// snapshot and may be stale by the time the caller looks at it.
func (p *Pool) InUse() int {
	return int(p.inUse.Load())
}

// Waiting returns the number of goroutines blocked in Acquire right now. It
// is a lock-free snapshot and may be stale by the time the caller looks at it.
func (p *Pool) Waiting() int {
	return int(p.waiting.Load())
}

// Stats returns a snapshot of the pool's gauges and counters. It takes no
// lock and is cheap enough to call on every metrics scrape; see Stats for the
// consistency caveat.
func (p *Pool) Stats() Stats {
	return Stats{
		Size:        int(p.size.Load()),
		InUse:       int(p.inUse.Load()),
		Waiting:     int(p.waiting.Load()),
		Acquired:    p.acquired.Load(),
		Waited:      p.waited.Load(),
		WaitTime:    time.Duration(p.waitTime.Load()),
		Cancelled:   p.cancelled.Load(),
		ShrinkingTo: int(p.shrinkingTo.Load()),
	}
}
