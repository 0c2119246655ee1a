package scheduler

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// addRunWith adds a test run after edit has changed its document.
func addRunWith(t testing.TB, s *Scheduler, sp runSpec, edit func(*rundb.Run)) rundb.ObjectID {
	t.Helper()
	r := sp.build(s.now())
	edit(r)
	if err := s.AddRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// runLog is the event log of one run, oldest first, one "action username: message" a line.
func runLog(t testing.TB, s *Scheduler, id rundb.ObjectID) []string {
	t.Helper()
	acts, err := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{RunID: id.Hex()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range slices.Backward(acts) {
		if a.Run != RunLabel(&rundb.Run{ID: id, Args: rundb.RunArgs{NewTag: "patch"}}) {
			t.Errorf("%s action names run %q", a.Action, a.Run)
		}
		out = append(out, a.Action+" "+a.Username+": "+a.Message)
	}
	return out
}

// stored is the run as the database has it, to check that a user action was written through.
func stored(t testing.TB, s *Scheduler, id rundb.ObjectID) *rundb.Run {
	t.Helper()
	r, err := dbOf(s).Runs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// unchangedMod is the modification that keeps a test run's arguments as runSpec builds them.
func unchangedMod(r *rundb.Run) RunModification {
	return RunModification{NumGames: r.Args.NumGames, Priority: int(r.Args.Priority),
		Throughput: int(r.Args.Throughput), AutoPurge: r.Args.AutoPurge}
}

func TestUserActionsOnAMissingRun(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	missing := rundb.NewObjectID()
	_, purgeErr := s.PurgeRunByUser(ctx, missing, "bob")
	_, modifyErr := s.ModifyRun(ctx, missing, "bob", true, RunModification{NumGames: 1000, Throughput: 100})
	for name, err := range map[string]error{
		"stop":   s.StopRunByUser(ctx, missing, "bob"),
		"purge":  purgeErr,
		"delete": s.DeleteRun(ctx, missing, "bob"),
		"modify": modifyErr,
	} {
		if !errors.Is(err, ErrRunNotFound) || !errors.Is(err, rundb.ErrNotFound) {
			t.Errorf("%s of a missing run = %v, want ErrRunNotFound", name, err)
		}
	}
	if acts, _ := dbOf(s).Actions.Find(ctx, rundb.ActionFilter{}, 10); len(acts) != 0 {
		t.Errorf("actions on a missing run were logged: %+v", acts)
	}
}

func TestStopRunByUser(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 10000, approved: true})
	w := worker(1)
	task := request(t, s, w)
	update(t, s, w, id, task.TaskID, pairs(50, 10))

	if err := s.StopRunByUser(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	r := stored(t, s, id) // written through, not left to the flusher
	if !r.Finished || r.Tasks[task.TaskID].Active || r.Workers != 0 || played(r.Results) != 100 || r.Failed || r.Deleted {
		t.Errorf("after a user stop: finished %v task active %v workers %d games %d failed %v deleted %v",
			r.Finished, r.Tasks[task.TaskID].Active, r.Workers, played(r.Results), r.Failed, r.Deleted)
	}
	checkInvariants(t, snapshot(t, s, id))
	if got := update(t, s, w, id, task.TaskID, pairs(100, 10)); *got.TaskAlive {
		t.Error("the worker of a stopped run was told to go on")
	}
	if got := request(t, s, worker(2)); !got.Waiting {
		t.Errorf("a stopped run handed out a task: %+v", got)
	}

	// As in fishtest, stopping a finished run is accepted and logged again.
	if err := s.StopRunByUser(ctx, id, "alice"); err != nil {
		t.Errorf("stopping a finished run: %v", err)
	}
	want := []string{"stop_run bob: User stop", "stop_run alice: User stop"}
	if got := runLog(t, s, id); !slices.Equal(got, want) {
		t.Errorf("event log %q, want %q", got, want)
	}
}

func TestStopRunByUserAutoPurges(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 10000, approved: true, autoPurge: true})
	if err := s.StopRunByUser(context.Background(), id, "bob"); err != nil {
		t.Fatal(err)
	}
	if r := snapshot(t, s, id); !r.Finished {
		t.Error("the run is not finished")
	}
	// The auto-purge is the run owner's, logged before the user's stop, as in fishtest.
	want := []string{"purge_run alice: Auto purge (not performed): No bad workers", "stop_run bob: User stop"}
	if got := runLog(t, s, id); !slices.Equal(got, want) {
		t.Errorf("event log %q, want %q", got, want)
	}
}

