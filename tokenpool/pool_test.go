package tokenpool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// patience bounds every wait in these tests. It is a safety net that turns a
// hang into a failure, never an assertion about how fast something is.
const patience = 10 * time.Second

// waitUntil polls cond until it holds, failing the test if it does not hold
// within patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// receive returns the next value from ch, failing the test if none arrives
// within patience.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// mustPanic runs fn and returns the value it panicked with, failing the test
// if it returned normally.
func mustPanic(t *testing.T, fn func()) (recovered any) {
	t.Helper()
	defer func() {
		recovered = recover()
		if recovered == nil {
			t.Fatal("expected a panic, got none")
		}
	}()
	fn()
	return nil
}

// hold acquires n tokens with a background context, failing the test if any
// acquire fails.
func hold(t *testing.T, p *Pool, n int) {
	t.Helper()
	for i := range n {
		if err := p.Acquire(context.Background()); err != nil {
			t.Fatalf("acquire %d of %d: %v", i+1, n, err)
		}
	}
}

// releaseN releases n tokens.
func releaseN(p *Pool, n int) {
	for range n {
		p.Release()
	}
}

// assertFreeTokens checks that exactly want tokens can be taken right now:
// want acquires succeed without having to wait, and one more acquire blocks
// until it is cancelled. It needs a quiet pool (nobody else acquiring or
// waiting) and leaves the tokens as it found them; it does bump the
// Acquired and Cancelled counters.
func assertFreeTokens(t *testing.T, p *Pool, want int) {
	t.Helper()
	if w := p.Waiting(); w != 0 {
		t.Fatalf("assertFreeTokens needs a quiet pool, but %d goroutines are waiting", w)
	}

	for i := range want {
		waitedBefore := p.Stats().Waited
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		err := p.Acquire(ctx)
		cancel()
		if err != nil {
			t.Fatalf("token %d of %d was not free (leaked?): %v", i+1, want, err)
		}
		if p.Stats().Waited != waitedBefore {
			t.Fatalf("token %d of %d was not free: its acquire had to wait", i+1, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	extra := make(chan error, 1)
	go func() { extra <- p.Acquire(ctx) }()
	deadline := time.Now().Add(patience)
	for p.Waiting() != 1 {
		select {
		case err := <-extra:
			if err == nil {
				p.Release()
			}
			t.Fatalf("acquire %d did not block (err=%v): more than %d tokens were free", want+1, err, want)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for acquire %d to block", want+1)
		}
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	if err := receive(t, "the extra acquire to give up", extra); !errors.Is(err, context.Canceled) {
		t.Fatalf("extra acquire: got %v, want context.Canceled", err)
	}

	releaseN(p, want)
}

func TestNewPanicsOnSizeBelowOne(t *testing.T) {
	for _, size := range []int{0, -1, math.MinInt, MaxSize + 1, math.MaxInt} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			mustPanic(t, func() { New(size) })
		})
	}
}

func TestNewPoolIsEmptyAndReportsItsSize(t *testing.T) {
	for _, size := range []int{1, 5, 200} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			p := New(size)
			if got := p.Size(); got != size {
				t.Errorf("Size() = %d, want %d", got, size)
			}
			if got, want := p.Stats(), (Stats{Size: size}); got != want {
				t.Errorf("Stats() = %+v, want %+v", got, want)
			}
			assertFreeTokens(t, p, size)
		})
	}
}

func TestFreeTokenIsTakenWithoutCountingAsWait(t *testing.T) {
	p := New(3)
	hold(t, p, 3)
	want := Stats{Size: 3, InUse: 3, Acquired: 3}
	if got := p.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	releaseN(p, 3)
	if got := p.InUse(); got != 0 {
		t.Errorf("InUse() after releasing everything = %d, want 0", got)
	}
}

