package guard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/shoal-chess/shoal/rundb"
)

// fakeClock is a settable time for limiters. Safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fail counts one failed attempt for key, as a check that failed does; it returns reserve's
// wait (0: counted, else refused and not counted).
func fail(l *keyedLimiter, key string) time.Duration {
	w := l.reserve(context.Background(), key)
	if w == 0 {
		l.settle(key, true)
	}
	return w
}

func TestUIAccountsLimiterBurstThenWait(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/60), 3, 100, clk.now) // 3 at once, then one a minute

	for i := range 3 {
		if w := l.wait("a"); w != 0 {
			t.Fatalf("event %d: wait %v, want none", i+1, w)
		}
		if w := fail(l, "a"); w != 0 {
			t.Fatalf("event %d refused: %v", i+1, w)
		}
	}
	w := l.wait("a")
	if w <= 59*time.Second || w > time.Minute {
		t.Fatalf("after the burst: wait %v, want about a minute", w)
	}
	if other := l.wait("b"); other != 0 {
		t.Errorf("another key waits %v", other)
	}
	// An empty bucket refuses at once (no check is in flight to wait for) and takes nothing.
	if w := fail(l, "a"); w <= 59*time.Second || w > time.Minute {
		t.Errorf("reserve from an empty bucket: wait %v, want a refusal of about a minute", w)
	}
	clk.advance(61 * time.Second)
	if w := l.wait("a"); w != 0 {
		t.Errorf("a minute later: wait %v, want none", w)
	}
	fail(l, "a")
	if w := l.wait("a"); w == 0 {
		t.Errorf("the refilled token was not used up")
	}
}

func TestUIAccountsLimiterSuccessGivesBack(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/60), 2, 100, clk.now)
	ctx := context.Background()
	for i := range 10 {
		if w := l.reserve(ctx, "a"); w != 0 {
			t.Fatalf("check %d: wait %v", i+1, w)
		}
		clk.advance(30 * time.Second) // a slow check still gives its token back
		l.settle("a", false)
	}
	fail(l, "a")
	fail(l, "a")
	if w := l.reserve(ctx, "a"); w == 0 {
		t.Error("a third check after two failures from a bucket of 2")
	}
	l.settle("unknown", false) // a key never seen (or dropped) needs nothing
	l.settle("a", false)       // nor a key with nothing held
	if n := l.size(); n != 1 {
		t.Errorf("settling created a key: %d keys", n)
	}
	if w := l.wait("a"); w == 0 {
		t.Error("settling nothing gave a token back")
	}
}

func TestUIAccountsLimiterWaitsForChecksInFlight(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/3600), 2, 100, clk.now)
	ctx := context.Background()
	for range 2 {
		if w := l.reserve(ctx, "a"); w != 0 {
			t.Fatal(w)
		}
	}
	// Both tokens are held: a third check waits for one of them to end.
	got := make(chan time.Duration)
	go func() { got <- l.reserve(ctx, "a") }()
	select {
	case w := <-got:
		t.Fatalf("a third check did not wait: %v", w)
	case <-time.After(50 * time.Millisecond):
	}
	l.settle("a", false) // a success: its token is free again
	if w := <-got; w != 0 {
		t.Fatalf("after a success: wait %v, want the freed token", w)
	}
	// Two held again; failures empty the bucket and the waiter is refused.
	go func() { got <- l.reserve(ctx, "a") }()
	time.Sleep(20 * time.Millisecond)
	l.settle("a", true)
	l.settle("a", true)
	if w := <-got; w <= 0 {
		t.Fatalf("after two failures: wait %v, want a refusal", w)
	}

	// A waiting check gives up when its request ends.
	m := newKeyedLimiter(rate.Limit(1.0/3600), 1, 100, clk.now)
	if w := m.reserve(ctx, "b"); w != 0 {
		t.Fatal(w)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- m.reserve(cctx, "b") }()
	cancel()
	if w := <-got; w < time.Second {
		t.Errorf("a cancelled wait: %v, want a refusal", w)
	}
}

func TestUIAccountsLimiterForgetsIdleKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1), 2, 1000, clk.now)
	for i := range 10 {
		fail(l, fmt.Sprint("k", i))
	}
	if w := l.reserve(context.Background(), "held"); w != 0 {
		t.Fatal(w)
	}
	if n := l.size(); n != 11 {
		t.Fatalf("%d keys, want 11", n)
	}
	clk.advance(limiterMinIdleTime)
	fail(l, "fresh")
	if n := l.size(); n != 2 {
		t.Errorf("after the idle time: %d keys, want only the fresh one and the held one", n)
	}
	l.settle("held", false)
}

func TestUIAccountsLimiterBoundsKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/3600), 1, 100, clk.now)
	for i := range 1000 {
		fail(l, fmt.Sprint("k", i))
		if n := l.size(); n > 100 {
			t.Fatalf("%d keys after %d, want at most 100", n, i+1)
		}
	}
	// The newest key is always remembered.
	if w := l.wait("k999"); w == 0 {
		t.Errorf("the newest key was forgotten")
	}
}

func TestUIAccountsLimiterConcurrentUse(t *testing.T) {
	l := newKeyedLimiter(rate.Limit(1.0/3600), 50, 10, time.Now)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprint("k", (g+i)%20)
				l.wait(key)
				if l.reserve(context.Background(), key) == 0 {
					l.settle(key, i%2 == 0)
				}
			}
		})
	}
	wg.Wait()
	if n := l.size(); n > 10 {
		t.Errorf("%d keys, want at most 10", n)
	}
}

func TestUIAccountsLimiterReserveAllOrNothing(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	ctx := context.Background()
	wide := newKeyedLimiter(rate.Limit(1.0/60), 10, 100, clk.now)
	narrow := newKeyedLimiter(rate.Limit(1.0/60), 1, 100, clk.now)
	r, w := reserve(ctx, limitKey{wide, "ip"}, limitKey{narrow, "user"})
	if r == nil || w != 0 {
		t.Fatalf("first reservation refused: %v", w)
	}
	r.Settle(rundb.ErrBadCredentials) // a failure keeps its tokens
	r.Release()                       // and is settled once
	if r2, w := reserve(ctx, limitKey{wide, "ip"}, limitKey{narrow, "user"}); r2 != nil || w <= 0 {
		t.Fatalf("the narrow bucket is empty, yet reserved (wait %v)", w)
	}
	// The refused reservation gave back what it held of the wide bucket: 9 left.
	for i := range 9 {
		if w := fail(wide, "ip"); w != 0 {
			t.Fatalf("wide bucket, token %d: wait %v; a refused reservation kept a token", i+1, w)
		}
	}
	if w := fail(wide, "ip"); w == 0 {
		t.Error("wide bucket: an 11th token")
	}

	// Anything but a failed login gives everything back, once.
	a := newKeyedLimiter(rate.Limit(1.0/60), 1, 100, clk.now)
	for _, err := range []error{nil, rundb.ErrBlocked, rundb.ErrPending, context.Canceled} {
		r, w := reserve(ctx, limitKey{a, "k"})
		if w != 0 {
			t.Fatalf("after %v: wait %v", err, w)
		}
		r.Settle(err)
		r.Consume()
	}
	r, _ = reserve(ctx, limitKey{a, "k"})
	r.Consume()
	if w := a.wait("k"); w == 0 {
		t.Error("consume gave the token back")
	}
	var none *Reservation
	none.Release() // a nil reservation holds nothing
}
