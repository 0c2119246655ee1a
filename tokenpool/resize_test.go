package tokenpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// assertPeak checks that the pool lets exactly want goroutines hold a token
// at once: many goroutines run Do at the same time, each holding its token
// until the pool has been full once, and the most holders seen at once must
// be want. It needs a pool nobody else is using.
func assertPeak(t *testing.T, p *Pool, want int) {
	t.Helper()
	goroutines := 4*want + 4
	var current, highest, gaveUp atomic.Int64
	deadline := time.Now().Add(patience)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			err := p.Do(context.Background(), func(context.Context) error {
				defer current.Add(-1)
				c := current.Add(1)
				for h := highest.Load(); c > h && !highest.CompareAndSwap(h, c); h = highest.Load() {
				}
				for highest.Load() < int64(want) {
					if time.Now().After(deadline) {
						gaveUp.Add(1)
						return nil
					}
					time.Sleep(50 * time.Microsecond)
				}
				time.Sleep(100 * time.Microsecond)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := highest.Load(); got != int64(want) || gaveUp.Load() > 0 {
		t.Errorf("at most %d concurrent holders (%d gave up waiting for the pool to fill), want exactly %d",
			got, gaveUp.Load(), want)
	}
}

// startResize runs p.Resize(ctx, n) in a goroutine and returns its result channel.
func startResize(ctx context.Context, p *Pool, n int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Resize(ctx, n) }()
	return done
}

// startAcquire runs p.Acquire(ctx) in a goroutine and returns its result
// channel; the token, if acquired, stays held.
func startAcquire(ctx context.Context, p *Pool) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Acquire(ctx) }()
	return done
}

// notYet fails the test if ch has delivered, after giving it a moment to.
// It cannot prove that ch never delivers; the later steps of each test do.
func notYet[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s finished too early (with %v)", what, v)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestResizeGrowLetsWaitersProceedInArrivalOrder(t *testing.T) {
	const waiters = 3
	p := New(2)
	hold(t, p, 2)

	order := make(chan int, waiters)
	for i := range waiters {
		go func() {
			if err := p.Acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			order <- i // keeps its token
		}()
		waitUntil(t, fmt.Sprintf("waiter %d is queued", i), func() bool { return p.Waiting() == i+1 })
	}

	// One more token: only the first waiter gets in.
	if err := p.Resize(context.Background(), 3); err != nil {
		t.Fatalf("grow to 3: %v", err)
	}
	if got := receive(t, "the first waiter", order); got != 0 {
		t.Fatalf("growing by one let waiter %d in, want waiter 0", got)
	}
	notYet(t, "the second waiter", order)
	if s := p.Stats(); s.Size != 3 || s.InUse != 3 || s.Waiting != 2 || s.Acquired != 3 {
		t.Fatalf("after growing to 3: %+v, want Size 3, InUse 3, Waiting 2, Acquired 3", s)
	}

	// One more at a time: the others, in order.
	for want := 1; want < waiters; want++ {
		if err := p.Resize(context.Background(), 3+want); err != nil {
			t.Fatalf("grow to %d: %v", 3+want, err)
		}
		if got := receive(t, "the next waiter", order); got != want {
			t.Fatalf("waiter %d was served at position %d", got, want)
		}
	}
	waitUntil(t, "every waiter holds a token", func() bool { return p.InUse() == 5 })
	if s := p.Stats(); s.Size != 5 || s.Waiting != 0 || s.Waited != waiters || s.ShrinkingTo != 0 {
		t.Fatalf("after growing to 5: %+v", s)
	}

	releaseN(p, 5)
	assertFreeTokens(t, p, 5)
	assertPeak(t, p, 5)
}

func TestResizeShrinkWaitsForTokensInUse(t *testing.T) {
	p := New(6)
	hold(t, p, 4) // 2 free: the shrink to 2 needs 2 of the 4 held back

	shrunk := startResize(context.Background(), p, 2)
	waitUntil(t, "the shrink is waiting", func() bool { return p.Stats().ShrinkingTo == 2 })
	notYet(t, "the shrink", shrunk)
	if got := p.Size(); got != 6 {
		t.Fatalf("Size() while the shrink waits = %d, want the old 6", got)
	}

	// A new caller queues behind the shrink although tokens are free.
	late := startAcquire(context.Background(), p)
	waitUntil(t, "the late caller is queued", func() bool { return p.Waiting() == 1 })
	notYet(t, "the late caller", late)

	p.Release()
	notYet(t, "the shrink, with one of two tokens back", shrunk)
	if got := p.Waiting(); got != 1 {
		t.Fatalf("a token released during the shrink went to a later caller (Waiting() = %d)", got)
	}

	p.Release()
	if err := receive(t, "the shrink", shrunk); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	if s := p.Stats(); s.Size != 2 || s.InUse != 2 || s.ShrinkingTo != 0 {
		t.Fatalf("after the shrink: %+v, want Size 2, InUse 2, ShrinkingTo 0", s)
	}
	// The pool is full at its new size: the late caller still waits.
	notYet(t, "the late caller, with the shrunk pool full", late)

	p.Release()
	if err := receive(t, "the late caller", late); err != nil {
		t.Fatalf("late caller: %v", err)
	}
	releaseN(p, 2)
	assertFreeTokens(t, p, 2)
	assertPeak(t, p, 2)
}