// Results of a 466-game task: a normal worker's, a clear outlier's, and a mild outlier's that
// the manual purge removes but the stricter auto-purge keeps.
var (
	normalTask      = rundb.Results{Wins: 133, Losses: 133, Draws: 200, Pentanomial: []int{10, 50, 113, 50, 10}}
	outlierTask     = rundb.Results{Wins: 333, Losses: 33, Draws: 100, Pentanomial: []int{0, 0, 33, 100, 100}}
	mildOutlierTask = rundb.Results{Wins: 120, Losses: 50, Draws: 296, Pentanomial: []int{5, 40, 88, 80, 20}}
)

// finishWithOutlier plays a 9-task fixed-games run to its end; the worker of task 4 has the
// outlier's results, the others normal ones.
func finishWithOutlier(t *testing.T, s *Scheduler, id rundb.ObjectID, outlier rundb.Results) {
	t.Helper()
	for i := range 9 {
		w := worker(i)
		task := request(t, s, w)
		if task.Waiting || task.Task.NumGames != 466 {
			t.Fatalf("task %d: %+v", i, task)
		}
		st := normalTask
		if i == 4 {
			st = outlier
		}
		update(t, s, w, id, task.TaskID, st)
	}
	if r := snapshot(t, s, id); !r.Finished || len(r.BadTasks) != 0 {
		t.Fatalf("after all games: finished %v, %d bad tasks", r.Finished, len(r.BadTasks))
	}
}

func TestPurgeRunByUserRemovesTheOutlierAndRevivesTheRun(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 9 * 466, approved: true, autoPurge: true})
	finishWithOutlier(t, s, id, mildOutlierTask) // too mild for the auto-purge

	msg, err := s.PurgeRunByUser(ctx, id, "bob")
	if err != nil || msg != "" {
		t.Fatalf("purge = %q, %v; want it performed", msg, err)
	}
	r := stored(t, s, id)
	if r.Finished {
		t.Error("the purged run is still finished, although it lost 466 of its games")
	}
	if len(r.BadTasks) != 1 || *r.BadTasks[0].TaskID != 4 || !r.Tasks[4].Bad {
		t.Fatalf("bad tasks %+v", r.BadTasks)
	}
	if played(r.Results) != 8*466 || r.Results.Wins != 8*133 || played(r.Tasks[4].Stats) != 0 || r.BadTasks[0].Stats.Wins != 120 {
		t.Errorf("after the purge: results %+v, task 4 %+v", r.Results, r.Tasks[4].Stats)
	}
	checkInvariants(t, snapshot(t, s, id))
	if got := request(t, s, worker(20)); got.Waiting || got.RunID != id || got.Task.NumGames != 466 {
		t.Errorf("the revived run does not hand out the purged games: %+v", got)
	}
	log := runLog(t, s, id)
	if len(log) != 3 || log[0] != "purge_run alice: Auto purge (not performed): No bad workers" ||
		!strings.HasPrefix(log[1], "finished_run alice: ") || log[2] != "purge_run bob: Manual purge" {
		t.Errorf("event log %q, want the failed auto-purge, finished_run, then the manual purge", log)
	}
}

func TestPurgeRunByUserRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, s *Scheduler, clk *clock) rundb.ObjectID
		want  string
	}{
		{"an unfinished run", func(t *testing.T, s *Scheduler, _ *clock) rundb.ObjectID {
			id := addRun(t, s, runSpec{numGames: 10000, approved: true})
			request(t, s, worker(1))
			return id
		}, "Can only purge completed run"},
		{"a run without bad workers", func(t *testing.T, s *Scheduler, _ *clock) rundb.ObjectID {
			id := addRun(t, s, runSpec{numGames: 10000, approved: true})
			if err := s.StopRunByUser(context.Background(), id, "alice"); err != nil {
				t.Fatal(err)
			}
			return id
		}, "No bad workers"},
		{"a run started 31 days ago", func(t *testing.T, s *Scheduler, clk *clock) rundb.ObjectID {
			id := addRun(t, s, runSpec{numGames: 9 * 466, approved: true})
			finishWithOutlier(t, s, id, outlierTask)
			clk.advance(31 * 24 * time.Hour)
			return id
		}, "Run too old to be purged"},
		{"a failed run", func(t *testing.T, s *Scheduler, _ *clock) rundb.ObjectID {
			id := addRun(t, s, runSpec{numGames: 10000, approved: true})
			w := worker(1)
			task := request(t, s, w)
			if err := s.StopRunByWorker(context.Background(), w, id, task.TaskID, "crash", 1500); err != nil {
				t.Fatal(err)
			}
			return id
		}, "You cannot purge a failed run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newTestScheduler(t)
			id := c.setup(t, s, clk)
			logBefore := runLog(t, s, id)
			before := snapshot(t, s, id)
			msg, err := s.PurgeRunByUser(context.Background(), id, "bob")
			if err != nil || msg != c.want {
				t.Fatalf("purge = %q, %v; want %q", msg, err, c.want)
			}
			if after := snapshot(t, s, id); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused purge changed the run:\nbefore %+v\nafter  %+v", before, after)
			}
			want := append(logBefore, "purge_run bob: Manual purge (not performed): "+c.want)
			if got := runLog(t, s, id); !slices.Equal(got, want) {
				t.Errorf("event log %q, want %q", got, want)
			}
		})
	}
}

func TestDeleteRun(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{sprt: true, approved: true, autoPurge: true})
	w := worker(1)
	task := request(t, s, w)
	update(t, s, w, id, task.TaskID, pairs(16, 4))

	if err := s.DeleteRun(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	r := stored(t, s, id)
	if !r.Deleted || !r.Finished || r.Tasks[task.TaskID].Active || r.Workers != 0 || played(r.Results) != 32 {
		t.Errorf("after delete: deleted %v finished %v task active %v workers %d games %d",
			r.Deleted, r.Finished, r.Tasks[task.TaskID].Active, r.Workers, played(r.Results))
	}
	checkInvariants(t, snapshot(t, s, id))
	if got := request(t, s, worker(2)); !got.Waiting {
		t.Errorf("a deleted run handed out a task: %+v", got)
	}
	// No auto-purge and no finished_run: a deletion is not an outcome.
	want := []string{"delete_run alice: "}
	if got := runLog(t, s, id); !slices.Equal(got, want) {
		t.Errorf("event log %q, want %q", got, want)
	}

	// As in fishtest, a modification that leaves the run undecided revives and undeletes it.
	res, err := s.ModifyRun(ctx, id, "alice", false, unchangedMod(r))
	if err != nil || !res.Revived || !res.Approved {
		t.Fatalf("modify of the deleted run = %+v, %v", res, err)
	}
	if r := stored(t, s, id); r.Deleted || r.Finished {
		t.Errorf("after the modification: deleted %v finished %v", r.Deleted, r.Finished)
	}
}

