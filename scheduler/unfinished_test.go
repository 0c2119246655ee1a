package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
)

// unfinishedIDs keeps its sorted list between calls: a run added or finished must show at
// once, and a list handed out before must stay as it was (its holder may still be reading).
func TestUnfinishedIDsFollowTheSet(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	a := addRun(t, s, runSpec{approved: true, numGames: 1000})
	b := addRun(t, s, runSpec{approved: true, numGames: 1000})
	before := s.unfinishedIDs()
	want := []rundb.ObjectID{a, b}
	slices.SortFunc(want, rundb.ObjectID.Compare)
	if !slices.Equal(before, want) {
		t.Fatalf("unfinished %v, want %v", before, want)
	}
	c := addRun(t, s, runSpec{approved: true, numGames: 1000})
	if got := s.unfinishedIDs(); len(got) != 3 || !slices.Contains(got, c) {
		t.Errorf("after a new run: %v, want 3 runs with %s", got, c)
	}
	err := s.runs.Change(ctx, a, func(r *rundb.Run) (runcache.Prio, error) {
		s.setInactiveRun(r, s.now())
		return runcache.PrioSaveNow, nil // as a finished run is: stored at once
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.unfinishedIDs(); len(got) != 2 || slices.Contains(got, a) {
		t.Errorf("after finishing %s: %v", a, got)
	}
	if !slices.Equal(before, want) {
		t.Errorf("a list handed out earlier changed to %v, want %v", before, want)
	}
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.unfinishedIDs(); len(got) != 2 || slices.Contains(got, a) {
		t.Errorf("after Load: %v, want the 2 unfinished runs", got)
	}
}
