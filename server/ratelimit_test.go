package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
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

func TestUIAccountsLimiterBurstThenWait(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/60), 3, 100, clk.now) // 3 at once, then one a minute

	for i := range 3 {
		if w := l.wait("a"); w != 0 {
			t.Fatalf("event %d: wait %v, want none", i+1, w)
		}
		l.take("a")
	}
	w := l.wait("a")
	if w <= 59*time.Second || w > time.Minute {
		t.Fatalf("after the burst: wait %v, want about a minute", w)
	}
	if other := l.wait("b"); other != 0 {
		t.Errorf("another key waits %v", other)
	}
	// Taking from an empty bucket keeps it empty (no debt beyond one event).
	l.take("a")
	clk.advance(61 * time.Second)
	if w := l.wait("a"); w != 0 {
		t.Errorf("a minute later: wait %v, want none", w)
	}
	l.take("a")
	if w := l.wait("a"); w == 0 {
		t.Errorf("the refilled token was not used up")
	}
}

func TestUIAccountsLimiterForgetsIdleKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1), 2, 1000, clk.now)
	for i := range 10 {
		l.take(fmt.Sprint("k", i))
	}
	if n := l.size(); n != 10 {
		t.Fatalf("%d keys, want 10", n)
	}
	clk.advance(limiterMinIdleTime)
	l.take("fresh")
	if n := l.size(); n != 1 {
		t.Errorf("after the idle time: %d keys, want only the fresh one", n)
	}
}

func TestUIAccountsLimiterBoundsKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newKeyedLimiter(rate.Limit(1.0/3600), 1, 100, clk.now)
	for i := range 1000 {
		l.take(fmt.Sprint("k", i))
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
				l.take(key)
			}
		})
	}
	wg.Wait()
	if n := l.size(); n > 10 {
		t.Errorf("%d keys, want at most 10", n)
	}
}

func TestUIAccountsLimiterPerServer(t *testing.T) {
	a, b := newUIEnv(t).s, newUIEnv(t).s
	if a.limits() != a.limits() {
		t.Error("one server has two sets of limiters")
	}
	if a.limits() == b.limits() {
		t.Error("two servers share their limiters")
	}
}
