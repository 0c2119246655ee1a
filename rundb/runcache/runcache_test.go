package runcache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// storedGames reads a run's committed_games from the database, behind the cache.
func storedGames(t *testing.T, db *rundb.DB, id rundb.ObjectID) int {
	t.Helper()
	r, err := db.Runs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.CommittedGames
}

func setGames(n int) func(*rundb.Run) error {
	return func(r *rundb.Run) error { r.CommittedGames = n; return nil }
}

// at is fn as a change of priority prio.
func at(prio runcache.Prio, fn func(*rundb.Run) error) func(*rundb.Run) (runcache.Prio, error) {
	return func(r *rundb.Run) (runcache.Prio, error) { return prio, fn(r) }
}

func TestRunCacheFlushOrder(t *testing.T) {
	type change struct {
		run  string
		prio runcache.Prio
	}
	type created struct {
		run string
		at  time.Duration // after the first
	}
	cases := []struct {
		name    string
		runs    []created // each run is last written when it is created
		changes []change
		want    []string
	}{
		{
			name:    "equal priorities go oldest write first",
			runs:    []created{{"a", 0}, {"b", 30 * time.Second}, {"c", time.Minute}},
			changes: []change{{"c", runcache.PrioNormal}, {"a", runcache.PrioNormal}, {"b", runcache.PrioNormal}},
			want:    []string{"a", "b", "c"},
		},
		{
			name:    "a new task outranks a finished task outranks a result",
			runs:    []created{{"a", 0}, {"b", 30 * time.Second}, {"c", time.Minute}},
			changes: []change{{"a", runcache.PrioNormal}, {"b", runcache.PrioMedium}, {"c", runcache.PrioHigh}},
			want:    []string{"c", "b", "a"},
		},
		{
			name: "each priority level is worth one minute of age",
			// c is 50 s younger than a but MEDIUM; e is 130 s younger and HIGH.
			runs:    []created{{"a", 0}, {"c", 50 * time.Second}, {"e", 130 * time.Second}},
			changes: []change{{"e", runcache.PrioHigh}, {"a", runcache.PrioNormal}, {"c", runcache.PrioMedium}},
			want:    []string{"c", "a", "e"},
		},
		{
			name:    "a run keeps the highest priority of its pending changes",
			runs:    []created{{"a", 0}, {"b", 30 * time.Second}},
			changes: []change{{"b", runcache.PrioHigh}, {"b", runcache.PrioNormal}, {"a", runcache.PrioMedium}},
			want:    []string{"b", "a"},
		},
		{
			name:    "clean runs are not written",
			runs:    []created{{"a", 0}, {"b", 30 * time.Second}, {"c", time.Minute}},
			changes: []change{{"b", runcache.PrioNormal}},
			want:    []string{"b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := rundbtest.Open(t)
			ctx := context.Background()
			clock := newFakeClock()
			cache := runcache.New(db.Runs, runcache.Options{Now: clock.Now})
			ids := map[string]rundb.ObjectID{}
			names := map[rundb.ObjectID]string{}
			start := clock.Now()
			for _, c := range tc.runs {
				clock.Advance(start.Add(c.at).Sub(clock.Now()))
				r := &rundb.Run{ID: rundb.NewObjectID(), Args: rundb.RunArgs{Info: c.run}}
				if err := cache.Create(ctx, r); err != nil {
					t.Fatal(err)
				}
				ids[c.run], names[r.ID] = r.ID, c.run
			}
			clock.Advance(10 * time.Minute)
			for i, ch := range tc.changes {
				if err := cache.Change(ctx, ids[ch.run], at(ch.prio, setGames(i+1))); err != nil {
					t.Fatal(err)
				}
			}
			if got := cache.Dirty(); got != len(tc.want) {
				t.Errorf("Dirty() = %d before flushing, want %d", got, len(tc.want))
			}
			var order []string
			for {
				id, ok, err := cache.FlushOne(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				order = append(order, names[id])
				if len(order) > len(tc.runs) {
					t.Fatalf("FlushOne keeps finding work: %v", order)
				}
			}
			if len(order) != len(tc.want) {
				t.Fatalf("flush order %v, want %v", order, tc.want)
			}
			for i := range order {
				if order[i] != tc.want[i] {
					t.Fatalf("flush order %v, want %v", order, tc.want)
				}
			}
			// Each written run holds its last change.
			for i, ch := range tc.changes {
				last := true
				for _, later := range tc.changes[i+1:] {
					last = last && later.run != ch.run
				}
				if last {
					if got := storedGames(t, db, ids[ch.run]); got != i+1 {
						t.Errorf("run %s stored committed_games %d, want %d", ch.run, got, i+1)
					}
				}
			}
		})
	}
}

func TestRunCacheWritesBehind(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID()}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := cache.Change(ctx, r.ID, at(runcache.PrioHigh, setGames(10))); err != nil {
		t.Fatal(err)
	}
	if got := storedGames(t, db, r.ID); got != 0 {
		t.Errorf("a HIGH change reached the database before a flush: committed_games %d", got)
	}
	var seen int
	if err := cache.View(ctx, r.ID, func(r *rundb.Run) { seen = r.CommittedGames }); err != nil {
		t.Fatal(err)
	}
	if seen != 10 {
		t.Errorf("View sees committed_games %d, want the cached 10", seen)
	}
	if err := cache.Change(ctx, r.ID, at(runcache.PrioSaveNow, setGames(20))); err != nil {
		t.Fatal(err)
	}
	if got := storedGames(t, db, r.ID); got != 20 {
		t.Errorf("after a SAVE_NOW change the database has committed_games %d, want 20", got)
	}
	if got := cache.Dirty(); got != 0 {
		t.Errorf("Dirty() = %d after SAVE_NOW, want 0", got)
	}
}