func TestBoundHoldsUnderContention(t *testing.T) {
	const goroutines = 200
	for _, size := range []int{1, 5, 16} {
		t.Run(fmt.Sprintf("size %d", size), func(t *testing.T) {
			p := New(size)
			var current, highest, ran, failed atomic.Int64
			start := make(chan struct{})
			// One deadline for the whole run, so a pool that can never fill
			// up fails once instead of once per goroutine.
			deadline := time.Now().Add(patience)
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					<-start
					err := p.Do(context.Background(), func(context.Context) error {
						defer current.Add(-1)
						c := current.Add(1)
						for {
							h := highest.Load()
							if c <= h || highest.CompareAndSwap(h, c) {
								break
							}
						}
						// Hold the token until the pool has been full at least
						// once, so that reaching the bound is certain rather than
						// left to the scheduler. A pool that admits fewer than
						// size holders makes this time out.
						for highest.Load() < int64(size) {
							if time.Now().After(deadline) {
								failed.Add(1)
								return nil
							}
							time.Sleep(50 * time.Microsecond)
						}
						time.Sleep(100 * time.Microsecond)
						ran.Add(1)
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()

			if n := failed.Load(); n > 0 {
				t.Errorf("%d holders gave up: the pool never had %d concurrent holders", n, size)
			}

			if got := highest.Load(); got != int64(size) {
				t.Errorf("max concurrent holders = %d, want exactly %d", got, size)
			}
			if got := ran.Load(); got != goroutines {
				t.Errorf("%d of %d functions ran", got, goroutines)
			}
			s := p.Stats()
			if s.InUse != 0 || s.Waiting != 0 || s.Cancelled != 0 {
				t.Errorf("after all done: InUse=%d Waiting=%d Cancelled=%d, want all 0", s.InUse, s.Waiting, s.Cancelled)
			}
			if s.Acquired != goroutines {
				t.Errorf("Acquired = %d, want %d", s.Acquired, goroutines)
			}
			if s.Waited > goroutines {
				t.Errorf("Waited = %d, cannot exceed %d acquires", s.Waited, goroutines)
			}
		})
	}
}

func TestWaitingReportsBlockedGoroutines(t *testing.T) {
	const size = 3
	for _, blocked := range []int{1, 3, 25} {
		t.Run(fmt.Sprintf("%d blocked", blocked), func(t *testing.T) {
			p := New(size)
			hold(t, p, size)

			proceeded := make(chan struct{}, blocked)
			failed := make(chan error, blocked)
			for range blocked {
				go func() {
					if err := p.Acquire(context.Background()); err != nil {
						failed <- err
						return
					}
					// Signal only after Release has returned, so that once
					// every acquirer has signalled all tokens are back.
					p.Release()
					proceeded <- struct{}{}
				}()
			}

			waitUntil(t, fmt.Sprintf("Waiting() == %d", blocked), func() bool { return p.Waiting() == blocked })
			if n := len(proceeded); n != 0 {
				t.Fatalf("%d acquirers got through a full pool", n)
			}
			if got := p.InUse(); got != size {
				t.Fatalf("InUse() while full = %d, want %d", got, size)
			}
			if got := p.Stats().Waiting; got != blocked {
				t.Fatalf("Stats().Waiting = %d, want %d", got, blocked)
			}

			releaseN(p, size)
			for i := range blocked {
				select {
				case <-proceeded:
				case err := <-failed:
					t.Fatalf("blocked acquirer failed: %v", err)
				case <-time.After(patience):
					t.Fatalf("only %d of %d blocked acquirers proceeded", i, blocked)
				}
			}

			s := p.Stats()
			if s.InUse != 0 {
				t.Errorf("InUse = %d after everyone released, want 0", s.InUse)
			}
			if s.Waiting != 0 {
				t.Errorf("Waiting = %d after everyone proceeded, want 0", s.Waiting)
			}
			if s.Acquired != uint64(size+blocked) {
				t.Errorf("Acquired = %d, want %d", s.Acquired, size+blocked)
			}
			if s.Waited != uint64(blocked) {
				t.Errorf("Waited = %d, want %d", s.Waited, blocked)
			}
			if s.WaitTime <= 0 {
				t.Errorf("WaitTime = %v, want > 0", s.WaitTime)
			}
			if s.Cancelled != 0 {
				t.Errorf("Cancelled = %d, want 0", s.Cancelled)
			}
			assertFreeTokens(t, p, size)
		})
	}
}

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	const waiters = 5
	p := New(1)
	hold(t, p, 1)

	order := make(chan int, waiters)
	for i := range waiters {
		go func() {
			if err := p.Acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			order <- i
			p.Release()
		}()
		// Let waiter i join the queue before waiter i+1 starts.
		waitUntil(t, fmt.Sprintf("waiter %d is queued", i), func() bool { return p.Waiting() == i+1 })
	}

	p.Release()
	for want := range waiters {
		if got := receive(t, "the next waiter", order); got != want {
			t.Fatalf("waiter %d was served at position %d", got, want)
		}
	}
}

func TestCancelledContextStopsWaiting(t *testing.T) {
	const size = 2
	tests := []struct {
		name string
		// newCtx returns the context for the blocked acquire and a function
		// that makes it end; nil means it ends by itself.
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
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				return ctx, cancel, nil
			},
			want: context.DeadlineExceeded,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(size)
			hold(t, p, size)

			ctx, cleanup, end := tc.newCtx()
			defer cleanup()
			result := make(chan error, 1)
			go func() { result <- p.Acquire(ctx) }()
			if end != nil {
				waitUntil(t, "the acquirer is blocked", func() bool { return p.Waiting() == 1 })
				end()
			}
			err := receive(t, "the acquire to give up", result)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Acquire returned %v, want %v", err, tc.want)
			}

			want := Stats{Size: size, InUse: size, Acquired: size, Cancelled: 1}
			got := p.Stats()
			if got.WaitTime <= 0 {
				t.Errorf("WaitTime = %v, want > 0: a cancelled wait still counts", got.WaitTime)
			}
			got.WaitTime = 0
			if got != want {
				t.Errorf("Stats() = %+v, want %+v (ignoring WaitTime)", got, want)
			}

			releaseN(p, size)
			assertFreeTokens(t, p, size)
		})
	}
}

