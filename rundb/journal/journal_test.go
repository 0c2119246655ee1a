package journal_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// primary is one life of a primary's run cache and journal on db: opening it takes the next
// epoch and replays the journal, as a start does.
type primary struct {
	cache   *runcache.Cache
	journal *journal.Journal
}

func startPrimary(t *testing.T, db *rundb.DB, opts journal.Options) *primary {
	t.Helper()
	ctx := context.Background()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	j, err := journal.Open(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	c := runcache.New(db.Runs, runcache.Options{Logger: slog.New(slog.DiscardHandler), Journal: j})
	if _, err := c.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	return &primary{cache: c, journal: j}
}

// durably makes a change with ChangeDurably and waits until it is stored, as a worker's reply
// does before it acknowledges the change.
func (p *primary) durably(ctx context.Context, id rundb.ObjectID, task int, fn func(*rundb.Run) (runcache.Prio, error)) error {
	stored, err := p.cache.ChangeDurably(ctx, id, task, fn)
	if err != nil {
		return err
	}
	return stored(ctx)
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// journalRun is a small unfinished SPSA run with one active task.
func journalRun(t *testing.T, db *rundb.DB) rundb.ObjectID {
	t.Helper()
	r := rundbtest.SampleRun()
	r.Finished = false
	r.BadTasks = nil
	if err := db.Runs.Insert(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// report is what a worker's update does to task i: its cumulative stats, and an SPSA step.
func report(i, wins int, theta float64, history bool) func(*rundb.Run) (runcache.Prio, error) {
	return func(r *rundb.Run) (runcache.Prio, error) {
		r.Tasks[i].Stats.Wins = wins
		r.Args.SPSA.Iter++
		r.Args.SPSA.Params[0].Theta = theta
		if history {
			r.Args.SPSA.ParamHistory = append(r.Args.SPSA.ParamHistory, []rundb.SPSAHistoryPoint{{Theta: theta, R: 0.001, C: 10}})
		}
		return runcache.PrioNormal, nil
	}
}

func newTask(games int) func(*rundb.Run) (runcache.Prio, error) {
	return func(r *rundb.Run) (runcache.Prio, error) {
		r.Tasks = append(r.Tasks, rundb.Task{NumGames: games, Active: true, Stats: rundb.NewResults(),
			WorkerInfo: r.Tasks[1].WorkerInfo})
		return runcache.PrioHigh, nil
	}
}

// state is what the test compares of a run: its tasks' games and wins, and its SPSA state.
type state struct {
	Tasks   []int
	Wins    []int
	Iter    int
	Theta   float64
	History int
}

func stateOf(r *rundb.Run) state {
	s := state{Iter: r.Args.SPSA.Iter, Theta: r.Args.SPSA.Params[0].Theta, History: len(r.Args.SPSA.ParamHistory)}
	for _, t := range r.Tasks {
		s.Tasks = append(s.Tasks, t.NumGames)
		s.Wins = append(s.Wins, t.Stats.Wins)
	}
	return s
}

func cachedState(t *testing.T, c *runcache.Cache, id rundb.ObjectID) state {
	t.Helper()
	var s state
	if err := c.View(context.Background(), id, func(r *rundb.Run) { s = stateOf(r) }); err != nil {
		t.Fatal(err)
	}
	return s
}

// journalSegments lists the journal's segments: in dir if it is set, else in the database.
func journalSegments(t *testing.T, db *rundb.DB, dir string) []string {
	t.Helper()
	var names []string
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	} else {
		coll := rundbtest.Collection(t, db, "x")
		var err error
		names, err = coll.Database().Client().Database(rundb.JournalDatabase(db.Name())).ListCollectionNames(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
	}
	var segs []string
	for _, n := range names {
		if strings.HasPrefix(n, "journal_") {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	return segs
}

// segmentStores are the two places a journal keeps its segments: the database (dir "") and
// files (a directory per test).
func segmentStores(t *testing.T, test func(t *testing.T, dir string)) {
	t.Run("database", func(t *testing.T) { test(t, "") })
	t.Run("files", func(t *testing.T) { test(t, t.TempDir()) })
}

// A steady stream of changes gathers: forty changes 5 ms apart, under a gather of 300 ms, share
// a few writes. Written as they came, each would have had its own.
func TestJournalGathersAStream(t *testing.T) {
	const changes = 40
	writes := journalWritesFor(t, 300*time.Millisecond, 0, changes, 5*time.Millisecond)
	if writes > changes/2 {
		t.Errorf("%d changes 5 ms apart took %d journal writes under a gather of 300 ms, want at most %d", changes, writes, changes/2)
	}
}

// Sparse changes are not held back to gather: four changes 500 ms apart, under a gather of a
// second, get a write each, at once, instead of waiting for the next ones.
func TestJournalWritesSparseChangesAtOnce(t *testing.T) {
	const changes = 4
	if writes := journalWritesFor(t, time.Second, 0, changes, 500*time.Millisecond); writes != changes {
		t.Errorf("%d changes 500 ms apart took %d journal writes under a gather of a second, want one each", changes, writes)
	}
}

// A journal in files synced at an interval does not gather: with no fsync per batch to share,
// the same stream as above gets a write for most of its changes, each as it comes.
func TestJournalSyncedAtAnIntervalDoesNotGather(t *testing.T) {
	const changes = 40
	writes := journalWritesFor(t, 300*time.Millisecond, time.Hour, changes, 5*time.Millisecond)
	if writes <= changes/2 {
		t.Errorf("%d changes 5 ms apart took %d journal writes synced every hour under a gather of 300 ms, want more than %d", changes, writes, changes/2)
	}
}

// journalWritesFor starts n changes to one run, every interval, without waiting for one before
// the next, on a journal in files gathering for groupWait and synced every syncEvery (0: each
// batch); it checks that all are kept and returns how many writes the journal made.
func journalWritesFor(t *testing.T, groupWait, syncEvery time.Duration, n int, interval time.Duration) int {
	t.Helper()
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	var writes atomic.Int32
	p := startPrimary(t, db, journal.Options{Dir: t.TempDir(), GroupWait: groupWait, SyncEvery: syncEvery,
		BeforeWrite: func() { writes.Add(1) }})
	before := cachedState(t, p.cache, id)
	var wg sync.WaitGroup
	for i := range n {
		if i > 0 {
			time.Sleep(interval)
		}
		wg.Go(func() {
			if err := p.durably(ctx, id, 1, report(1, 100+i, 100, false)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := cachedState(t, p.cache, id); got.Iter != before.Iter+n {
		t.Fatalf("the run holds %d SPSA iterations, want %d", got.Iter, before.Iter+n)
	}
	return int(writes.Load())
}

// A change ChangeDurably stored survives a crash that leaves the run's document behind:
// the next primary finds it in the journal; and replaying again (a crash during that start, or
// after it) changes nothing more.
func TestJournalKeepsAcknowledgedChangesThroughACrash(t *testing.T) {
	segmentStores(t, testJournalKeepsAcknowledgedChangesThroughACrash)
}

func testJournalKeepsAcknowledgedChangesThroughACrash(t *testing.T, dir string) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)

	p1 := startPrimary(t, db, journal.Options{Dir: dir})
	if err := p1.durably(ctx, id, 1, report(1, 120, 102.5, false)); err != nil {
		t.Fatal(err)
	}
	// The document is written here: the records so far are covered by it.
	if err := p1.cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		task   int
		change func(*rundb.Run) (runcache.Prio, error)
	}{
		{-1, newTask(64)}, {2, report(2, 10, 103.5, true)}, {1, report(1, 130, 104.0, false)},
	} {
		if err := p1.durably(ctx, id, step.task, step.change); err != nil {
			t.Fatal(err)
		}
	}
	want := cachedState(t, p1.cache, id)
	stored, err := db.Runs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateOf(stored); slices.Equal(got.Wins, want.Wins) {
		t.Fatalf("the document already holds the last changes (%+v); the test shows nothing", got)
	}
	p1.journal.Close() // the crash: the run is never written again

	p2 := startPrimary(t, db, journal.Options{Dir: dir})
	if got := cachedState(t, p2.cache, id); !equalState(got, want) {
		t.Fatalf("after the crash the run is\n %+v, want\n %+v", got, want)
	}
	if p2.journal.Epoch() != p1.journal.Epoch()+1 {
		t.Errorf("epochs %d then %d, want consecutive", p1.journal.Epoch(), p2.journal.Epoch())
	}
	// The first epoch's segment is gone: what it held now lives in the second's.
	for _, s := range journalSegments(t, db, dir) {
		if strings.HasPrefix(s, "journal_1_") {
			t.Errorf("segment %s of the absorbed epoch is still there", s)
		}
	}
	p2.journal.Close() // a second crash, before the run is written

	p3 := startPrimary(t, db, journal.Options{Dir: dir})
	if got := cachedState(t, p3.cache, id); !equalState(got, want) {
		t.Fatalf("after a second replay the run is\n %+v, want\n %+v", got, want)
	}
	// Once the run is written, its records are no longer needed.
	if err := p3.cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err = db.Runs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateOf(stored); !equalState(got, want) {
		t.Fatalf("written run %+v, want %+v", got, want)
	}
}

func equalState(a, b state) bool {
	return slices.Equal(a.Tasks, b.Tasks) && slices.Equal(a.Wins, b.Wins) && a.Iter == b.Iter && a.Theta == b.Theta && a.History == b.History
}

// Segments whose records every run's document covers are dropped, so the journal stays the size
// of what is not yet written.
func TestJournalDropsCoveredSegments(t *testing.T) {
	segmentStores(t, testJournalDropsCoveredSegments)
}

func testJournalDropsCoveredSegments(t *testing.T, dir string) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	p := startPrimary(t, db, journal.Options{SegmentRecords: 2, Dir: dir})
	for i := range 5 {
		if err := p.durably(ctx, id, 1, report(1, 100+i, 100+float64(i), false)); err != nil {
			t.Fatal(err)
		}
	}
	if records, _ := p.journal.Depth(); records != 5 {
		t.Fatalf("journal depth %d before the write, want 5", records)
	}
	if n := len(journalSegments(t, db, dir)); n != 3 {
		t.Fatalf("%d segments for 5 records of at most 2, want 3", n)
	}
	if err := p.cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	// One more record wakes the writer, which drops the covered segments (not the current one).
	if err := p.durably(ctx, id, 1, report(1, 200, 99, false)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(journalSegments(t, db, dir)) > 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if segs := journalSegments(t, db, dir); len(segs) != 1 {
		t.Fatalf("segments after the run was written: %v, want only the current one", segs)
	}
}

// A primary whose epoch was overtaken can no longer acknowledge a change nor write a run over
// its successor's, and what it wrote after the successor took over is never replayed.
func TestJournalFencesAnOvertakenPrimary(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	clock := newFakeClock()
	old := startPrimary(t, db, journal.Options{Holder: "old", Now: clock.Now})
	if err := old.durably(ctx, id, 1, report(1, 120, 102, false)); err != nil {
		t.Fatal(err)
	}

	// The old primary stands still (paused, or cut off) while its lease lapses; another
	// instance takes it over.
	clock.Advance(time.Minute)
	lease, err := journal.AcquireLease(ctx, db, "new", journal.DefaultLeaseTTL, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	successor := startPrimary(t, db, journal.Options{Holder: "new", Lease: lease, Now: clock.Now})
	want := cachedState(t, successor.cache, id)
	if want.Wins[1] != 120 {
		t.Fatalf("the successor did not replay the acknowledged change: %+v", want)
	}

	// The old primary, resumed, goes on as if nothing happened.
	err = old.durably(ctx, id, 1, report(1, 150, 107, false))
	if !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a change of the overtaken primary: %v, want ErrFenced", err)
	}
	if err := successor.cache.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.cache.FlushAll(ctx); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("the overtaken primary's run write: %v, want ErrFenced", err)
	}
	stored, err := db.Runs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateOf(stored); !equalState(got, want) {
		t.Fatalf("stored run %+v, want the successor's %+v", got, want)
	}

	// A third primary replays the successor's journal, not the refused record.
	successor.journal.Close()
	third := startPrimary(t, db, journal.Options{Holder: "new", Now: clock.Now})
	if got := cachedState(t, third.cache, id); !equalState(got, want) {
		t.Fatalf("third primary sees %+v, want %+v", got, want)
	}
}

// A crash in the middle of a file journal's write leaves a torn last frame: the next primary
// replays every whole record before it (the torn one was never acknowledged) and starts.
func TestFileJournalIgnoresATornLastWrite(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	dir := t.TempDir()
	p1 := startPrimary(t, db, journal.Options{Dir: dir})
	for i := range 3 {
		if err := p1.durably(ctx, id, 1, report(1, 100+i, 100+float64(i), false)); err != nil {
			t.Fatal(err)
		}
	}
	want := cachedState(t, p1.cache, id)
	p1.journal.Close()
	segs := journalSegments(t, db, dir)
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	path := filepath.Join(dir, segs[0])
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The frames written (a length, a checksum, the record) end where the space allocated
	// ahead of them begins, or at the file's end.
	end := 0
	for end+8 <= len(data) && binary.LittleEndian.Uint32(data[end:]) != 0 {
		end += 8 + int(binary.LittleEndian.Uint32(data[end:]))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A frame that says 200 bytes follow, and the 10 that made it to the disk.
	if _, err := f.WriteAt(append([]byte{200, 0, 0, 0, 1, 2, 3, 4}, bytes.Repeat([]byte{7}, 10)...), int64(end)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	p2 := startPrimary(t, db, journal.Options{Dir: dir})
	if got := cachedState(t, p2.cache, id); !equalState(got, want) {
		t.Fatalf("after a torn write the run is\n %+v, want\n %+v", got, want)
	}
}

// The journal moves with the database's setup: a primary on the embedded database (files) takes
// in what one on a shared database journaled, and a primary that cannot read the files of an
// epoch not yet taken in refuses to start rather than lose what that epoch acknowledged.
func TestJournalRecordsAreTakenInAcrossStores(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	dir := t.TempDir()

	p1 := startPrimary(t, db, journal.Options{}) // the database
	if err := p1.durably(ctx, id, 1, report(1, 110, 101, false)); err != nil {
		t.Fatal(err)
	}
	want1 := cachedState(t, p1.cache, id)
	p1.journal.Close()

	p2 := startPrimary(t, db, journal.Options{Dir: dir}) // files
	if got := cachedState(t, p2.cache, id); !equalState(got, want1) {
		t.Fatalf("a primary keeping its journal in files found\n %+v, want what the database's journal held\n %+v", got, want1)
	}
	if err := p2.durably(ctx, id, 1, report(1, 120, 102, true)); err != nil {
		t.Fatal(err)
	}
	want := cachedState(t, p2.cache, id)
	if want.Wins[1] != 120 || want.Theta != 102 {
		t.Fatalf("the second primary holds %+v, want 120 wins for task 1 and theta 102", want)
	}
	p2.journal.Close()
	if segs := journalSegments(t, db, ""); len(segs) != 0 {
		t.Errorf("the database's segments %v are still there after a primary took them in", segs)
	}

	_, err := journal.Open(ctx, db, journal.Options{}) // the database again: cannot read dir
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a journal that cannot read the files of epoch %d opened with %v, want an error naming %s",
			p2.journal.Epoch(), err, dir)
	}
	p3 := startPrimary(t, db, journal.Options{Dir: dir})
	if got := cachedState(t, p3.cache, id); !equalState(got, want) {
		t.Fatalf("after the refused start the run is\n %+v, want\n %+v", got, want)
	}
}

// With SyncEvery, a file journal acknowledges a batch once it is written: a crash of the server
// (here, the next primary starting while this one's journal is still open and never fsynced)
// finds every acknowledged change.
func TestFileJournalAcknowledgesOnceWritten(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	id := journalRun(t, db)
	dir := t.TempDir()
	p1 := startPrimary(t, db, journal.Options{Dir: dir, SyncEvery: time.Hour})
	for i := range 3 {
		if err := p1.durably(ctx, id, 1, report(1, 100+i, 100+float64(i), false)); err != nil {
			t.Fatal(err)
		}
	}
	want := cachedState(t, p1.cache, id)
	p2 := startPrimary(t, db, journal.Options{Dir: dir, SyncEvery: time.Hour})
	if got := cachedState(t, p2.cache, id); !equalState(got, want) {
		t.Fatalf("after the crash the run is\n %+v, want\n %+v", got, want)
	}
}

// Changes arriving together share a write: ten workers reporting at once cost the journal one
// or two writes, not ten, and every change is kept.
func TestJournalGroupsChangesArrivingTogether(t *testing.T) {
	segmentStores(t, func(t *testing.T, dir string) {
		ctx := context.Background()
		db := rundbtest.Open(t)
		id := journalRun(t, db)
		const changes = 10
		var writes atomic.Int32
		var cache atomic.Pointer[runcache.Cache]
		var first sync.Once
		var target int
		// The first write waits until every change is made (each queues its record as it is
		// made, under the run's lock): they arrive together, as a test's goroutines on a loaded
		// machine may not. The first write takes one or more of them, the next the rest.
		holdFirst := func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				var iter int
				if c := cache.Load(); c != nil && c.View(ctx, id, func(r *rundb.Run) { iter = r.Args.SPSA.Iter }) == nil && iter >= target {
					return
				}
			}
			t.Error("the changes were not all made within 10 s")
		}
		p := startPrimary(t, db, journal.Options{Dir: dir, GroupWait: 300 * time.Millisecond,
			BeforeWrite: func() { writes.Add(1); first.Do(holdFirst) }})
		before := cachedState(t, p.cache, id)
		target = before.Iter + changes
		cache.Store(p.cache)
		var wg sync.WaitGroup
		for i := range changes {
			wg.Go(func() {
				if err := p.durably(ctx, id, 1, report(1, 100+i, 100, false)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := writes.Load(); n < 1 || n > 2 {
			t.Errorf("%d changes arriving together took %d journal writes, want one or two", changes, n)
		}
		want := cachedState(t, p.cache, id)
		if want.Iter != before.Iter+changes {
			t.Fatalf("the run holds %d SPSA iterations, want %d", want.Iter, before.Iter+changes)
		}
		p.journal.Close()
		if got := cachedState(t, startPrimary(t, db, journal.Options{Dir: dir}).cache, id); !equalState(got, want) {
			t.Errorf("replayed, the run is\n %+v, want\n %+v", got, want)
		}
	})
}