func TestRunCacheChangeErrorChangesNothing(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID()}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("refused")
	if err := cache.Change(ctx, r.ID, at(runcache.PrioHigh, func(*rundb.Run) error { return refuse })); !errors.Is(err, refuse) {
		t.Errorf("Change returned %v, want the callback's error", err)
	}
	if got := cache.Dirty(); got != 0 {
		t.Errorf("a refused update left %d dirty runs", got)
	}
	if err := cache.Change(ctx, rundb.NewObjectID(), at(runcache.PrioNormal, setGames(1))); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Change of an unknown run: %v, want ErrNotFound", err)
	}
}

func TestRunCacheLoadsFromDatabase(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	r := rundbtest.SampleRun()
	if err := db.Runs.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	cache := runcache.New(db.Runs, runcache.Options{})
	var tasks int
	if err := cache.View(ctx, r.ID, func(run *rundb.Run) { tasks = len(run.Tasks) }); err != nil {
		t.Fatal(err)
	}
	if tasks != len(r.Tasks) || cache.Len() != 1 {
		t.Errorf("after a miss the cache holds %d runs with %d tasks, want 1 with %d", cache.Len(), tasks, len(r.Tasks))
	}
}

func TestRunCachePreloadsUnfinishedRuns(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	var unfinished rundb.ObjectID
	for _, finished := range []bool{true, false} {
		r := &rundb.Run{ID: rundb.NewObjectID(), Finished: finished}
		if err := db.Runs.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		if !finished {
			unfinished = r.ID
		}
	}
	cache := runcache.New(db.Runs, runcache.Options{})
	ids, err := cache.Preload(ctx)
	if err != nil || len(ids) != 1 || ids[0] != unfinished || cache.Len() != 1 {
		t.Fatalf("Preload = %v, %v; cache holds %d runs; want the 1 unfinished run", ids, err, cache.Len())
	}
	// Served from memory: a change made behind the cache's back is not seen.
	stored, _ := db.Runs.Get(ctx, unfinished)
	stored.CommittedGames = 99
	if err := db.Runs.Replace(ctx, stored); err != nil {
		t.Fatal(err)
	}
	var seen int
	if err := cache.View(ctx, unfinished, func(r *rundb.Run) { seen = r.CommittedGames }); err != nil || seen != 0 {
		t.Errorf("View after Preload saw committed_games %d (%v), want the preloaded 0", seen, err)
	}
}