func TestAlreadyDoneContextFailsEvenWithFreeTokens(t *testing.T) {
	const size = 2
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()

	contexts := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline passed", expired, context.DeadlineExceeded},
	}
	calls := []struct {
		name string
		call func(p *Pool, ctx context.Context) (fnRan bool, err error)
	}{
		{"Acquire", func(p *Pool, ctx context.Context) (bool, error) {
			return false, p.Acquire(ctx)
		}},
		{"Do", func(p *Pool, ctx context.Context) (bool, error) {
			ran := false
			err := p.Do(ctx, func(context.Context) error { ran = true; return nil })
			return ran, err
		}},
	}
	for _, c := range contexts {
		for _, call := range calls {
			t.Run(call.name+" with "+c.name+" context", func(t *testing.T) {
				p := New(size)
				fnRan, err := call.call(p, c.ctx)
				if !errors.Is(err, c.want) {
					t.Fatalf("got %v, want %v", err, c.want)
				}
				if fnRan {
					t.Error("Do ran fn although its context was already done")
				}
				want := Stats{Size: size, Cancelled: 1}
				if got := p.Stats(); got != want {
					t.Errorf("Stats() = %+v, want %+v", got, want)
				}
				assertFreeTokens(t, p, size)
			})
		}
	}
}

type ctxKey struct{}

func TestDoReleasesTheToken(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		fnErr     error
		fnPanic   any
		wantErr   error
		wantPanic any
	}{
		{name: "when fn succeeds"},
		{name: "when fn returns an error", fnErr: errBoom, wantErr: errBoom},
		{name: "when fn panics", fnPanic: "kaboom", wantPanic: "kaboom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(1)
			ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
			var sawCtx bool
			var inUseDuring int
			fn := func(ctx context.Context) error {
				sawCtx = ctx.Value(ctxKey{}) == "mine"
				inUseDuring = p.InUse()
				if tc.fnPanic != nil {
					panic(tc.fnPanic)
				}
				return tc.fnErr
			}

			var err error
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				err = p.Do(ctx, fn)
			}()

			if panicked != tc.wantPanic {
				t.Errorf("Do panicked with %v, want %v", panicked, tc.wantPanic)
			}
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("Do returned %v, want %v", err, tc.wantErr)
			}
			if !sawCtx {
				t.Error("fn did not receive the caller's context")
			}
			if inUseDuring != 1 {
				t.Errorf("InUse() inside fn = %d, want 1", inUseDuring)
			}
			if got := p.InUse(); got != 0 {
				t.Errorf("InUse() after Do = %d, want 0", got)
			}
			assertFreeTokens(t, p, 1)
		})
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	const size = 2
	tests := []struct {
		name  string
		setup func(t *testing.T, p *Pool)
	}{
		{"on a fresh pool", func(*testing.T, *Pool) {}},
		{"after every token came back", func(t *testing.T, p *Pool) {
			hold(t, p, size)
			releaseN(p, size)
		}},
		{"after growing and shrinking back with tokens held", func(t *testing.T, p *Pool) {
			hold(t, p, size)
			if err := p.Resize(context.Background(), size+3); err != nil {
				t.Fatal(err)
			}
			hold(t, p, 3)
			done := make(chan error, 1)
			go func() { done <- p.Resize(context.Background(), size) }()
			releaseN(p, size+3)
			if err := receive(t, "the shrink", done); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(size)
			tc.setup(t, p)
			v := mustPanic(t, p.Release)
			if msg := fmt.Sprint(v); !strings.Contains(msg, "tokenpool") {
				t.Errorf("panic value %q does not come from tokenpool", msg)
			}
			// The failed Release must not have corrupted the pool.
			if got := p.InUse(); got != 0 {
				t.Errorf("InUse() after bad Release = %d, want 0", got)
			}
			assertFreeTokens(t, p, size)
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	p := New(1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := New(200)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.Acquire(ctx); err != nil {
				b.Error(err)
				return
			}
			p.Release()
		}
	})
}
