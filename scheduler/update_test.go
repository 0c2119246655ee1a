package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
)

func update(t testing.TB, s *Scheduler, wi rundb.WorkerInfo, id rundb.ObjectID, task int, st rundb.Results) Reply {
	t.Helper()
	reply, err := s.UpdateTask(context.Background(), wi, id, task, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func TestUpdateTaskCountsResultsExactlyOnce(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})
	w := worker(1)
	task := request(t, s, w)

	st := pairs(16, 3) // one SPRT batch
	if got := update(t, s, w, id, task.TaskID, st); got.TaskAlive == nil || !*got.TaskAlive {
		t.Fatalf("first update: %+v", got)
	}
	before := snapshot(t, s, id)
	if got := update(t, s, w, id, task.TaskID, st); !*got.TaskAlive { // the same report again
		t.Fatalf("replayed update: %+v", got)
	}
	after := snapshot(t, s, id)
	if !sameResults(before.Results, after.Results) || after.Results.Wins != 6 {
		t.Errorf("a replayed report changed the totals: %+v -> %+v", before.Results, after.Results)
	}
	if after.Args.SPRT.LLR == 0 || after.Args.SPRT.Overshoot.LastUpdate != 16 {
		t.Errorf("the SPRT was not updated: %+v", after.Args.SPRT)
	}
	checkInvariants(t, after)
}

func TestUpdateTaskRefusesBadReports(t *testing.T) {
	for _, c := range []struct {
		name  string
		first rundb.Results
		next  rundb.Results
		want  string
	}{
		{"fewer games than before", pairs(32, 0), pairs(16, 0), "has incompatible stats. Before 64. Now 32."},
		{"an odd number of new games", pairs(16, 0), rundb.Results{Wins: 1, Draws: 32, Pentanomial: []int{0, 0, 16, 0, 0}}, "odd number of games"},
		{"not a whole SPRT batch", pairs(16, 0), pairs(20, 0), "incompatible with the SPRT batch size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newTestScheduler(t)
			id := addRun(t, s, runSpec{sprt: true, approved: true})
			w := worker(1)
			task := request(t, s, w)
			update(t, s, w, id, task.TaskID, c.first)
			before := snapshot(t, s, id).Results
			got := update(t, s, w, id, task.TaskID, c.next)
			if got.TaskAlive == nil || *got.TaskAlive || !strings.Contains(got.Error, c.want) {
				t.Errorf("reply %+v, want task_alive false and an error with %q", got, c.want)
			}
			r := snapshot(t, s, id)
			if r.Tasks[task.TaskID].Active {
				t.Error("the task is still active after a bad report")
			}
			if !sameResults(before, r.Results) {
				t.Errorf("a refused report changed the totals: %+v -> %+v", before, r.Results)
			}
			checkInvariants(t, r)
		})
	}
}

func TestFixedGamesRunFinishes(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 1000, approved: true})
	var tasks []TaskReply
	for i := range 3 {
		tasks = append(tasks, request(t, s, worker(i)))
	}
	// An 8-core worker's task at 10+0.1 is 466 games; the last one gets what is left.
	if got := []int{tasks[0].Task.NumGames, tasks[1].Task.NumGames, tasks[2].Task.NumGames}; got[0] != 466 || got[1] != 466 || got[2] != 68 {
		t.Errorf("task sizes %v, want [466 466 68]", got)
	}
	for i, tk := range tasks {
		n := tk.Task.NumGames / 2 // n pairs, each a win and a draw
		got := update(t, s, worker(i), id, tk.TaskID, rundb.Results{Wins: n, Draws: n, Pentanomial: []int{0, 0, 0, n, 0}})
		if *got.TaskAlive {
			t.Errorf("task %d still alive after all its games", i)
		}
	}
	r := snapshot(t, s, id)
	if !r.Finished || r.Workers != 0 {
		t.Fatalf("run finished=%v workers=%d after all games", r.Finished, r.Workers)
	}
	if !r.IsGreen {
		t.Error("a run that won every decisive game is not green")
	}
	checkInvariants(t, r)
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "finished_run"}, 10)
	if len(acts) != 1 || !strings.HasPrefix(acts[0].Message, "Result:accepted Elo:") || !strings.Contains(acts[0].Message, "Games:1000 Ptnml:[") {
		t.Errorf("finished_run actions %+v", acts)
	}
	if got := request(t, s, worker(9)); !got.Waiting {
		t.Errorf("a finished run handed out a task: %+v", got)
	}
}

