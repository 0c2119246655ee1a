package scheduler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// brokenLog is an event log whose every write fails, as a database that refuses the actions
// collection would.
type brokenLog struct {
	mu    sync.Mutex
	tried []string
}

func (b *brokenLog) Insert(_ context.Context, a *rundb.Action) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tried = append(b.tried, a.Action)
	return errors.New("actions collection refused the write")
}

// The event log is a record for people, not part of the run: when it cannot be written, the
// worker's results still count, the run still finishes, and the failure is logged.
func TestBrokenEventLogFailsNoWorker(t *testing.T) {
	db := rundbtest.Open(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	st := storeOf(db)
	broken := &brokenLog{}
	st.actions = broken
	s := newScheduler(testConfig(), st, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger)

	id := addRun(t, s, runSpec{numGames: 100, approved: true})
	tk := request(t, s, worker(1))
	n := tk.Task.NumGames / 2
	got := update(t, s, worker(1), id, tk.TaskID, rundb.Results{Wins: n, Draws: n, Pentanomial: []int{0, 0, 0, n, 0}})
	if *got.TaskAlive {
		t.Error("the task is alive after all its games")
	}
	r := snapshot(t, s, id)
	if !r.Finished || r.Results.Wins != n || r.Results.Draws != n {
		t.Fatalf("run finished=%v results %+v, want finished with %d wins and %d draws", r.Finished, r.Results, n, n)
	}
	broken.mu.Lock()
	tried := strings.Join(broken.tried, ",")
	broken.mu.Unlock()
	if !strings.Contains(tried, "finished_run") {
		t.Errorf("actions tried %q, want the finished_run among them", tried)
	}
	if !strings.Contains(logs.String(), "write action") || !strings.Contains(logs.String(), "refused the write") {
		t.Errorf("the failed write is not logged:\n%s", logs.String())
	}
	if acts, err := db.Actions.Find(context.Background(), rundb.ActionFilter{}, 10); err != nil || len(acts) != 0 {
		t.Errorf("actions in the database %v (%v), want none: the log was the stand-in", acts, err)
	}
}

// watchedSources are the contributors' sources of a database, counting the scans for finished
// runs and recording the runs read by ID; failByID makes the next read by ID fail.
type watchedSources struct {
	contributorSources
	mu       sync.Mutex
	scans    int
	byID     [][]rundb.ObjectID
	failByID bool
}

func (w *watchedSources) EachFinished(ctx context.Context, since time.Time, fn func(*rundb.Run) error) error {
	w.mu.Lock()
	w.scans++
	w.mu.Unlock()
	return w.contributorSources.EachFinished(ctx, since, fn)
}

func (w *watchedSources) EachByID(ctx context.Context, ids []rundb.ObjectID, fn func(*rundb.Run) error) error {
	w.mu.Lock()
	w.byID = append(w.byID, ids)
	fail := w.failByID
	w.failByID = false
	w.mu.Unlock()
	if fail {
		return errors.New("runs collection unreachable")
	}
	return w.contributorSources.EachByID(ctx, ids, fn)
}

// The contributors' updates after a term's first read only the runs the scheduler saw finish,
// by ID: on the embedded database a query for finished runs reads every run, unfinished ones
// with all their tasks. A run finished meanwhile is counted all the same, and an update that
// fails keeps it for the next.
func TestContributorUpdatesReadOnlyTheRunsThatFinished(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	st := storeOf(db)
	watched := &watchedSources{contributorSources: st.contributors}
	st.contributors = watched
	s := newScheduler(testConfig(), st, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger)
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "carol", Password: "secret-password", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	r := runSpec{username: "carol", tc: "10+0.1", threads: 1, approved: true}.build(s.now())
	r.Tasks = []rundb.Task{statsTask("carol", 20, 10, 10, false, s.now())}
	if err := s.AddRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	job := contributorsJob(t, s)
	check := func(step string, scans int, byID ...[]rundb.ObjectID) {
		t.Helper()
		watched.mu.Lock()
		defer watched.mu.Unlock()
		if watched.scans != scans || len(watched.byID) != len(byID) {
			t.Fatalf("%s: %d scans and reads by ID %v, want %d scans and %v", step, watched.scans, watched.byID, scans, byID)
		}
		for i := range byID {
			if !slices.Equal(watched.byID[i], byID[i]) {
				t.Fatalf("%s: read by ID %v, want %v", step, watched.byID, byID)
			}
		}
	}

	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	check("first update", 1)
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	check("nothing finished", 1, []rundb.ObjectID{})

	err := s.modify(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) {
		s.setInactiveRun(r, s.now())
		return runcache.PrioSaveNow, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	watched.mu.Lock()
	watched.failByID = true
	watched.mu.Unlock()
	if err := job.Run(ctx); err == nil {
		t.Fatal("an update whose read failed succeeded")
	}
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	check("a run finished", 1, []rundb.ObjectID{}, []rundb.ObjectID{r.ID}, []rundb.ObjectID{r.ID})
	carol, err := db.UserCache.Get(ctx, "carol")
	if err != nil || carol.Games != 40 || carol.Tests != 1 {
		t.Fatalf("carol after her run finished: %+v (%v), want 40 games and 1 test", carol, err)
	}
}