func TestResizeShrinkGivesUpWhenContextEnds(t *testing.T) {
	tests := []struct {
		name string
		// newCtx returns the shrink's context, its cleanup and a function
		// that ends it; nil means it ends by itself.
		newCtx func() (context.Context, context.CancelFunc, func())
		want   error
	}{
		{
			name: "cancelled while waiting",
			newCtx: func() (context.Context, context.CancelFunc, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				return ctx, cancel, cancel
			},
			want: context.Canceled,
		},
		{
			name: "deadline passes while waiting",
			newCtx: func() (context.Context, context.CancelFunc, func()) {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				return ctx, cancel, nil
			},
			want: context.DeadlineExceeded,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(4)
			hold(t, p, 3) // 1 free: the shrink to 1 needs 2 of the 3 held back

			ctx, cleanup, end := tc.newCtx()
			defer cleanup()
			shrunk := startResize(ctx, p, 1)
			waitUntil(t, "the shrink is waiting", func() bool { return p.Stats().ShrinkingTo == 1 })
			late := startAcquire(context.Background(), p)
			waitUntil(t, "the late caller is queued", func() bool { return p.Waiting() == 1 })
			// One token comes back and is set aside for the shrink.
			p.Release()

			if end != nil {
				end()
			}
			if err := receive(t, "the shrink to give up", shrunk); !errors.Is(err, tc.want) {
				t.Fatalf("Resize returned %v, want %v", err, tc.want)
			}
			if s := p.Stats(); s.Size != 4 || s.ShrinkingTo != 0 {
				t.Fatalf("after the shrink gave up: %+v, want the old Size 4 and ShrinkingTo 0", s)
			}
			// The tokens set aside go back to the queue: the late caller gets one.
			if err := receive(t, "the late caller", late); err != nil {
				t.Fatalf("late caller: %v", err)
			}
			releaseN(p, 3)
			assertFreeTokens(t, p, 4)
			assertPeak(t, p, 4)
		})
	}
}

func TestResizeWithEndedContextChangesNothing(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprintf("to %d", n), func(t *testing.T) {
			p := New(3)
			if err := p.Resize(cancelled, n); !errors.Is(err, context.Canceled) {
				t.Fatalf("Resize with a cancelled context: %v, want context.Canceled", err)
			}
			if got := p.Size(); got != 3 {
				t.Fatalf("Size() = %d, want 3", got)
			}
			assertFreeTokens(t, p, 3)
		})
	}
}

func TestResizeRefusesSizesOutOfRange(t *testing.T) {
	for _, n := range []int{0, -1, MaxSize + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := New(3)
			if err := p.Resize(context.Background(), n); err == nil {
				t.Fatalf("Resize(%d) succeeded", n)
			}
			if got := p.Size(); got != 3 {
				t.Fatalf("Size() = %d, want 3", got)
			}
			assertFreeTokens(t, p, 3)
		})
	}
}

func TestResizeToTheSameSizeChangesNothing(t *testing.T) {
	p := New(3)
	hold(t, p, 3)
	if err := p.Resize(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Size != 3 || s.InUse != 3 || s.ShrinkingTo != 0 {
		t.Fatalf("%+v", s)
	}
	releaseN(p, 3)
	assertFreeTokens(t, p, 3)
}

func TestResizeCallsAreSerialised(t *testing.T) {
	p := New(3)
	hold(t, p, 3)
	shrunk := startResize(context.Background(), p, 1)
	waitUntil(t, "the shrink is waiting", func() bool { return p.Stats().ShrinkingTo == 1 })

	// A second Resize waits for the first, and gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Resize(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Resize behind a waiting shrink: %v, want context.DeadlineExceeded", err)
	}
	if got := p.Size(); got != 3 {
		t.Fatalf("Size() = %d after a Resize that gave up, want 3", got)
	}

	grown := startResize(context.Background(), p, 6)
	notYet(t, "the grow behind the shrink", grown)
	if s := p.Stats(); s.Size != 3 || s.ShrinkingTo != 1 {
		t.Fatalf("while the grow waits for the shrink: %+v", s)
	}

	releaseN(p, 2) // the shrink's two tokens
	if err := receive(t, "the shrink", shrunk); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	if err := receive(t, "the grow", grown); err != nil {
		t.Fatalf("grow: %v", err)
	}
	if s := p.Stats(); s.Size != 6 || s.InUse != 1 || s.ShrinkingTo != 0 {
		t.Fatalf("after both: %+v, want Size 6, InUse 1", s)
	}
	p.Release()
	assertFreeTokens(t, p, 6)
}