func TestSPRTRunStopsWhenDecided(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})
	// Workers far stronger than 2 Elo play whole tasks until the test decides.
	var last TaskReply
	var w rundb.WorkerInfo
	for i := 0; i < 20 && !snapshot(t, s, id).Finished; i++ {
		w = worker(i)
		last = request(t, s, w)
		if last.Waiting {
			t.Fatalf("no task for worker %d: %+v", i, last)
		}
		for n := 16; n <= last.Task.NumGames/2; n += 16 {
			if got := update(t, s, w, id, last.TaskID, pairs(n, n/2)); !*got.TaskAlive {
				break
			}
		}
	}
	r := snapshot(t, s, id)
	if !r.Finished || r.Args.SPRT.State != "accepted" || !r.IsGreen {
		t.Fatalf("run finished=%v state=%q green=%v llr=%g", r.Finished, r.Args.SPRT.State, r.IsGreen, r.Args.SPRT.LLR)
	}
	checkInvariants(t, r)
	// A late report for the finished run changes nothing.
	late := update(t, s, w, id, last.TaskID, pairs(last.Task.NumGames/2, 0))
	if *late.TaskAlive || !strings.Contains(late.Info, "is not active") {
		t.Errorf("late report: %+v", late)
	}
	if !sameResults(r.Results, snapshot(t, s, id).Results) {
		t.Error("a late report changed a finished run")
	}
}

// A task's silence counts only while the scheduler serves: after a start (Load) that came
// longer than the dead-task timeout after its last report, as a restart that slow would, the task
// lives on, and is dead once it has been silent for the timeout after the start.
func TestDeadTaskTimeoutCountsFromTheStart(t *testing.T) {
	s, clk := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})
	task := request(t, s, worker(1))
	update(t, s, worker(1), id, task.TaskID, pairs(16, 1))
	if _, _, err := s.runs.FlushOne(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.advance(400 * time.Second) // the server was down, and the worker could not report
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.advance(300 * time.Second)
	if n := s.Scavenge(context.Background()); n != 0 || !snapshot(t, s, id).Tasks[task.TaskID].Active {
		t.Fatalf("300 s after the start, 700 s after its last report: %d tasks scavenged, want the task alive", n)
	}
	clk.advance(61 * time.Second)
	if n := s.Scavenge(context.Background()); n != 1 || snapshot(t, s, id).Tasks[task.TaskID].Active {
		t.Fatalf("361 s after the start: %d tasks scavenged, want the silent task dead", n)
	}
}

func TestDeadTaskIsReclaimed(t *testing.T) {
	s, clk := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})
	silent, beating := worker(1), worker(2)
	t1 := request(t, s, silent)
	t2 := request(t, s, beating)
	update(t, s, silent, id, t1.TaskID, pairs(16, 1))
	for range 4 {
		clk.advance(100 * time.Second)
		if got, err := s.Beat(context.Background(), id, t2.TaskID); err != nil || !*got.TaskAlive {
			t.Fatalf("beat: %+v %v", got, err)
		}
		s.Scavenge(context.Background())
	}
	r := snapshot(t, s, id)
	if r.Tasks[t1.TaskID].Active || !r.Tasks[t2.TaskID].Active {
		t.Fatalf("after 400 s: silent task active=%v, beating task active=%v", r.Tasks[t1.TaskID].Active, r.Tasks[t2.TaskID].Active)
	}
	if r.CommittedGames != 32+t2.Task.NumGames {
		t.Errorf("committed_games %d: the silent task's played games (32) plus the live task's %d", r.CommittedGames, t2.Task.NumGames)
	}
	checkInvariants(t, r)
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "dead_task"}, 10)
	if len(acts) != 1 || acts[0].TaskID == nil || *acts[0].TaskID != t1.TaskID {
		t.Errorf("dead_task actions %+v", acts)
	}
	// The silent worker comes back: its report is refused and changes nothing.
	before := r.Results
	late := update(t, s, silent, id, t1.TaskID, pairs(32, 2))
	if *late.TaskAlive || !strings.Contains(late.Info, "is not active") {
		t.Errorf("late report from a reclaimed task: %+v", late)
	}
	if got, _ := s.Beat(context.Background(), id, t1.TaskID); *got.TaskAlive {
		t.Error("a beat revived a reclaimed task")
	}
	if !sameResults(before, snapshot(t, s, id).Results) {
		t.Error("a late report changed the totals")
	}
}

