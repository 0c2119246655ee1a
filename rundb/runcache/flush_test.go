package runcache_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// Flushes reuse their encoders' buffers, from one run to another of a different size; each
// stored run must still be exactly the cached one, including a run whose write began while
// another run's flush was encoding into a buffer of its own, and a change made during a write
// must reach the database with the next flush.
func TestRunCacheFlushStoresWhatIsCached(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	var cache *runcache.Cache
	var during func() // called once, as the next run write begins
	cache = runcache.New(db.Runs, runcache.Options{BeforeWrite: func() {
		if f := during; f != nil {
			during = nil
			f()
		}
	}})
	big, small := rundbtest.SampleRunWithTasks(60), rundbtest.SampleRunWithTasks(3)
	for _, r := range []*rundb.Run{big, small} {
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	change := func(id rundb.ObjectID, fn func(*rundb.Run)) {
		t.Helper()
		if err := cache.Change(ctx, id, func(r *rundb.Run) (runcache.Prio, error) { fn(r); return runcache.PrioNormal, nil }); err != nil {
			t.Fatal(err)
		}
	}
	flush := func() {
		t.Helper()
		if _, _, err := cache.FlushOne(ctx); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		run  *rundb.Run
		fn   func(*rundb.Run)
	}{
		{"results change", big, func(r *rundb.Run) { r.Tasks[7].Stats.Wins += 3; r.CommittedGames += 3 }},
		{"the small run", small, func(r *rundb.Run) { r.Args.Info = "shorter" }},
		{"tasks are added", big, func(r *rundb.Run) { r.Tasks = append(r.Tasks, r.Tasks[:40]...) }},
		{"tasks are purged", big, func(r *rundb.Run) { r.Tasks = r.Tasks[:5]; r.Args.Info = "purged" }},
		{"the small run grows", small, func(r *rundb.Run) { r.Tasks = append(r.Tasks, r.Tasks...) }},
		{"a worker's name changes", big, func(r *rundb.Run) { r.Tasks[4].WorkerInfo.Username = "carol" }},
	}
	for _, s := range steps {
		change(s.run.ID, s.fn)
		flush()
		assertStored(t, db, cache, big.ID, s.name)
		assertStored(t, db, cache, small.ID, s.name)
	}

	// While the big run's write begins (its encoder checked out), the small run is changed and
	// flushed, and then the big run changed once more.
	change(big.ID, func(r *rundb.Run) { r.Tasks = append(r.Tasks, r.Tasks...) })
	wantBig := cached(t, cache, big.ID)
	during = func() {
		change(small.ID, func(r *rundb.Run) { r.Args.Info = "flushed during another write" })
		flush() // the small run, the only one dirty
		change(big.ID, func(r *rundb.Run) { r.CommittedGames = 12345 })
	}
	flush()
	assertStored(t, db, cache, small.ID, "a flush during another run's write")
	if got := stored(t, db, big.ID); !bytes.Equal(got, wantBig) {
		t.Errorf("the write during which another run was flushed stored %d bytes that differ from the %d encoded", len(got), len(wantBig))
	}
	if cache.Dirty() != 1 {
		t.Fatalf("Dirty() = %d after the write, want the run changed during it", cache.Dirty())
	}
	flush()
	assertStored(t, db, cache, big.ID, "the change made during a write")
	if got := storedGames(t, db, big.ID); got != 12345 {
		t.Errorf("stored committed_games %d, want the 12345 set during the earlier write", got)
	}
}

// cached is the cached run's encoding.
func cached(t *testing.T, cache *runcache.Cache, id rundb.ObjectID) []byte {
	t.Helper()
	var doc []byte
	var err error
	codec := rundb.NewCodec(true) // the form matters not: both sides of a comparison use it
	if verr := cache.View(context.Background(), id, func(r *rundb.Run) { doc, err = codec.Encode(r) }); verr != nil || err != nil {
		t.Fatal(verr, err)
	}
	return doc
}

// stored is the stored run, decoded and encoded as cached encodes.
func stored(t *testing.T, db *rundb.DB, id rundb.ObjectID) []byte {
	t.Helper()
	r, err := db.Runs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := rundb.NewCodec(true).Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// assertStored fails unless the stored run, decoded and encoded again, gives the cached run's
// bytes.
func assertStored(t *testing.T, db *rundb.DB, cache *runcache.Cache, id rundb.ObjectID, step string) {
	t.Helper()
	if got, want := stored(t, db, id), cached(t, cache, id); !bytes.Equal(got, want) {
		t.Errorf("%s: run %s stored as %d bytes that differ from the cached run's %d", step, id, len(got), len(want))
	}
}
