package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
)

// The worker map forgets a worker once its last task has ended and keeps the ones still working,
// whichever run they work on.
func TestCleanWttForgetsWorkersWhoseTaskEnded(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	a := addRun(t, s, runSpec{numGames: 100000, approved: true})
	var tasks []int
	for n := range 3 {
		got := request(t, s, worker(n))
		if got.Waiting {
			t.Fatalf("worker %d: %+v", n, got)
		}
		tasks = append(tasks, got.TaskID)
	}
	b := addRun(t, s, runSpec{numGames: 100000, approved: true, priority: 1})
	if got := request(t, s, worker(3)); got.Waiting || got.RunID != b {
		t.Fatalf("worker 3 got %+v, want a task of run %s", got, b.Hex())
	}
	if _, err := s.FailedTask(ctx, a, tasks[1], "gone"); err != nil {
		t.Fatal(err)
	}
	s.CleanWtt(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, want := range []bool{true, false, true, true} {
		if _, got := s.wtt[worker(n).ShortName()]; got != want {
			t.Errorf("after the clean, worker %d in the worker map: %v, want %v", n, got, want)
		}
	}
}

// The record of the runs each worker built, and of its last run, loses the finished runs and
// keeps the unfinished ones, for every worker when there are more than one chunk of them.
func TestCleanWorkerRunsDropsFinishedRuns(t *testing.T) {
	s, _ := newTestScheduler(t)
	live, done := rundb.NewObjectID(), rundb.NewObjectID()
	workers := 2*cleanChunk + 7
	s.mu.Lock()
	s.unfinished[live] = true
	for n := range workers {
		name := fmt.Sprintf("w%d", n)
		switch n % 3 {
		case 0: // built both runs, last worked on the finished one
			s.workerRuns[name] = map[string]bool{live.Hex(): true, done.Hex(): true}
			s.lastRun[name] = done.Hex()
		case 1: // built only the finished run
			s.workerRuns[name] = map[string]bool{done.Hex(): true}
			s.lastRun[name] = done.Hex()
		case 2: // a last run recorded, no build
			s.lastRun[name] = live.Hex()
		}
	}
	s.mu.Unlock()
	s.CleanWorkerRuns()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range workers {
		name := fmt.Sprintf("w%d", n)
		built, last := s.workerRuns[name], s.lastRun[name]
		var ok bool
		switch n % 3 {
		case 0:
			ok = len(built) == 1 && built[live.Hex()] && last == ""
		case 1:
			_, kept := s.workerRuns[name]
			ok = !kept && last == ""
		case 2:
			ok = built == nil && last == live.Hex()
		}
		if !ok {
			t.Fatalf("worker %s after the clean: built %v, last run %q", name, built, last)
		}
	}
}