func TestModifyRunRefusesBadInput(t *testing.T) {
	cases := []struct {
		name  string
		spec  runSpec
		edit  func(m *RunModification)
		field string
		want  string // part of the message
	}{
		{"a fixed-games run grows", runSpec{numGames: 20000}, func(m *RunModification) { m.NumGames = 21000 }, "num_games", "cannot grow"},
		{"an SPSA run shrinks", runSpec{numGames: 10000, spsaParams: 2}, func(m *RunModification) { m.NumGames = 8000 }, "num_games", "SPSA"},
		{"an SPSA run grows", runSpec{numGames: 10000, spsaParams: 2}, func(m *RunModification) { m.NumGames = 12000 }, "num_games", "SPSA"},
		{"negative games", runSpec{sprt: true}, func(m *RunModification) { m.NumGames = -1000 }, "num_games", ">= 0"},
		{"games not a multiple of 1000", runSpec{sprt: true}, func(m *RunModification) { m.NumGames = 801500 }, "num_games", "multiple of 1000"},
		{"more than 3.2M games", runSpec{sprt: true}, func(m *RunModification) { m.NumGames = 3201000 }, "num_games", "<= 3200000"},
		{"negative throughput", runSpec{numGames: 20000}, func(m *RunModification) { m.Throughput = -1 }, "throughput", ">= 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newTestScheduler(t)
			c.spec.approved = true
			id := addRun(t, s, c.spec)
			before := snapshot(t, s, id)
			m := unchangedMod(before)
			m.Priority = 3 // changes that must not be applied either
			m.AutoPurge = true
			c.edit(&m)
			_, err := s.ModifyRun(context.Background(), id, "alice", false, m)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("ModifyRun = %v, want a %s error with %q", err, c.field, c.want)
			}
			if after := snapshot(t, s, id); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused modification changed the run:\nbefore %+v\nafter  %+v", before.Args, after.Args)
			}
			if got := runLog(t, s, id); len(got) != 0 {
				t.Errorf("a refused modification was logged: %q", got)
			}
		})
	}
}

func TestModifyRunRefusesAnOldRun(t *testing.T) {
	s, clk := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 20000, approved: true})
	clk.advance(30*24*time.Hour + 23*time.Hour) // 30 days: still allowed
	m := unchangedMod(snapshot(t, s, id))
	m.NumGames = 10000
	if _, err := s.ModifyRun(context.Background(), id, "alice", false, m); err != nil {
		t.Fatalf("a 30-day-old run: %v", err)
	}
	clk.advance(time.Hour)
	before := snapshot(t, s, id)
	m.NumGames = 5000
	if _, err := s.ModifyRun(context.Background(), id, "alice", false, m); !errors.Is(err, ErrRunTooOld) {
		t.Fatalf("a 31-day-old run: %v, want ErrRunTooOld", err)
	}
	if after := snapshot(t, s, id); !reflect.DeepEqual(before, after) || after.Args.NumGames != 10000 {
		t.Errorf("the refused modification changed the run: num_games %d", after.Args.NumGames)
	}
	if got := runLog(t, s, id); len(got) != 1 {
		t.Errorf("event log %q, want the first modification only", got)
	}
}