// Shutdown writes every dirty run; a failed write keeps the run dirty so that a later flush
// still writes it.
func TestRunCacheFlushAllLosesNothing(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	var ids []rundb.ObjectID
	for i := range 5 {
		r := &rundb.Run{ID: rundb.NewObjectID()}
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := cache.Change(ctx, r.ID, at(runcache.Prio(i%3), setGames(100+i))); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}

	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := cache.FlushAll(dead); err == nil {
		t.Fatal("FlushAll with a dead context reported success")
	}
	if got := cache.Dirty(); got != 5 {
		t.Fatalf("after failed writes Dirty() = %d, want all 5 still dirty", got)
	}

	if err := cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cache.Dirty(); got != 0 {
		t.Errorf("Dirty() = %d after FlushAll", got)
	}
	// A new process (a new connection, no cache) sees every change.
	fresh := rundbtest.OpenNamed(t, db.Name())
	for i, id := range ids {
		r, err := fresh.Runs.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.CommittedGames != 100+i {
			t.Errorf("run %d: stored committed_games %d, want %d", i, r.CommittedGames, 100+i)
		}
	}
}

// Changes racing with the flusher are never lost: the last value written is the last value set.
func TestRunCacheConcurrentChangesAndFlushes(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID()}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 4, 25
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Add(1)
	go func() {
		defer flusher.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := cache.FlushOne(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				err := cache.Change(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) {
					r.CommittedGames++
					r.Tasks = append(r.Tasks, rundb.Task{NumGames: 2, Stats: rundb.NewResults()})
					return runcache.PrioNormal, nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	if err := cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := db.Runs.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.CommittedGames != writers*perWriter || len(stored.Tasks) != writers*perWriter {
		t.Errorf("stored %d games and %d tasks, want %d of each", stored.CommittedGames, len(stored.Tasks), writers*perWriter)
	}
}

func TestRunCacheEvict(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	clock := newFakeClock()
	cache := runcache.New(db.Runs, runcache.Options{Now: clock.Now})
	mk := func(cores int, finished bool) rundb.ObjectID {
		r := &rundb.Run{ID: rundb.NewObjectID(), Cores: cores, Finished: finished}
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	idle := mk(0, false)
	finishedBusy := mk(8, true) // finished runs go even if cores were not reset (old documents)
	busy := mk(8, false)
	dirty := mk(0, false)
	recent := mk(0, false)
	if err := cache.Change(ctx, dirty, at(runcache.PrioNormal, setGames(1))); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Minute)
	if err := cache.View(ctx, recent, func(*rundb.Run) {}); err != nil {
		t.Fatal(err)
	}
	if n := cache.Evict(5 * time.Minute); n != 2 {
		t.Errorf("Evict dropped %d runs, want 2", n)
	}
	for _, c := range []struct {
		name string
		id   rundb.ObjectID
		kept bool
	}{
		{"an idle run", idle, false},
		{"a finished run", finishedBusy, false},
		{"a run with cores on it", busy, true},
		{"a run with an unwritten change", dirty, true},
		{"a recently used run", recent, true},
	} {
		if got := cache.Cached(c.id); got != c.kept {
			t.Errorf("%s: cached after Evict = %v, want %v", c.name, got, c.kept)
		}
	}
	// An evicted run is loaded again on demand.
	if err := cache.View(ctx, idle, func(*rundb.Run) {}); err != nil || !cache.Cached(idle) {
		t.Errorf("reloading an evicted run: %v", err)
	}
}

// A run whose write keeps failing must not stop the flusher from writing the others.
func TestRunCacheFailingRunDoesNotBlockOthers(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	clock := newFakeClock()
	cache := runcache.New(db.Runs, runcache.Options{Now: clock.Now})
	bad := &rundb.Run{ID: rundb.NewObjectID()}
	good := &rundb.Run{ID: rundb.NewObjectID()}
	for _, r := range []*rundb.Run{bad, good} {
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	// The bad run becomes unencodable (a channel cannot be stored) and is the older one, with a
	// failed SAVE_NOW on top, so it is first in line.
	err := cache.Change(ctx, bad.ID, func(r *rundb.Run) (runcache.Prio, error) {
		r.Extra = rundb.Extra{"unstorable": make(chan int)}
		return runcache.PrioSaveNow, nil
	})
	if err == nil {
		t.Fatal("a SAVE_NOW write of an unencodable run succeeded")
	}
	if err := cache.Change(ctx, good.ID, at(runcache.PrioNormal, setGames(7))); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clock.Advance(time.Second)
		_, _, _ = cache.FlushOne(ctx)
	}
	if got := storedGames(t, db, good.ID); got != 7 {
		t.Errorf("after 3 flushes the good run has committed_games %d in the database, want 7", got)
	}
	if got := cache.Dirty(); got != 1 {
		t.Errorf("Dirty() = %d, want 1 (the failing run, kept for retry)", got)
	}
}

func TestRunCacheCreateRefusesAnExistingID(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID(), CommittedGames: 5}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := cache.Create(ctx, &rundb.Run{ID: r.ID}); !errors.Is(err, rundb.ErrConflict) {
		t.Errorf("second Create with the same ID: %v, want ErrConflict", err)
	}
	if got := storedGames(t, db, r.ID); got != 5 {
		t.Errorf("the second Create overwrote the stored run: committed_games %d", got)
	}
}

func TestRunCacheChangedWakesOnChangeOnly(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := cache.Changed()
	r := &rundb.Run{ID: rundb.NewObjectID()}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Error("creating a run did not signal Changed")
	}
	ch = cache.Changed()
	if closed(ch) {
		t.Fatal("a fresh Changed channel is already closed")
	}
	_ = cache.Change(ctx, r.ID, at(runcache.PrioHigh, func(*rundb.Run) error { return errors.New("refused") }))
	if err := cache.View(ctx, r.ID, func(*rundb.Run) {}); err != nil {
		t.Fatal(err)
	}
	if closed(ch) {
		t.Error("a refused update or a read signalled Changed")
	}
	if err := cache.Change(ctx, r.ID, at(runcache.PrioHigh, setGames(3))); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Error("an update did not signal Changed")
	}
}

