package scheduler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
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
	s := newScheduler(testConfig(), st, rundb.NewRunCache(db.Runs, nil, logger), logger)

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
