package scheduler

import (
	"context"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
)

// Finding 4: a worker whose reported concurrency changes in the middle of a task (update_task
// carries worker_info every time) cannot move the run's count of cores: the task keeps the
// concurrency it was created with, and its end takes back exactly that. A task's size is
// capped however large the worker says it is. A count that went wrong anyway is recounted from
// the active tasks, and never goes below zero.
func TestSecurityConcurrencyCannotSkewTheRunsCores(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 400_000, approved: true})
	wi := worker(1)
	reply := request(t, s, wi)
	if reply.Waiting || reply.TaskID != 0 {
		t.Fatalf("request_task: %+v", reply)
	}
	if r := snapshot(t, s, id); r.Cores != 8 {
		t.Fatalf("cores after the task = %d, want 8", r.Cores)
	}
	bigger := wi
	bigger.Concurrency = 1024
	if _, err := s.UpdateTask(ctx, bigger, id, 0, pairs(1, 1), nil); err != nil {
		t.Fatal(err)
	}
	r := snapshot(t, s, id)
	if r.Cores != 8 || r.Tasks[0].WorkerInfo.Concurrency != 8 {
		t.Errorf("after an update reporting 1024 cores: run cores %d, task concurrency %d; want 8 and 8",
			r.Cores, r.Tasks[0].WorkerInfo.Concurrency)
	}
	if _, err := s.FailedTask(ctx, id, 0, "gone"); err != nil {
		t.Fatal(err)
	}
	if r := snapshot(t, s, id); r.Cores != 0 || r.Workers != 0 {
		t.Errorf("after the task ended: cores %d, workers %d; want 0, 0", r.Cores, r.Workers)
	}

	// The largest worker gets a bounded task, not the run.
	huge := worker(2)
	huge.Concurrency, huge.MaxMemory = 1024, 1<<20
	if reply := request(t, s, huge); reply.Waiting || reply.Task.NumGames > maxTaskGames {
		t.Errorf("a 1024-core worker's task: %+v, want at most %d games", reply.Task, maxTaskGames)
	}

	// A count gone wrong (here, written so) heals at the next recount.
	if err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		r.Cores, r.Workers = -1_099_511_627_772, 7
		return runcache.PrioNormal, nil
	}); err != nil {
		t.Fatal(err)
	}
	s.RecountCores(ctx)
	if r := snapshot(t, s, id); r.Cores != 1024 || r.Workers != 1 {
		t.Errorf("after the recount: cores %d, workers %d; want 1024, 1", r.Cores, r.Workers)
	}
}
