package scheduler

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// newTestPrimary returns a Primary over db that flushes only when it stops (the flush job's
// period is an hour), so that a test can tell Stop's writes from the flusher's. It is stopped
// when the test ends.
func newTestPrimary(t *testing.T, db *rundb.DB) *Primary {
	t.Helper()
	p := NewPrimary(PrimaryConfig{Config: testConfig(), FlushPeriod: time.Hour},
		db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

// insertRun stores a run straight in the database, as a previous primary left it.
func insertRun(t *testing.T, db *rundb.DB, sp runSpec) *rundb.Run {
	t.Helper()
	r := sp.build(time.Now().UTC().Truncate(time.Millisecond))
	if err := db.Runs.Insert(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// primaryGoroutines counts the goroutines a Primary starts (its periodic jobs, its start-up
// work and anything they start) from the stacks of all: those with a frame of this package, or
// created by one, that are not a test's. A goroutine that has not run yet shows only the
// "created by" line. runtime.NumGoroutine would not do: the embedded database serves each of
// the driver's connections on a goroutine of its own in this process, so the total moves with
// the connection pool.
func primaryGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("github.com/shoal-chess/shoal/scheduler.")) && !bytes.Contains(g, []byte("github.com/shoal-chess/shoal/scheduler.Test")) {
			count++
		}
	}
	return count
}

// waitNoPrimaryGoroutines fails the test unless the Primary's goroutines are gone within a
// second: Stop has waited for each, but one may still be returning from its last deferred call.
func waitNoPrimaryGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for primaryGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the Primary's goroutines still run after Stop", primaryGoroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Primary starts from what the database holds: the unfinished runs are cached and a worker
// gets a task from one at once; finished runs are left in the database.
func TestPrimaryStartLoadsUnfinishedRunsAndServes(t *testing.T) {
	db := rundbtest.Open(t)
	open := insertRun(t, db, runSpec{numGames: 1000, approved: true})
	done := runSpec{numGames: 1000, approved: true}.build(time.Now())
	done.Finished = true
	if err := db.Runs.Insert(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	p := newTestPrimary(t, db)
	if p.Scheduler() != nil || p.RunCache() != nil {
		t.Fatal("a Primary that has not started hands out a scheduler or a run cache")
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !p.RunCache().Cached(open.ID) || p.RunCache().Cached(done.ID) {
		t.Errorf("cached: unfinished run %v, finished run %v; want only the unfinished one",
			p.RunCache().Cached(open.ID), p.RunCache().Cached(done.ID))
	}
	reply := request(t, p.Scheduler(), worker(1))
	if reply.Waiting || reply.RunID != open.ID || reply.TaskID != 0 {
		t.Errorf("request_task after Start: %+v, want task 0 of the unfinished run", reply)
	}
	if err := p.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
}

// Stop ends every goroutine Start began, and writes what only the cache held: a fresh Primary
// on the same database finds the task Stop wrote, and knows from it which run the worker built.
func TestPrimaryStopEndsGoroutinesAndWritesDirtyRuns(t *testing.T) {
	db := rundbtest.Open(t)
	run := insertRun(t, db, runSpec{numGames: 1 << 20, approved: true})
	p := newTestPrimary(t, db)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, jobs := primaryGoroutines(), len(p.Scheduler().Jobs())+2; n < jobs {
		t.Fatalf("%d goroutines of the Primary while it runs, want at least its %d jobs", n, jobs)
	}
	w := worker(1)
	task := request(t, p.Scheduler(), w)
	if task.RunID != run.ID {
		t.Fatalf("request_task: %+v", task)
	}
	ctx := context.Background()
	if stored, err := db.Runs.Get(ctx, run.ID); err != nil || len(stored.Tasks) != 0 {
		t.Fatalf("the new task reached the database before Stop (%v); this test needs it held in the cache", err)
	}

	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPrimaryGoroutines(t)
	next := newTestPrimary(t, db)
	if err := next.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := snapshot(t, next.Scheduler(), run.ID)
	if len(r.Tasks) != 1 || !r.Tasks[0].Active || r.Workers != 1 || r.Tasks[0].WorkerInfo.UniqueKey != w.UniqueKey {
		t.Fatalf("the next primary sees %d tasks, %d workers; want the active task Stop wrote", len(r.Tasks), r.Workers)
	}
	// Near the GitHub API limit a worker only gets runs it has built: the one it had a task in
	// before the restart, and none for a worker that built nothing.
	limited := func(w rundb.WorkerInfo) rundb.WorkerInfo { w.NearGithubAPILimit = true; return w }
	if got := request(t, next.Scheduler(), limited(worker(2))); !got.Waiting {
		t.Errorf("a worker near the GitHub limit that built nothing got %+v, want a refusal", got)
	}
	if got := request(t, next.Scheduler(), limited(w)); got.Waiting || got.RunID != run.ID {
		t.Errorf("after a restart, a worker near the GitHub limit got %+v, want the run it built", got)
	}
	if err := next.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPrimaryGoroutines(t)
}

// Stop is harmless when repeated, on a Primary that never started, and during Start; a stopped
// Primary does not start again.
func TestPrimaryStopTwiceAndBeforeStart(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	insertRun(t, db, runSpec{numGames: 1000, approved: true})

	never := newTestPrimary(t, db)
	for i := range 2 {
		if err := never.Stop(ctx); err != nil {
			t.Errorf("Stop %d of a Primary that never started: %v", i+1, err)
		}
	}
	if err := never.Start(ctx); err == nil || never.Scheduler() != nil {
		t.Errorf("Start after Stop: %v, scheduler %v; want a refusal", err, never.Scheduler())
	}

	p := newTestPrimary(t, db)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop %d: %v", i+1, err)
		}
	}
	waitNoPrimaryGoroutines(t)

	// A Stop racing a Start: before it, Start is refused; during the loading, it cuts Start
	// short; after it, it stops what Start began. Whichever it is, nothing is left running.
	racing := newTestPrimary(t, db)
	started := make(chan error, 1)
	go func() { started <- racing.Start(ctx) }()
	if err := racing.Stop(ctx); err != nil {
		t.Errorf("Stop during Start: %v", err)
	}
	if err := <-started; err != nil {
		t.Logf("Start refused or cut short by Stop: %v", err)
	}
	if err := racing.Stop(ctx); err != nil {
		t.Errorf("Stop after a Stop during Start: %v", err)
	}
	waitNoPrimaryGoroutines(t)
}

// After Stop the instance is no longer the primary: every call that would change a run is
// refused with ErrStopped, and neither the runs nor the event log change in the database.
func TestPrimaryAfterStopChangesNothing(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	run := insertRun(t, db, runSpec{numGames: 1000, approved: true})
	p := newTestPrimary(t, db)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s := p.Scheduler()
	w := worker(1)
	task := request(t, s, w)
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := db.Runs.Get(ctx, run.ID)
	if err != nil || len(before.Tasks) != 1 {
		t.Fatalf("the run as Stop wrote it: %v, %v", before, err)
	}
	fresh := runSpec{numGames: 1000, approved: true}.build(time.Now())

	for _, c := range []struct {
		name string
		call func() error
	}{
		{"a worker asks for a task", func() error {
			_, err := s.RequestTask(ctx, worker(2), 16, "http://shoal.test")
			return err
		}},
		{"a worker reports results", func() error {
			_, err := s.UpdateTask(ctx, w, run.ID, task.TaskID, pairs(8, 1), nil)
			return err
		}},
		{"a worker beats", func() error {
			_, err := s.Beat(ctx, run.ID, task.TaskID)
			return err
		}},
		{"a worker fails its task", func() error {
			_, err := s.FailedTask(ctx, run.ID, task.TaskID, "crash")
			return err
		}},
		{"a user stops the run", func() error { return s.StopRunByUser(ctx, run.ID, "alice") }},
		{"a user deletes the run", func() error { return s.DeleteRun(ctx, run.ID, "alice") }},
		{"a new run is added", func() error { return s.AddRun(ctx, fresh) }},
	} {
		if err := c.call(); !errors.Is(err, ErrStopped) {
			t.Errorf("%s after Stop: %v, want ErrStopped", c.name, err)
		}
	}

	after, err := db.Runs.Get(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Finished || after.Deleted || len(after.Tasks) != 1 || !after.Tasks[0].Active || played(after.Results) != 0 {
		t.Errorf("the stored run changed after Stop: finished %v deleted %v tasks %d results %+v",
			after.Finished, after.Deleted, len(after.Tasks), after.Results)
	}
	if _, err := db.Runs.Get(ctx, fresh.ID); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a run added after Stop is in the database: %v", err)
	}
	for _, kind := range []string{"stop_run", "delete_run", "failed_task"} {
		if got, err := db.Actions.Find(ctx, rundb.ActionFilter{Action: kind}, 1); err != nil || len(got) > 0 {
			t.Errorf("%s actions after Stop: %d, %v; want none", kind, len(got), err)
		}
	}
	if n := p.RunCache().Dirty(); n != 0 {
		t.Errorf("%d runs dirty after Stop", n)
	}
}

// Abandon, for a primary that lost its lease, ends the Primary's calls and goroutines as Stop
// does but writes nothing: not the dirty run.
func TestPrimaryAbandonWritesNothing(t *testing.T) {
	db := rundbtest.Open(t)
	run := insertRun(t, db, runSpec{numGames: 1000, approved: true})
	p := newTestPrimary(t, db)
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if task := request(t, p.Scheduler(), worker(1)); task.RunID != run.ID {
		t.Fatalf("request_task: %+v", task)
	}
	if err := p.Abandon(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPrimaryGoroutines(t)
	if stored, err := db.Runs.Get(ctx, run.ID); err != nil || len(stored.Tasks) != 0 {
		t.Errorf("after Abandon the stored run has %d tasks (%v), want the document as it was", len(stored.Tasks), err)
	}
	if _, err := p.Scheduler().RequestTask(ctx, rundb.WorkerInfo{}, 10, ""); !errors.Is(err, ErrStopped) {
		t.Errorf("request_task after Abandon: %v, want ErrStopped", err)
	}
}