func TestFailedTask(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 10000, approved: true})
	task := request(t, s, worker(1))
	got, err := s.FailedTask(context.Background(), id, task.TaskID, "engine crashed")
	if err != nil || got.TaskAlive != nil || got.Info != "" {
		t.Fatalf("failed_task: %+v %v, want {}", got, err)
	}
	again, _ := s.FailedTask(context.Background(), id, task.TaskID, "again")
	if again.TaskAlive == nil || *again.TaskAlive || !strings.Contains(again.Info, "Failed_task: task") {
		t.Errorf("second failed_task: %+v", again)
	}
	checkInvariants(t, snapshot(t, s, id))
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "failed_task"}, 10)
	if len(acts) != 1 || acts[0].Message != "engine crashed" {
		t.Errorf("failed_task actions %+v", acts)
	}
}

func TestStopRunByWorker(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 10000, approved: true})
	w := worker(1)
	task := request(t, s, w)
	err := s.StopRunByWorker(context.Background(), w, id, task.TaskID, "bench mismatch", 10)
	if !errors.Is(err, ErrTooFewCPUHours) || !strings.Contains(err.Error(), "User worker has too few games to stop a run") {
		t.Fatalf("stop by a new user: %v", err)
	}
	r := snapshot(t, s, id)
	if r.Finished || r.Tasks[task.TaskID].Active {
		t.Errorf("unauthorized stop: finished=%v task active=%v, want only the task ended", r.Finished, r.Tasks[task.TaskID].Active)
	}
	task2 := request(t, s, worker(2))
	if err := s.StopRunByWorker(context.Background(), worker(2), id, task2.TaskID, "bench mismatch", 1500); err != nil {
		t.Fatal(err)
	}
	r = snapshot(t, s, id)
	if !r.Finished || !r.Failed || r.Failures != 1 {
		t.Errorf("authorized stop: finished=%v failed=%v failures=%d", r.Finished, r.Failed, r.Failures)
	}
	checkInvariants(t, r)
	if err := s.StopRunByWorker(context.Background(), worker(2), id, task2.TaskID, "x", 1500); !errors.Is(err, ErrRunFinished) {
		t.Errorf("stopping a finished run: %v", err)
	}
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "stop_run"}, 10)
	if len(acts) != 2 || !strings.HasSuffix(acts[1].Message, "(not authorized)") {
		t.Errorf("stop_run actions %+v", acts)
	}
}

func TestSPSABatches(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 10000, approved: true, spsaParams: 3})
	w := worker(1)
	task := request(t, s, w)
	got, err := s.RequestSPSA(context.Background(), id, task.TaskID)
	if err != nil || got.SPSA == nil || len(got.SPSA.WParams) != 3 || !*got.TaskAlive {
		t.Fatalf("request_spsa: %+v %v", got, err)
	}
	res := rundb.Results{Wins: 10, Losses: 2, Draws: 4, Pentanomial: []int{0, 1, 2, 1, 4}}
	_, err = s.UpdateTask(context.Background(), w, id, task.TaskID, res, &SPSAUpdate{Wins: 10, Losses: 2, Draws: 4, NumGames: 16, Sig: got.SPSA.Sig})
	if err != nil {
		t.Fatal(err)
	}
	r := snapshot(t, s, id)
	if r.Args.SPSA.Iter != 8 || r.Tasks[task.TaskID].SPSAParams != nil {
		t.Errorf("after one batch: iter %d, stored flips %v", r.Args.SPSA.Iter, r.Tasks[task.TaskID].SPSAParams)
	}
	moved := false
	for _, p := range r.Args.SPSA.Params {
		moved = moved || p.Theta != 100
	}
	if !moved {
		t.Error("no parameter moved after a won batch")
	}
	if _, err := s.RequestSPSA(context.Background(), id, 99); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("request_spsa for a task that does not exist: %v", err)
	}
	plain := addRun(t, s, runSpec{numGames: 1000, approved: true, priority: 1}) // chosen first
	task2 := request(t, s, worker(2))
	if task2.RunID != plain {
		t.Fatalf("the second worker went to %s, want the priority run", task2.RunID)
	}
	if _, err := s.RequestSPSA(context.Background(), plain, task2.TaskID); !errors.Is(err, ErrNotSPSA) {
		t.Errorf("request_spsa on a run that is not SPSA: %v", err)
	}
}