func TestRunCacheListingLeavesOutTasks(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID(), Tasks: []rundb.Task{{NumGames: 8}}, BadTasks: []rundb.Task{{NumGames: 2}},
		Args: rundb.RunArgs{SPSA: &rundb.SPSA{Iter: 3, ParamHistory: rundb.ParamHistory{{{Theta: 1}}}}}}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := cache.Change(ctx, r.ID, at(runcache.PrioNormal, setGames(7))); err != nil {
		t.Fatal(err)
	}
	got, err := cache.Listing(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Tasks) != 0 || len(got.BadTasks) != 0 || got.Args.SPSA == nil || len(got.Args.SPSA.ParamHistory) != 0 {
		t.Errorf("listing kept tasks %d, bad tasks %d or SPSA history %+v", len(got.Tasks), len(got.BadTasks), got.Args.SPSA)
	}
	if got.CommittedGames != 7 || got.Args.SPSA.Iter != 3 {
		t.Errorf("listing lost the run's own fields: committed_games %d, iter %d", got.CommittedGames, got.Args.SPSA.Iter)
	}
	full, _ := cache.Snapshot(ctx, r.ID)
	if len(full.Tasks) != 1 || len(full.Args.SPSA.ParamHistory) != 1 {
		t.Errorf("the listing changed the cached run: %d tasks, history %v", len(full.Tasks), full.Args.SPSA.ParamHistory)
	}
}

