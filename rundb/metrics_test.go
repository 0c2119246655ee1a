package rundb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestDBOperationMetrics(t *testing.T) {
	db, _, reg := rundbtest.OpenMetered(t)
	ctx := context.Background()
	const op = "shoal_db_operation_duration_seconds"
	// Open has asked the server what it is.
	if n := metricstest.HistogramCount(t, reg, op, "command", "buildInfo"); n != 1 {
		t.Errorf("buildInfo commands after Open: %d, want 1", n)
	}
	finds := metricstest.HistogramCount(t, reg, op, "command", "find")

	r := &rundb.Run{ID: rundb.NewObjectID(), Results: rundb.NewResults()}
	if err := db.Runs.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Runs.Get(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Runs.Get(ctx, rundb.NewObjectID()); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("Get of a missing run: %v, want ErrNotFound", err)
	}

	if n := metricstest.HistogramCount(t, reg, op, "command", "insert"); n != 1 {
		t.Errorf("insert commands: %d, want 1", n)
	}
	if n := metricstest.HistogramCount(t, reg, op, "command", "find") - finds; n != 2 {
		t.Errorf("find commands: %d, want 2", n)
	}
	// A missing document is an answer, not a failed command: no error series at all.
	if n, err := testutil.GatherAndCount(reg, "shoal_db_operation_errors_total"); n != 0 || err != nil {
		t.Errorf("failed commands: %d series (%v), want none", n, err)
	}
}

func TestSlowPasswordChecksMetric(t *testing.T) {
	db, _, reg := rundbtest.OpenMetered(t)
	ctx := context.Background()
	const name = "shoal_password_checks_slow_total"
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "correct-horse", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	before := metricstest.Value(t, reg, name)
	for _, guess := range []string{"guess-1", "guess-2", "guess-1"} {
		if _, err := db.Users.AuthenticateCached(ctx, "alice", guess); err == nil {
			t.Fatal("a wrong password authenticated")
		}
	}
	if _, err := db.Users.AuthenticateCached(ctx, "mallory", "guess-1"); err == nil {
		t.Fatal("an unknown user authenticated")
	}
	if _, err := db.Users.AuthenticateCached(ctx, "alice", "correct-horse"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.AuthenticateCached(ctx, "alice", "correct-horse"); err != nil {
		t.Fatal(err)
	}
	got := metricstest.Value(t, reg, name) - before
	if got != 4 || int64(got) != db.Users.SlowChecks()-int64(before) {
		t.Errorf("%s rose by %v (SlowChecks %d), want 4: two guesses, the unknown user and the first success", name, got, db.Users.SlowChecks())
	}
}
