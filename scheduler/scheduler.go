package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/scheduler/quarantine"
)

// Config holds the operator's knobs the scheduler uses.
type Config struct {
	TaskSemaphoreSize     int
	DeadTaskTimeout       time.Duration
	ScavengePeriod        time.Duration
	DuplicateWorkerWindow time.Duration
	TaskDuration          time.Duration
	// BooksURL is where books.json is refreshed from; empty: only the database's copy.
	BooksURL string
	// Books are the opening books this server holds and serves to workers: a new run's default
	// book and the only ones a new run may name. Nil: any book name is taken, and the default
	// is Shoal's own.
	Books *books.Store
	// Sources are the mirrors of the engines' repositories: a run submitted by branch is
	// resolved there, and the workers' sources come from there. Nil: runs must give their
	// commits and signatures.
	Sources *gitmirror.Mirrors
	// DBGate runs request_task's database work, which is rare: the first read of the workers
	// collection and its reloads, a blocked worker's record, the event log (the server passes
	// its token pool's Do). The rest of request_task is memory-only and runs without it. Nil
	// runs the work directly.
	DBGate func(ctx context.Context, fn func(context.Context) error) error
	// Notifier is told of the events users may want to hear of: a run finished, approved or
	// stopped, a machine quarantined. Nil tells nobody.
	Notifier Notifier
	// Quarantine is the rule that quarantines a machine whose time losses, crashes or failed
	// tasks stand far outside the fleet's (package quarantine); the zero value is off.
	Quarantine quarantine.Settings
	// Metrics receives the scheduler's counts: tasks assigned, finished and reclaimed,
	// too-busy replies, the scheduling lock's hold time, beat lag and the fleet's size. Nil
	// records nothing.
	Metrics *metrics.Metrics
}

// DefaultTaskSemaphoreSize is how many request_task calls are let in at once unless configured:
// fishtest's five.
const DefaultTaskSemaphoreSize = 5

// ErrRunNotFound means the run asked for does not exist. It is a rundb.ErrNotFound, so callers
// that only care whether something was missing need test for one error.
var ErrRunNotFound = fmt.Errorf("run %w", rundb.ErrNotFound)

// ErrStopped is the answer of a stopped scheduler to every call that would change something:
// the instance is no longer the primary (or is shutting down), and the runs are another's to
// change.
var ErrStopped = errors.New("scheduler stopped: the instance stepped down or is shutting down")

// taskRef names one task of one run.
type taskRef struct {
	run  rundb.ObjectID
	task int
}

// Scheduler owns the primary's scheduling state: the unfinished runs, the worker-to-task map,
// the per-IP connection counts and the runs each worker has built. It hands out tasks, applies
// results and reclaims dead tasks. Safe for concurrent use.
//
// Lock order: requestMu, then a run's lock (held by the run cache's callbacks), then mu (a
// leaf). The quarantine record's lock is a leaf taken with none of these held, so that the
// record's work never lengthens a run's lock, which request_task waits on under requestMu.
// Nothing waits on the database while holding mu or a run's lock; actions and quarantines
// are written after both are released.
type Scheduler struct {
	cfg    Config
	db     store // the database, but for runs (see store.go)
	runs   *runcache.Cache
	quar   *quarantine.Record // the machines' sliding record; see quarantine.go
	logger *slog.Logger
	now    func() time.Time

	// The request_task semaphore: inside counts the calls let in, and at most taskLimit are
	// (TaskSemaphoreSize, changeable while serving); the rest are told at once that the server
	// is busy. peakInside is the most ever inside at once, for tests and metrics.
	inside, peakInside, taskLimit atomic.Int32
	// requestMu serialises the choice of a run and the creation of its task, and guards the
	// buffers the choice reuses from one call to the next.
	requestMu sync.Mutex
	cands     []candidate
	ranks     []rank
	// calls lets in the calls that change state until the scheduler stops; see callGate.
	calls callGate

	mu         sync.Mutex              // guards the fields below
	unfinished map[rundb.ObjectID]bool // changed through addUnfinished and dropUnfinished
	// sortedIDs is unfinished's keys in ID order, kept between calls until the set changes
	// (nil then; see unfinishedIDs): request_task reads it on every call.
	sortedIDs   []rundb.ObjectID
	wtt         map[string]taskRef         // short worker name -> its latest task
	connections map[string]int             // remote address -> active tasks
	workerRuns  map[string]map[string]bool // short worker name -> run ids it has built
	lastRun     map[string]string          // short worker name -> the run of its last task
	archRE      map[string]*regexp.Regexp  // compiled arch filters; nil value: does not compile
	bookSRI     map[string]string          // opening book -> the checksum workers verify
	legacy      map[string]bool            // usernames from before the username rule
	// finishedSince holds the runs that were finished after a change since the contributors'
	// last update took the set (see noteFinished).
	finishedSince map[rundb.ObjectID]bool
	// loadedAt is when Load last loaded the runs: from then on the scheduler serves, and a
	// task's silence counts against its worker (Scavenge).
	loadedAt time.Time
}