// ViewEach shows each run in the order asked, loads those not cached, reports a missing run
// in its place, and leaves every run unpinned and marked used, as View does: Evict can drop
// them once they are idle again, and not before.
func TestRunCacheViewEach(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	clock := newFakeClock()
	cache := runcache.New(db.Runs, runcache.Options{Now: clock.Now})
	var ids []rundb.ObjectID
	for i := range 70 { // more than ViewEach holds without allocating
		r := &rundb.Run{ID: rundb.NewObjectID(), CommittedGames: i}
		if err := cache.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	stored := rundbtest.SampleRun() // in the database only
	stored.Cores = 0                // idle, so that Evict may drop it
	if err := db.Runs.Insert(ctx, stored); err != nil {
		t.Fatal(err)
	}
	missing := rundb.NewObjectID()
	ask := append([]rundb.ObjectID{ids[3], stored.ID, missing}, ids...)

	clock.Advance(10 * time.Minute)
	var seen []rundb.ObjectID
	var games []int
	cache.ViewEach(ctx, ask, func(id rundb.ObjectID, r *rundb.Run, err error) {
		seen = append(seen, id)
		switch {
		case id == missing:
			if !errors.Is(err, rundb.ErrNotFound) || r != nil {
				t.Errorf("missing run: %v, %v; want ErrNotFound and no run", r, err)
			}
		case err != nil || r == nil || r.ID != id:
			t.Errorf("run %s: %v, %v", id, r, err)
		default:
			games = append(games, r.CommittedGames)
		}
	})
	if len(seen) != len(ask) {
		t.Fatalf("saw %d runs, want %d", len(seen), len(ask))
	}
	for i := range ask {
		if seen[i] != ask[i] {
			t.Fatalf("run %d seen was %s, want %s", i, seen[i], ask[i])
		}
	}
	if games[0] != 3 || games[2] != 0 || games[len(games)-1] != 69 {
		t.Errorf("games %v: runs out of order", games)
	}
	if !cache.Cached(stored.ID) {
		t.Error("a run ViewEach read from the database is not cached")
	}
	// Just used: nothing goes. Idle since: all go, so none was left pinned.
	if n := cache.Evict(5 * time.Minute); n != 0 {
		t.Errorf("Evict dropped %d runs just viewed, want 0", n)
	}
	clock.Advance(10 * time.Minute)
	if n := cache.Evict(5 * time.Minute); n != len(ids)+1 {
		t.Errorf("Evict dropped %d idle runs, want %d", n, len(ids)+1)
	}
}

// Changes no one watches (no Changed since the last wake-up) must not leave a later watcher
// asleep: its channel is closed by the next change, as are all handed out before it.
func TestRunCacheChangedAfterUnwatchedChanges(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	cache := runcache.New(db.Runs, runcache.Options{})
	r := &rundb.Run{ID: rundb.NewObjectID()}
	if err := cache.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // unwatched
		if err := cache.Change(ctx, r.ID, at(runcache.PrioNormal, setGames(i))); err != nil {
			t.Fatal(err)
		}
	}
	first, second := cache.Changed(), cache.Changed()
	select {
	case <-first:
		t.Fatal("a fresh Changed channel is already closed")
	default:
	}
	if err := cache.Change(ctx, r.ID, at(runcache.PrioNormal, setGames(9))); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan struct{}{first, second} {
		select {
		case <-ch:
		default:
			t.Error("a change did not wake a watcher")
		}
	}
	select {
	case <-cache.Changed():
		t.Error("the channel after a wake-up is already closed")
	default:
	}
}