// TestResizeUnderLoad resizes the pool at random while many goroutines use
// it, some with deadlines of their own, and checks that no caller fails but
// by its own context, that there are never more holders than the size in
// force, and that nothing deadlocks.
func TestResizeUnderLoad(t *testing.T) {
	const (
		workers = 32
		resizes = 150
		maxSize = 20
	)
	p := New(5)

	// bound is at least the size in force at every instant: the resizer
	// raises it before a grow and lowers it only after a shrink completed.
	// A holder counts itself in current and compares with bound under mu,
	// so both are read at the same instant.
	var (
		mu         sync.Mutex
		bound      = 5
		current    int
		highest    int
		violations []string
	)
	var ok, ownDeadline, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%2 == 1 {
					ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
				}
				err := p.Do(ctx, func(context.Context) error {
					mu.Lock()
					current++
					if inUse := p.InUse(); current > bound || inUse > bound {
						violations = append(violations, fmt.Sprintf("%d holders (InUse %d) with at most %d tokens", current, inUse, bound))
					}
					highest = max(highest, current)
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					mu.Lock()
					current--
					mu.Unlock()
					return nil
				})
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
					ownDeadline.Add(1)
				default:
					failed.Add(1)
					t.Errorf("Do failed: %v", err)
				}
			}
		})
	}

	var resizeFailures []string
	var gaveUp int
	resizer := make(chan struct{})
	go func() {
		defer close(resizer)
		for i := range resizes {
			n := 1 + rand.IntN(maxSize)
			old := p.Size()
			mu.Lock()
			bound = max(old, n)
			mu.Unlock()

			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if i%4 == 3 { // some shrinks give up
				ctx, cancel = context.WithTimeout(ctx, 200*time.Microsecond)
			}
			err := p.Resize(ctx, n)
			cancel()
			got := p.Size()
			switch {
			case err == nil && got != n:
				resizeFailures = append(resizeFailures, fmt.Sprintf("resize %d->%d succeeded but Size() = %d", old, n, got))
			case err != nil && !errors.Is(err, context.DeadlineExceeded):
				resizeFailures = append(resizeFailures, fmt.Sprintf("resize %d->%d: %v", old, n, err))
			case err != nil && got != old:
				resizeFailures = append(resizeFailures, fmt.Sprintf("resize %d->%d gave up but Size() = %d", old, n, got))
			case err != nil:
				gaveUp++
			}
			mu.Lock()
			bound = got
			mu.Unlock()
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		}
	}()

	receive(t, "the resizer to finish (deadlock?)", resizer)
	close(stop)
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	receive(t, "the workers to stop (deadlock?)", joined)

	for _, f := range resizeFailures {
		t.Error(f)
	}
	for i, v := range violations {
		if i == 10 {
			t.Errorf("... and %d more", len(violations)-10)
			break
		}
		t.Error(v)
	}
	t.Logf("%d calls done, %d gave up by their own deadline; %d of %d resizes gave up; at most %d holders at once",
		ok.Load(), ownDeadline.Load(), gaveUp, resizes, highest)
	if highest < 2 {
		t.Errorf("at most %d holders at once: the load never overlapped, so the test proved nothing", highest)
	}
	if ok.Load() == 0 {
		t.Error("no call succeeded")
	}

	size := p.Size()
	s := p.Stats()
	if s.InUse != 0 || s.Waiting != 0 || s.ShrinkingTo != 0 {
		t.Errorf("at rest: %+v, want InUse, Waiting and ShrinkingTo 0", s)
	}
	if s.Acquired != uint64(ok.Load()) {
		t.Errorf("Acquired = %d, want the %d calls that ran", s.Acquired, ok.Load())
	}
	if s.Cancelled != uint64(ownDeadline.Load()) {
		t.Errorf("Cancelled = %d, want the %d calls that gave up", s.Cancelled, ownDeadline.Load())
	}
	assertFreeTokens(t, p, size)
}
