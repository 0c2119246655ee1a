package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
)

// PrimaryConfig is what a Primary needs besides the database: the scheduler's knobs (Metrics
// among them, which the run cache reports to as well) and how the run cache writes behind and
// forgets.
type PrimaryConfig struct {
	Config
	// FlushPeriod is how often the run cache writes one changed run; 0 means one second.
	FlushPeriod time.Duration
	// CacheIdle is how long a clean run nobody works on stays cached, looked for every
	// CacheCleanPeriod; 0 means fishtest's values, 300 s and 60 s.
	CacheIdle, CacheCleanPeriod time.Duration
	// Journal, if set, makes the run cache journal what is acknowledged to workers, fence its
	// writes with the journal's lease, and replay the journal as it loads (package journal). The
	// Primary does not close it.
	Journal *journal.Journal
	// WriteHook, if set, is called as each run write begins (fault-injection tests).
	WriteHook func()
	// Jobs are further periodic jobs that run only while this instance is the primary (the
	// notifications' sender), started and stopped with the scheduler's.
	Jobs []Job
}

// stopCallsGrace is the longest Stop waits for scheduler calls in progress (requests still
// running after the server's own drain) before it writes the runs anyway: the final write
// matters more than a call stuck on the database.
const stopCallsGrace = 10 * time.Second

// Primary is everything this instance owns while it is the primary: the run cache, the
// Scheduler over it, the periodic jobs (the scheduler's, the run-cache flush and the eviction
// of idle runs) and the one-off start-up work. Start brings it up; Stop takes it down, writes
// what is dirty, and from then on nothing of it writes to the database, so that a primary can
// step down at run time and leave the runs to its successor.
//
// A Primary runs once: a new term as primary takes a new Primary. Safe for concurrent use;
// a Stop during Start cuts the loading short, and Start then returns an error.
type Primary struct {
	cfg    PrimaryConfig
	db     *rundb.DB
	logger *slog.Logger
	// life is the context of every goroutine the Primary starts; end cancels it, first thing
	// in Stop, so that a Start still loading stops waiting on the database too.
	life context.Context
	end  context.CancelFunc

	runs  atomic.Pointer[runcache.Cache] // set once Start has loaded the runs
	sched atomic.Pointer[Scheduler]

	mu      sync.Mutex // held throughout Start and Stop, so they never interleave
	started bool       // Start has been called
	stopped bool       // Stop has been called, or Start failed
	jobs    *Periodic
	oneOff  sync.WaitGroup // the start-up work (hashing imported passwords)
}

// NewPrimary returns a Primary over db that has not started. logger is the instance's; the
// run cache and the scheduler log with components of their own.
func NewPrimary(cfg PrimaryConfig, db *rundb.DB, logger *slog.Logger) *Primary {
	if cfg.FlushPeriod <= 0 {
		cfg.FlushPeriod = time.Second
	}
	if cfg.CacheIdle <= 0 {
		cfg.CacheIdle = 300 * time.Second
	}
	if cfg.CacheCleanPeriod <= 0 {
		cfg.CacheCleanPeriod = 60 * time.Second
	}
	if logger == nil {
		logger = slog.Default()
	}
	life, end := context.WithCancel(context.Background())
	return &Primary{cfg: cfg, db: db, logger: logger, life: life, end: end}
}

