package gitmirror

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// pairs is an upstream with a base and n commits after it, mirrored.
func pairs(t *testing.T, n int) (*Mirrors, *fakeClock, string, string, []string) {
	t.Helper()
	up := newUpstream(t)
	up.write("src/a.cpp", "int a;\n")
	base := up.commit("base")
	var news []string
	for i := range n {
		up.write("src/a.cpp", strings.Repeat("int b;\n", i+2))
		news = append(news, up.commit("next"))
	}
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	if _, err := m.Resolve(testCtx(t), up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	return m, clock, up.dir, base, news
}

func TestConcurrentDiffsOfAPairComputeOnce(t *testing.T) {
	m, _, repo, base, news := pairs(t, 1)
	release := make(chan struct{})
	m.diffHook = func() { <-release }
	ctx := testCtx(t)
	var wg sync.WaitGroup
	diffs := make([]*Diff, 8)
	for i := range diffs {
		wg.Go(func() {
			d, err := m.Diff(ctx, repo, base, news[0])
			if err != nil {
				t.Error(err)
			}
			diffs[i] = d
		})
	}
	time.Sleep(200 * time.Millisecond) // all eight on their way
	close(release)
	wg.Wait()
	if n := m.diffCount.Load(); n != 1 {
		t.Errorf("%d diffs computed for 8 concurrent calls, want 1", n)
	}
	for _, d := range diffs {
		if d != diffs[0] {
			t.Errorf("the calls got different diffs")
		}
	}
}

func TestFailedReadsAreRemembered(t *testing.T) {
	m, clock, repo, base, _ := pairs(t, 1)
	ctx := testCtx(t)
	missing := strings.Repeat("5", 40)
	for _, read := range []struct {
		name string
		call func() error
	}{
		{"Diff", func() error { _, err := m.Diff(ctx, repo, base, missing); return err }},
		{"Relation", func() error { _, err := m.Relation(ctx, repo, base, missing); return err }},
	} {
		t.Run(read.name, func(t *testing.T) {
			err := read.call()
			if !errors.Is(err, ErrUnknownRef) {
				t.Fatalf("%s of a commit the mirror lacks: %v, want ErrUnknownRef", read.name, err)
			}
			runs := m.runCount.Load()
			clock.advance(50 * time.Second)
			if again := read.call(); again == nil || again.Error() != err.Error() {
				t.Errorf("%s again: %v, want %v", read.name, again, err)
			}
			if n := m.runCount.Load() - runs; n != 0 {
				t.Errorf("%s again within the minute ran git %d times", read.name, n)
			}
			clock.advance(20 * time.Second)
			if again := read.call(); !errors.Is(again, ErrUnknownRef) {
				t.Errorf("%s after the minute: %v", read.name, again)
			}
			if m.runCount.Load() == runs {
				t.Errorf("%s after the minute ran no git", read.name)
			}
		})
	}
}

func TestReadsRunAtMostFourAtOnce(t *testing.T) {
	m, _, repo, base, news := pairs(t, 10)
	var mu sync.Mutex
	active, peak := 0, 0
	m.diffHook = func() {
		mu.Lock()
		active++
		peak = max(peak, active)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		active--
		mu.Unlock()
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for _, n := range news {
		wg.Go(func() {
			if _, err := m.Diff(ctx, repo, base, n); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak > parallelReads || peak < 2 {
		t.Errorf("%d diffs at once, want at most %d (and more than one)", peak, parallelReads)
	}
}