// New returns a scheduler over the run cache, and over db for the rest. Call Load before
// serving.
func New(cfg Config, db *rundb.DB, runs *runcache.Cache, logger *slog.Logger) *Scheduler {
	return newScheduler(cfg, storeOf(db), runs, logger)
}

// newScheduler is New over the scheduler's view of the database, which a test may fill with
// stand-ins.
func newScheduler(cfg Config, db store, runs *runcache.Cache, logger *slog.Logger) *Scheduler {
	if cfg.TaskSemaphoreSize < 1 {
		cfg.TaskSemaphoreSize = DefaultTaskSemaphoreSize
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Scheduler{
		cfg: cfg, db: db, runs: runs, logger: logger, now: time.Now,
		quar:        quarantine.New(cfg.Quarantine),
		unfinished:  make(map[rundb.ObjectID]bool),
		wtt:         make(map[string]taskRef),
		connections: make(map[string]int),
		workerRuns:  make(map[string]map[string]bool),
		lastRun:     make(map[string]string),
		archRE:      make(map[string]*regexp.Regexp),
		bookSRI:     make(map[string]string),
		legacy:      make(map[string]bool),

		finishedSince: make(map[rundb.ObjectID]bool),
	}
	s.calls.idle = make(chan struct{})
	s.taskLimit.Store(int32(cfg.TaskSemaphoreSize))
	return s
}

// SetTaskSemaphoreSize changes how many request_task calls are let in at once, while serving:
// a larger size lets more in at once; a smaller one turns callers away until enough of those
// inside have left. Sizes below 1 count as 1.
func (s *Scheduler) SetTaskSemaphoreSize(n int) {
	s.taskLimit.Store(int32(max(1, n)))
}

// TaskSemaphoreSize is the current size of the request_task semaphore.
func (s *Scheduler) TaskSemaphoreSize() int { return int(s.taskLimit.Load()) }

// Cached reports whether a run is in the run cache: beat, request_spsa and the task-owner check
// of a cached run need no database work.
func (s *Scheduler) Cached(id rundb.ObjectID) bool { return s.runs.Cached(id) }

// Snapshot returns a copy of a run as the scheduler sees it.
func (s *Scheduler) Snapshot(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error) {
	r, err := s.runs.Snapshot(ctx, id)
	if errors.Is(err, rundb.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return r, err
}

// UnfinishedRuns returns every unfinished run as the scheduler sees it now, oldest first,
// without tasks, bad tasks and SPSA history: the run listings' view, fresher than the
// database, which the run cache writes behind.
func (s *Scheduler) UnfinishedRuns(ctx context.Context) ([]*rundb.Run, error) {
	ids := s.unfinishedIDs()
	runs := make([]*rundb.Run, 0, len(ids))
	for _, id := range ids {
		r, err := s.runs.Listing(ctx, id)
		switch {
		case errors.Is(err, rundb.ErrNotFound):
			continue // purged meanwhile
		case err != nil:
			return nil, fmt.Errorf("list unfinished runs: %w", err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// ActiveTask is a task being played: where, by whom, and when it last reported.
type ActiveTask struct {
	RunID       rundb.ObjectID
	NewTag      string // the run's test branch, to name it
	TaskID      int
	Worker      rundb.WorkerInfo
	LastUpdated time.Time
}

// ActiveTasks lists the active tasks of the unfinished runs, oldest run first, reading each
// run under its lock without copying the rest of it (the machines table asks for this on
// every homepage view and live update).
func (s *Scheduler) ActiveTasks(ctx context.Context) ([]ActiveTask, error) {
	var out []ActiveTask
	for _, id := range s.unfinishedIDs() {
		err := s.runs.View(ctx, id, func(r *rundb.Run) {
			for i, t := range r.Tasks {
				if !t.Active {
					continue
				}
				w := t.WorkerInfo
				w.GCCVersion, w.PythonVersion = slices.Clone(w.GCCVersion), slices.Clone(w.PythonVersion)
				out = append(out, ActiveTask{RunID: r.ID, NewTag: r.Args.NewTag, TaskID: i, Worker: w, LastUpdated: t.LastUpdated})
			}
		})
		switch {
		case errors.Is(err, rundb.ErrNotFound):
			continue // purged meanwhile
		case err != nil:
			return nil, fmt.Errorf("list active tasks: %w", err)
		}
	}
	return out, nil
}

// AddRun stores a new run (built by BuildRun) and makes it schedulable once approved.
func (s *Scheduler) AddRun(ctx context.Context, r *rundb.Run) error {
	if err := s.calls.enter(); err != nil {
		return err
	}
	defer s.calls.leave()
	if err := s.runs.Create(ctx, r); err != nil {
		return err
	}
	if !r.Finished {
		s.mu.Lock()
		s.addUnfinished(r.ID)
		s.mu.Unlock()
	}
	return nil
}

// LegacyUsername reports whether name is one of the usernames fishtest accepted before its
// username rule (kvstore legacy_usernames), which workers may still log in with.
func (s *Scheduler) LegacyUsername(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.legacy[name]
}

// unfinishedIDs returns the unfinished runs, oldest first (ties in the scheduling order then
// go to the older run, and tests are repeatable). The slice is shared between callers until
// the set changes: they must not change it.
func (s *Scheduler) unfinishedIDs() []rundb.ObjectID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sortedIDs == nil {
		// A new slice, never the old one's array: earlier callers may still be reading it.
		ids := make([]rundb.ObjectID, 0, len(s.unfinished))
		for id := range s.unfinished {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, rundb.ObjectID.Compare)
		s.sortedIDs = ids
	}
	return s.sortedIDs
}

// addUnfinished and dropUnfinished change the unfinished set, with mu held.
func (s *Scheduler) addUnfinished(id rundb.ObjectID) {
	if !s.unfinished[id] {
		s.unfinished[id] = true
		s.sortedIDs = nil
	}
}

func (s *Scheduler) dropUnfinished(id rundb.ObjectID) {
	if _, ok := s.unfinished[id]; ok {
		delete(s.unfinished, id)
		s.sortedIDs = nil
	}
}

// noteFinished remembers, for the contributors' next update, that a change left run id finished:
// that update reads these runs by ID instead of looking for finished runs among them all,
// which on the embedded database means reading every run.
func (s *Scheduler) noteFinished(ids ...rundb.ObjectID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.finishedSince[id] = true
	}
}

// takeFinished returns and forgets the runs noteFinished has remembered, in ID order.
func (s *Scheduler) takeFinished() []rundb.ObjectID {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.finishedSince))
	clear(s.finishedSince)
	s.mu.Unlock()
	slices.SortFunc(ids, rundb.ObjectID.Compare)
	return ids
}

// noting wraps a change of a run so that a run it leaves finished is noted (noteFinished). It
// runs under the run's lock, and takes mu, which comes after it in the lock order.
func (s *Scheduler) noting(fn func(*rundb.Run) (runcache.Prio, error)) func(*rundb.Run) (runcache.Prio, error) {
	return func(r *rundb.Run) (runcache.Prio, error) {
		prio, err := fn(r)
		if r.Finished {
			s.noteFinished(r.ID)
		}
		return prio, err
	}
}

// modify changes a run through the cache, written behind (runcache.Cache.Change), mapping a
// missing run to ErrRunNotFound.
func (s *Scheduler) modify(ctx context.Context, id rundb.ObjectID, fn func(*rundb.Run) (runcache.Prio, error)) error {
	err := s.runs.Change(ctx, id, s.noting(fn))
	if errors.Is(err, rundb.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return err
}

// modifyStored is modify for a change acknowledged to a worker: it returns once the change is
// made, with stored, which waits until it is stored (see runcache.Cache.ChangeDurably). task is
// the task the change is about, or -1.
func (s *Scheduler) modifyStored(ctx context.Context, id rundb.ObjectID, task int, fn func(*rundb.Run) (runcache.Prio, error)) (stored func(context.Context) error, err error) {
	stored, err = s.runs.ChangeDurably(ctx, id, task, s.noting(fn))
	if errors.Is(err, rundb.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return stored, err
}

// dbGate runs fn through Config.DBGate, or directly when there is none.
func (s *Scheduler) dbGate(ctx context.Context, fn func(context.Context) error) error {
	if s.cfg.DBGate == nil {
		return fn(ctx)
	}
	return s.cfg.DBGate(ctx, fn)
}

// writeActions stores actions collected while locks were held; a failure is logged, as losing
// an event-log line must not fail the worker's request.
func (s *Scheduler) writeActions(ctx context.Context, actions []*rundb.Action) {
	for _, a := range actions {
		if err := s.db.actions.Insert(context.WithoutCancel(ctx), a); err != nil {
			s.logger.Warn("write action", "action", a.Action, "run_id", a.RunID, "err", err)
		}
	}
}

// writeEvents stores what a change collected: its actions, then the deliveries that tell its
// users.
func (s *Scheduler) writeEvents(ctx context.Context, ev *events) {
	s.writeActions(ctx, ev.actions)
	for _, n := range ev.notes {
		s.notify(ctx, n)
	}
}

// notify queues a notification; a failure is logged, as the event itself stands.
func (s *Scheduler) notify(ctx context.Context, ev notify.Event) {
	if s.cfg.Notifier == nil {
		return
	}
	if err := s.cfg.Notifier.Enqueue(ctx, ev); err != nil {
		s.logger.Warn("queue notification", "kind", ev.Kind, "user", ev.Username, "err", err)
	}
}

// Notifier queues what users are to be told (notify.Outbox).
type Notifier interface {
	Enqueue(ctx context.Context, ev notify.Event) error
}

// callGate counts the calls in progress that may change state (every exported method that
// writes, from RequestTask to ModifyRun), so that stopping can turn new ones away and wait for
// the rest: once close has returned, nothing the callers started writes to the database. Every
// worker call passes it, so it takes no lock: an atomic count and a flag.
//
// The periodic jobs do not pass it: they belong to the Primary, which stops them itself.
type callGate struct {
	inside atomic.Int64
	closed atomic.Bool
	idle   chan struct{} // closed, once, when closed is set and no call is inside
	once   sync.Once
}

// enter lets a call in, or returns ErrStopped once the gate is closed. A call let in must leave.
func (g *callGate) enter() error {
	g.inside.Add(1)
	if g.closed.Load() {
		g.leave()
		return ErrStopped
	}
	return nil
}

// leave ends a call let in by enter.
func (g *callGate) leave() {
	// A call counted before closed was set has seen it clear and is running; one counted
	// after sees it set and leaves at once. So a count of zero after close means nobody is
	// inside.
	if g.inside.Add(-1) == 0 && g.closed.Load() {
		g.once.Do(func() { close(g.idle) })
	}
}

// close turns every later call away and waits for those inside to leave, until ctx ends; then
// it returns an error saying how many are still running. It may be called more than once.
func (g *callGate) close(ctx context.Context) error {
	g.closed.Store(true)
	if g.inside.Load() == 0 {
		g.once.Do(func() { close(g.idle) })
	}
	select {
	case <-g.idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("scheduler calls still running at the deadline: %d: %w", g.inside.Load(), ctx.Err())
	}
}