// Start creates the run cache and the scheduler, loads the unfinished runs into them, and
// starts the periodic jobs and the start-up work. It returns once the scheduler can serve
// request_task. ctx bounds the loading only; what Start leaves running lasts until Stop. A
// Start that fails leaves nothing running and the Primary stopped; what the loading wrote
// before it failed (runs it corrected or found decided) stays written.
func (p *Primary) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped:
		return errors.New("start primary: already stopped")
	case p.started:
		return errors.New("start primary: already started")
	}
	p.started = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.life, cancel)()

	schedLogger := p.logger.With("component", "scheduler")
	runs := runcache.New(p.db.Runs, runcache.Options{Now: time.Now, Logger: p.logger.With("component", "runcache"),
		Metrics: p.cfg.Metrics, Journal: p.cfg.Journal, BeforeWrite: p.cfg.WriteHook})
	sched := New(p.cfg.Config, p.db, runs, schedLogger)
	if err := sched.Load(ctx); err != nil {
		p.stopped = true
		p.end()
		return fmt.Errorf("load unfinished runs: %w", err)
	}
	p.logger.Info("run cache loaded", "cached_runs", runs.Len())
	p.runs.Store(runs)
	p.sched.Store(sched)
	p.hashLegacyPasswords()
	jobs := append(sched.Jobs(), p.cfg.Jobs...)
	p.jobs = Start(p.life, schedLogger, append(jobs, Job{
		Name: "flush run cache", Period: p.cfg.FlushPeriod, MinDelay: p.cfg.FlushPeriod, Jitter: 0.05,
		Run: func(ctx context.Context) error {
			_, _, err := runs.FlushOne(ctx)
			return err
		},
	}, Job{
		Name: "evict idle runs", Period: p.cfg.CacheCleanPeriod, Jitter: 0.05,
		Run: func(context.Context) error {
			runs.Evict(p.cfg.CacheIdle)
			return nil
		},
	})...)
	return nil
}

// hashLegacyPasswords replaces, in the background, every plaintext password a database imported
// from fishtest holds with its hash (a bcrypt hash each, so a large import takes minutes: the
// server serves meanwhile, and a plaintext still logs in, and is hashed, at its first login).
// It is the primary's work so that one instance does it, and a standby that takes over does it
// if the old primary had not finished.
func (p *Primary) hashLegacyPasswords() {
	p.oneOff.Add(1)
	go func() {
		defer p.oneOff.Done()
		start := time.Now()
		n, err := p.db.Users.HashLegacyPasswords(p.life)
		switch {
		case err != nil && p.life.Err() == nil:
			p.logger.Warn("hashing imported plaintext passwords stopped; the rest are hashed at their first login or the next start",
				"hashed", n, "err", err)
		case n > 0:
			p.logger.Info("hashed imported plaintext passwords", "users", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}()
}

// Scheduler is the primary's scheduler, or nil before Start has loaded the runs. After Stop it
// answers every call that would change something with ErrStopped.
func (p *Primary) Scheduler() *Scheduler { return p.sched.Load() }

// RunCache is the primary's run cache, or nil before Start has loaded the runs; live pages
// wait on its Changed.
func (p *Primary) RunCache() *runcache.Cache { return p.runs.Load() }

// Stop takes the primary down: it turns away new scheduler calls that would change something
// and waits for those in progress (at most stopCallsGrace), stops every goroutine Start began
// and waits for them, then writes every dirty run, retrying failed run writes while ctx allows.
// Once Stop returns, nothing of the Primary writes to the database. Its error joins the runs it
// could not write (lost when the process exits) and the calls that did not end in time. Stop
// may be called more than once, and on a Primary that never started; only the first call does
// anything.
func (p *Primary) Stop(ctx context.Context) error { return p.stop(ctx, true) }

// Abandon is Stop for a primary that lost its lease: it stops every call and goroutine the same
// way but writes no run, since its successor owns the runs (what it acknowledged is in the
// journal the successor replayed; its writes would be refused anyway).
func (p *Primary) Abandon(ctx context.Context) error { return p.stop(ctx, false) }

func (p *Primary) stop(ctx context.Context, write bool) error {
	p.end()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	sched, runs := p.sched.Load(), p.runs.Load()
	if sched == nil {
		return nil // never started
	}
	var errs []error
	callsCtx, cancel := context.WithTimeout(ctx, stopCallsGrace)
	err := sched.calls.close(callsCtx)
	cancel()
	if err != nil {
		p.logger.Warn("stopping the scheduler", "err", err)
		errs = append(errs, err)
	}
	p.jobs.Stop()
	p.oneOff.Wait()
	if !write {
		return errors.Join(errs...)
	}

	// A failed write keeps its run dirty; try again while the deadline allows, since whatever
	// is still dirty when the process exits is lost.
	for attempt := 1; ; attempt++ {
		err := runs.FlushAll(ctx)
		if err == nil {
			break
		}
		p.logger.Error("writing the dirty runs failed", "attempt", attempt, "dirty", runs.Dirty(), "err", err)
		if attempt == 3 || ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("flush runs: %w", err))
			break
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return errors.Join(errs...)
}
