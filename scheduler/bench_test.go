package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
)

// benchRuns adds n approved SPRT runs of 2,000 finished tasks (of 32 games) each. The tasks are appended in
// memory (the database holds the runs without them), as on a primary whose run cache holds the
// active runs.
func benchRuns(b *testing.B, s *Scheduler, n int) []rundb.ObjectID {
	b.Helper()
	ids := make([]rundb.ObjectID, n)
	for i := range n {
		ids[i] = addRun(b, s, runSpec{sprt: true, approved: true, username: fmt.Sprintf("user%d", i%7)})
		err := s.runs.Change(context.Background(), ids[i], func(r *rundb.Run) (runcache.Prio, error) {
			// Runs that never fill up or decide, however long the benchmark loops.
			r.Args.NumGames = 1 << 40
			r.Args.SPRT.LowerBound, r.Args.SPRT.UpperBound = -1e9, 1e9
			for k := range 2000 {
				w := worker(100000 + k)
				st := rundb.Results{Wins: 4, Losses: 4, Draws: 24, Pentanomial: []int{0, 4, 8, 4, 0}}
				r.Tasks = append(r.Tasks, rundb.Task{NumGames: 32, Start: 32 * k, Stats: st, WorkerInfo: w})
				addResults(&r.Results, st, rundb.Results{})
				r.CommittedGames += 32
				r.TotalGames += 32
			}
			return runcache.PrioNormal, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// BenchmarkRequestTaskCriticalSection is the scheduling section of request_task, what runs
// under the lock: choosing among the active runs and creating the task.
func BenchmarkRequestTaskCriticalSection(b *testing.B) {
	for _, n := range []int{10, 100, 500} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			s, _ := newTestScheduler(b)
			benchRuns(b, s, n)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				wi := worker(i)
				i++
				s.requestMu.Lock()
				reply, _, _, ok := s.choose(ctx, wi, wi.ShortName(), 16, s.now(), &events{})
				s.requestMu.Unlock()
				if !ok {
					b.Fatalf("no task: %+v", reply)
				}
			}
		})
	}
}

// BenchmarkRequestTask is a whole request_task: the semaphore, the blocked-worker lookup in the
// database, the critical section and the bookkeeping after it.
func BenchmarkRequestTask(b *testing.B) {
	s, _ := newTestScheduler(b)
	benchRuns(b, s, 100)
	i := 0
	for b.Loop() {
		if reply := request(b, s, worker(i)); reply.Waiting {
			b.Fatalf("no task: %+v", reply)
		}
		i++
	}
}

// BenchmarkUpdateTask is one update_task of an SPRT batch on a run of 2,000 tasks: the checks,
// the result deltas, the SPRT update and the write-behind mark.
func BenchmarkUpdateTask(b *testing.B) {
	s, _ := newTestScheduler(b)
	ids := benchRuns(b, s, 1)
	ctx := context.Background()
	wi := worker(1)
	task := request(b, s, wi)
	n := 0
	for b.Loop() {
		n += 16
		if n > task.Task.NumGames/2 { // the task is full: take another
			task = request(b, s, wi)
			n = 16
		}
		reply, err := s.UpdateTask(ctx, wi, ids[0], task.TaskID, pairs(n, n/4), nil)
		if err != nil || reply.Error != "" {
			b.Fatalf("%+v %v", reply, err)
		}
	}
}