func TestModifyRunWritesTheChangeAndItsDiff(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 20000, approved: true})
	res, err := s.ModifyRun(ctx, id, "alice", false, RunModification{NumGames: 10000, Priority: -1, Throughput: 50, AutoPurge: true})
	if err != nil || !res.Approved || res.Unapproved || res.Revived {
		t.Fatalf("ModifyRun = %+v, %v", res, err)
	}
	a := stored(t, s, id).Args
	if a.NumGames != 10000 || a.Priority != -1 || a.Throughput != 50 || !a.AutoPurge {
		t.Errorf("stored args: num_games %d priority %v throughput %v auto_purge %v", a.NumGames, a.Priority, a.Throughput, a.AutoPurge)
	}
	// Unchanged values are left out; nothing changed leaves fishtest's bare prefix.
	if _, err := s.ModifyRun(ctx, id, "bob", true, RunModification{NumGames: 10000, Priority: -1, Throughput: 50, AutoPurge: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ModifyRun(ctx, id, "bob", true, RunModification{NumGames: 10000, Priority: 2, Throughput: 50}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"modify_run alice: modify: priority changed from 0 to -1, num-games changed from 20000 to 10000, throughput changed from 100 to 50, auto-purge changed from False to True",
		"modify_run bob: modify: ",
		"modify_run bob: modify: priority changed from -1 to 2, auto-purge changed from True to False",
	}
	if got := runLog(t, s, id); !slices.Equal(got, want) {
		t.Errorf("event log\n%q\nwant\n%q", got, want)
	}
}

func TestModifyRunWithdrawsApproval(t *testing.T) {
	cases := []struct {
		name         string
		throughput   float64 // the run's, before
		approver     bool
		edit         func(m *RunModification)
		wantApproved bool
	}{
		{"owner raises the priority", 100, false, func(m *RunModification) { m.Priority = 1 }, false},
		{"owner raises the throughput above 100", 100, false, func(m *RunModification) { m.Throughput = 101 }, false},
		{"owner raises the throughput back to 100", 50, false, func(m *RunModification) { m.Throughput = 100 }, true},
		{"owner raises a high throughput further", 200, false, func(m *RunModification) { m.Throughput = 250 }, false},
		{"owner lowers the priority and throughput", 100, false, func(m *RunModification) { m.Priority, m.Throughput = -1, 20 }, true},
		{"owner changes the games", 100, false, func(m *RunModification) { m.NumGames = 2000 }, true},
		{"approver raises the priority", 100, true, func(m *RunModification) { m.Priority, m.Throughput = 5, 500 }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newTestScheduler(t)
			id := addRunWith(t, s, runSpec{sprt: true, approved: true}, func(r *rundb.Run) { r.Args.Throughput = c.throughput })
			m := unchangedMod(snapshot(t, s, id))
			c.edit(&m)
			res, err := s.ModifyRun(context.Background(), id, "alice", c.approver, m)
			if err != nil {
				t.Fatal(err)
			}
			r := stored(t, s, id)
			if r.Approved != c.wantApproved || res.Approved != c.wantApproved || res.Unapproved == c.wantApproved {
				t.Errorf("approved %v (result %+v), want %v", r.Approved, res, c.wantApproved)
			}
			if !r.Approved && r.Approver != "" {
				t.Errorf("an unapproved run keeps approver %q", r.Approver)
			}
			log := runLog(t, s, id)
			withdrawn := len(log) == 2 && log[0] == "approve_run alice: unapproved" && strings.HasPrefix(log[1], "modify_run alice: modify: ")
			kept := len(log) == 1 && strings.HasPrefix(log[0], "modify_run alice: modify: ")
			if c.wantApproved && !kept || !c.wantApproved && !withdrawn {
				t.Errorf("event log %q", log)
			}
			if got := request(t, s, worker(1)); got.Waiting == c.wantApproved {
				t.Errorf("approved %v, but a worker's request got %+v", c.wantApproved, got)
			}
		})
	}
}

func TestModifyRunOfAFailedRun(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 10000, approved: true})
	w := worker(1)
	task := request(t, s, w)
	if err := s.StopRunByWorker(ctx, w, id, task.TaskID, "crash", 1500); err != nil {
		t.Fatal(err)
	}
	// Even an unchanged modification by the owner withdraws the approval of a failed run; the
	// run is undecided, so it becomes active again, no longer failed, waiting for approval.
	res, err := s.ModifyRun(ctx, id, "alice", false, unchangedMod(snapshot(t, s, id)))
	if err != nil || !res.Unapproved || res.Approved || !res.Revived {
		t.Fatalf("ModifyRun = %+v, %v", res, err)
	}
	r := stored(t, s, id)
	if r.Approved || r.Failed || r.Finished || r.Failures != 1 {
		t.Errorf("approved %v failed %v finished %v failures %d", r.Approved, r.Failed, r.Finished, r.Failures)
	}
	if got := request(t, s, worker(2)); !got.Waiting {
		t.Errorf("the unapproved run handed out a task: %+v", got)
	}
	if err := s.ApproveRun(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	if got := request(t, s, worker(2)); got.Waiting || got.RunID != id {
		t.Errorf("the approved run gave no task: %+v", got)
	}
}

