package scheduler

import (
	"context"
	"testing"
)

// BenchmarkRequestTaskCriticalSectionSizes is BenchmarkRequestTaskCriticalSection at issue 8's
// largest size, 500 active runs of 2,000 tasks (the smaller sizes are in bench_test.go).
func BenchmarkRequestTaskCriticalSectionSizes(b *testing.B) {
	b.Run("runs=500", func(b *testing.B) {
		s, _ := newTestScheduler(b)
		benchRuns(b, s, 500)
		ctx := context.Background()
		i := 0
		for b.Loop() {
			wi := worker(i)
			i++
			s.requestMu.Lock()
			reply, _, ok := s.choose(ctx, wi, wi.ShortName(), 16, s.now(), &events{})
			s.requestMu.Unlock()
			if !ok {
				b.Fatalf("no task: %+v", reply)
			}
		}
	})
}
