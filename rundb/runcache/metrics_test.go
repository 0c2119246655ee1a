package runcache_test

import (
	"context"
	"testing"

	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestRunCacheMetrics(t *testing.T) {
	db, m, reg := rundbtest.OpenMetered(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{Metrics: m})
	a, b := &rundb.Run{ID: rundb.NewObjectID()}, &rundb.Run{ID: rundb.NewObjectID()}
	for _, r := range []*rundb.Run{a, b} {
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := cache.Change(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) { r.CommittedGames = 4; return runcache.PrioNormal, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_dirty_runs"); v != 2 {
		t.Errorf("dirty runs = %g, want 2", v)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_cached_runs"); v != 2 {
		t.Errorf("cached runs = %g, want 2", v)
	}
	if _, _, err := cache.FlushOne(ctx); err != nil {
		t.Fatal(err)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_dirty_runs"); v != 1 {
		t.Errorf("dirty runs after one flush = %g, want 1", v)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_runcache_flush_duration_seconds"); n != 1 {
		t.Errorf("flushes: %d, want 1", n)
	}

	// A run that cannot be written counts as a flush and a flush error.
	err := cache.Change(ctx, b.ID, func(r *rundb.Run) (runcache.Prio, error) {
		r.Extra = rundb.Extra{"unstorable": make(chan int)}
		return runcache.PrioSaveNow, nil
	})
	if err == nil {
		t.Fatal("a SAVE_NOW write of an unencodable run succeeded")
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_runcache_flush_duration_seconds"); n != 2 {
		t.Errorf("flushes: %d, want 2", n)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_flush_errors_total"); v != 1 {
		t.Errorf("flush errors: %g, want 1", v)
	}
	// Repaired, the run is written; then nothing is dirty and a flush observes nothing.
	if err := cache.Change(ctx, b.ID, func(r *rundb.Run) (runcache.Prio, error) { r.Extra = nil; return runcache.PrioSaveNow, nil }); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cache.FlushOne(ctx); ok || err != nil {
		t.Fatalf("FlushOne with nothing dirty: %v, %v", ok, err)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_runcache_flush_duration_seconds"); n != 3 {
		t.Errorf("flushes: %d, want 3", n)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_dirty_runs"); v != 0 {
		t.Errorf("dirty runs at the end = %g, want 0", v)
	}
}

// Operators see how many password checks paid for a full comparison: each new guess is one, a
// login of an unknown user is one (it costs the same time), and a credential checked a moment
// ago, right or wrong, is none.
