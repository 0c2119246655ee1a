package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// clock is a test clock moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func testConfig() Config {
	return Config{TaskSemaphoreSize: 5, DeadTaskTimeout: 360 * time.Second,
		ScavengePeriod: time.Minute, DuplicateWorkerWindow: 120 * time.Second, TaskDuration: 1800 * time.Second}
}

// newTestScheduler returns a scheduler over a fresh database with a hand-moved clock.
func newTestScheduler(t testing.TB) (*Scheduler, *clock) {
	t.Helper()
	db := rundbtest.Open(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(testConfig(), db, runcache.New(db.Runs, runcache.Options{Now: clk.now, Logger: logger}), logger)
	s.now = clk.now
	testDBs.Store(s, db)
	t.Cleanup(func() { testDBs.Delete(s) })
	return s, clk
}

// testDBs holds the database under each test's scheduler, whose own view of it is narrower
// than what a test checks (the actions a call wrote, say).
var testDBs sync.Map // *Scheduler -> *rundb.DB

// dbOf is the database under a scheduler of newTestScheduler.
func dbOf(s *Scheduler) *rundb.DB {
	db, _ := testDBs.Load(s)
	return db.(*rundb.DB)
}

// runSpec describes a test run.
type runSpec struct {
	numGames   int
	sprt       bool
	batch      int
	threads    int
	tc         string
	priority   float64
	approved   bool
	autoPurge  bool
	username   string
	options    string
	archFilter string
	compiler   string
	spsaParams int
}

func (sp runSpec) build(now time.Time) *rundb.Run {
	if sp.threads == 0 {
		sp.threads = 1
	}
	if sp.tc == "" {
		sp.tc = "10+0.1"
	}
	if sp.username == "" {
		sp.username = "alice"
	}
	if sp.options == "" {
		sp.options = "Hash=16"
	}
	r := &rundb.Run{
		ID: rundb.NewObjectID(), Version: rundb.RunVersion, StartTime: now, LastUpdated: now, TCBase: 10,
		Approved: sp.approved, Results: rundb.NewResults(), Tasks: []rundb.Task{}, BadTasks: []rundb.Task{},
		Args: rundb.RunArgs{
			BaseTag: "master", NewTag: "patch", NumGames: sp.numGames, TC: sp.tc, NewTC: sp.tc, Threads: sp.threads,
			Book: "UHO_Lichess_4852_v1.epd", BookDepth: "8", BaseOptions: sp.options, NewOptions: sp.options,
			Username: sp.username, Throughput: 100, ITP: 100, Priority: sp.priority, AutoPurge: sp.autoPurge,
			ArchFilter: sp.archFilter, Compiler: sp.compiler,
		},
	}
	if sp.approved {
		r.Approver = "bob"
	}
	if sp.sprt {
		if sp.batch == 0 {
			sp.batch = 16
		}
		r.Args.NumGames = 800000
		r.Args.SPRT = &rundb.SPRT{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, EloModel: "normalized",
			BatchSize: sp.batch, LowerBound: math.Log(0.05 / 0.95), UpperBound: math.Log(0.95 / 0.05),
			Overshoot: &rundb.Overshoot{}}
	}
	if sp.spsaParams > 0 {
		r.Args.SPSA = &rundb.SPSA{A: 100, Alpha: 0.602, Gamma: 0.101, NumIter: sp.numGames / 2}
		for i := range sp.spsaParams {
			r.Args.SPSA.Params = append(r.Args.SPSA.Params, rundb.SPSAParam{Name: fmt.Sprintf("P%d", i),
				Start: 100, Min: 0, Max: 200, CEnd: 10, REnd: 0.002, C: 30, AEnd: 0.2, A: 50, Theta: 100})
		}
	}
	return r
}

func addRun(t testing.TB, s *Scheduler, sp runSpec) rundb.ObjectID {
	t.Helper()
	r := sp.build(s.now())
	if err := s.AddRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// worker returns the worker_info of test worker n (distinct names and keys), at 10.0.0.n.
func worker(n int) rundb.WorkerInfo {
	return rundb.WorkerInfo{
		Uname: "Linux", Architecture: []string{"64bit", "ELF"}, Concurrency: 8, MaxMemory: 16000, MinThreads: 1,
		Username: "worker", Version: 325, PythonVersion: []int{3, 11, 2}, GCCVersion: []int{12, 2, 0}, Compiler: "g++",
		UniqueKey:  fmt.Sprintf("w%07d-5a28-4b7d-b27b-d78d97ecf11a", n),
		WorkerArch: "x86-64-avx2", ARCH: "?", NPS: 1e6, RemoteAddr: fmt.Sprintf("10.0.%d.%d", n/250, n%250), CountryCode: "?",
	}
}

func request(t testing.TB, s *Scheduler, wi rundb.WorkerInfo) TaskReply {
	t.Helper()
	reply, err := s.RequestTask(context.Background(), wi, 16, "http://shoal.test")
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func snapshot(t testing.TB, s *Scheduler, id rundb.ObjectID) *rundb.Run {
	t.Helper()
	r, err := s.Snapshot(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkInvariants asserts fishtest's aggregate invariants (reference 6.1) on a run.
func checkInvariants(t testing.TB, r *rundb.Run) {
	t.Helper()
	results := computeResults(r)
	if !sameResults(results, r.Results) {
		t.Errorf("results %+v, tasks sum to %+v", r.Results, results)
	}
	cores, workers, committed, total := 0, 0, 0, 0
	for _, tk := range r.Tasks {
		total += tk.NumGames
		if tk.Active {
			cores += tk.WorkerInfo.Concurrency
			workers++
			committed += tk.NumGames
		} else {
			committed += played(tk.Stats)
		}
	}
	if cores != r.Cores || workers != r.Workers || committed != r.CommittedGames || total != r.TotalGames {
		t.Errorf("aggregates cores %d workers %d committed %d total %d; tasks say %d %d %d %d",
			r.Cores, r.Workers, r.CommittedGames, r.TotalGames, cores, workers, committed, total)
	}
	if r.Finished && (r.Workers != 0 || r.Cores != 0 || r.NPS != 0 || r.GamesPerMinute != 0) {
		t.Errorf("finished run with workers %d cores %d nps %g", r.Workers, r.Cores, r.NPS)
	}
	green, yellow := computeFlags(r)
	if green != r.IsGreen || yellow != r.IsYellow {
		t.Errorf("flags green=%v yellow=%v, computed %v %v", r.IsGreen, r.IsYellow, green, yellow)
	}
	if !r.Finished && !undecided(r) {
		t.Error("an unfinished run is decided")
	}
}

// pairs returns cumulative stats of n game pairs, all draws but w winning pairs.
func pairs(n, w int) rundb.Results {
	return rundb.Results{Wins: 2 * w, Draws: 2 * (n - w), Pentanomial: []int{0, 0, n - w, 0, w}}
}