func TestModifyRunRevivesAFinishedRunWhenGamesGrow(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRunWith(t, s, runSpec{sprt: true, approved: true}, func(r *rundb.Run) { r.Args.NumGames = 64 })
	w := worker(1)
	task := request(t, s, w)
	if task.Task.NumGames != 64 {
		t.Fatalf("task of %d games, want 64", task.Task.NumGames)
	}
	update(t, s, w, id, task.TaskID, pairs(32, 0)) // all draws: no SPRT decision
	if r := snapshot(t, s, id); !r.Finished || r.Args.SPRT.State != "" {
		t.Fatalf("after all games: finished %v state %q", r.Finished, r.Args.SPRT.State)
	}

	// A budget the played games already cover keeps it finished.
	res, err := s.ModifyRun(ctx, id, "alice", false, RunModification{NumGames: 0, Throughput: 100})
	if err != nil || res.Revived {
		t.Fatalf("ModifyRun to 0 games = %+v, %v", res, err)
	}
	if r := snapshot(t, s, id); !r.Finished {
		t.Error("the run was revived with no games to play")
	}

	res, err = s.ModifyRun(ctx, id, "alice", false, RunModification{NumGames: 2000, Throughput: 100})
	if err != nil || !res.Revived || !res.Approved {
		t.Fatalf("ModifyRun to 2000 games = %+v, %v", res, err)
	}
	r := stored(t, s, id)
	if r.Finished || r.IsGreen || r.IsYellow || r.Args.NumGames != 2000 {
		t.Errorf("after growing: finished %v green %v yellow %v num_games %d", r.Finished, r.IsGreen, r.IsYellow, r.Args.NumGames)
	}
	checkInvariants(t, snapshot(t, s, id))
	if got := request(t, s, worker(2)); got.Waiting || got.RunID != id || got.Task.Start != 64 {
		t.Errorf("the revived run gave no task: %+v", got)
	}
}

func TestModifyRunFinishesARunItsNewBudgetDecides(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 20000, approved: true})
	w := worker(1)
	task := request(t, s, w)
	update(t, s, w, id, task.TaskID, pairs(100, 20))
	if _, err := s.ModifyRun(ctx, id, "alice", false, RunModification{NumGames: 0, Throughput: 100}); err != nil {
		t.Fatal(err)
	}
	r := stored(t, s, id)
	if !r.Finished || r.Tasks[task.TaskID].Active || played(r.Results) != 200 {
		t.Errorf("finished %v task active %v games %d", r.Finished, r.Tasks[task.TaskID].Active, played(r.Results))
	}
	checkInvariants(t, snapshot(t, s, id))
	log := runLog(t, s, id)
	if len(log) != 2 || log[0] != "modify_run alice: modify: num-games changed from 20000 to 0" ||
		!strings.HasPrefix(log[1], "finished_run alice: Result:") || !strings.Contains(log[1], "Games:200 ") {
		t.Errorf("event log %q", log)
	}
}

func TestModifyRunInfoOnlyFromTheOwner(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	id := addRunWith(t, s, runSpec{numGames: 20000, approved: true}, func(r *rundb.Run) { r.Args.Info = "first" })
	for _, c := range []struct {
		user, info, want string
	}{
		{"alice", "  second try \n", "second try"},
		{"alice", "   ", "second try"},       // blank keeps it
		{"bob", "bob's words", "second try"}, // not the owner
	} {
		m := unchangedMod(snapshot(t, s, id))
		m.Info = &c.info
		if _, err := s.ModifyRun(ctx, id, c.user, true, m); err != nil {
			t.Fatal(err)
		}
		if got := stored(t, s, id).Args.Info; got != c.want {
			t.Errorf("%s sets info %q: info is %q, want %q", c.user, c.info, got, c.want)
		}
	}
}