func TestUpdateTaskRefusesAbsurdCounts(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 10000, approved: true})
	w := worker(1)
	task := request(t, s, w)
	huge := 1<<62 - 1
	// Passes valid_results, but sums to more than the task's games (and overflows int64).
	got := update(t, s, w, id, task.TaskID, rundb.Results{Wins: huge, Losses: huge, Draws: 2, Pentanomial: []int{huge / 2, 1, 0, 1, huge / 2}})
	if *got.TaskAlive || !strings.Contains(got.Error, "incompatible stats") {
		t.Errorf("absurd counts: %+v", got)
	}
	r := snapshot(t, s, id)
	if played(r.Results) != 0 {
		t.Errorf("absurd counts reached the totals: %+v", r.Results)
	}
	checkInvariants(t, r)
}

func TestPurgeRemovesABadWorkerAndRevivesTheRun(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 9 * 466, approved: true, autoPurge: true})
	normal := rundb.Results{Wins: 133, Losses: 133, Draws: 200, Pentanomial: []int{10, 50, 113, 50, 10}}
	outlier := rundb.Results{Wins: 333, Losses: 33, Draws: 100, Pentanomial: []int{0, 0, 33, 100, 100}}
	for i := range 9 {
		w := worker(i)
		task := request(t, s, w)
		if task.Waiting || task.Task.NumGames != 466 {
			t.Fatalf("task %d: %+v", i, task)
		}
		st := normal
		if i == 4 {
			st = outlier
		}
		update(t, s, w, id, task.TaskID, st)
	}
	r := snapshot(t, s, id)
	if r.Finished {
		t.Fatal("the run finished although the purge removed 466 games")
	}
	if len(r.BadTasks) != 1 || *r.BadTasks[0].TaskID != 4 || r.BadTasks[0].ResidualColor != "red" || !r.Tasks[4].Bad {
		t.Fatalf("bad tasks %+v", r.BadTasks)
	}
	if played(r.Tasks[4].Stats) != 0 || played(r.Results) != 8*466 {
		t.Errorf("after the purge: bad task has %d games, run %d", played(r.Tasks[4].Stats), played(r.Results))
	}
	checkInvariants(t, r)
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "purge_run"}, 5)
	if len(acts) != 1 || acts[0].Message != "Auto purge" {
		t.Errorf("purge_run actions %+v", acts)
	}
	// The revived run hands out the missing games, and finishes when they are played.
	w := worker(20)
	task := request(t, s, w)
	if task.Waiting || task.RunID != id {
		t.Fatalf("the revived run gave no task: %+v", task)
	}
	if got := update(t, s, w, id, task.TaskID, normal); *got.TaskAlive {
		t.Errorf("the last task is still alive: %+v", got)
	}
	if r := snapshot(t, s, id); !r.Finished {
		t.Error("the revived run did not finish")
	}
}

func TestLoadRebuildsAggregates(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})
	w := worker(1)
	task := request(t, s, w)
	update(t, s, w, id, task.TaskID, pairs(16, 2))
	if err := s.runs.FlushAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Corrupt the stored aggregates, as a crash between a change and its write could.
	r, _ := dbOf(s).Runs.Get(context.Background(), id)
	r.Cores, r.Workers, r.CommittedGames, r.Results.Wins = 0, 0, 0, 999
	if err := dbOf(s).Runs.Replace(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	fresh := New(testConfig(), dbOf(s), runcache.New(dbOf(s).Runs, runcache.Options{Now: s.now}), s.logger)
	fresh.now = s.now
	if err := fresh.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, fresh, id)
	checkInvariants(t, got)
	if got.Results.Wins != 4 || got.Cores != 8 {
		t.Errorf("rebuilt wins %d cores %d, want 4 and 8", got.Results.Wins, got.Cores)
	}
	if fresh.connections[w.RemoteAddr] != 1 || fresh.wtt[w.ShortName()].task != task.TaskID {
		t.Errorf("rebuilt connections %v, worker map %v", fresh.connections, fresh.wtt)
	}
}
