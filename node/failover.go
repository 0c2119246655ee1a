package node

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/scheduler/quarantine"
)

// primaryRole is what an instance runs while it is the primary: the journal (and with it the
// lease) and the scheduler.Primary (run cache, scheduler, jobs). It starts when the instance
// takes the lease (at start or as a standby) and stops when the instance shuts down or loses
// the lease.
type primaryRole struct {
	*scheduler.Primary
	journal *journal.Journal // nil with journal = false (no lease, no failover)
}

// leasePoll is how often a standby looks at the primary's lease.
const leasePoll = 500 * time.Millisecond

// holder names this instance in the lease: its host and address, so that the same instance
// restarted takes its own lease back at once, and any other waits for it to lapse.
func (inst *Instance) holder() string { return inst.leaseHolder }

// leaseHolder is the lease holder name of an instance listening on addr.
func leaseHolder(addr string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + "/" + addr
}

// becomePrimary loads the runs and starts the scheduler under lease (from AcquireLease; unused
// without a journal): the journal replays what the runs' documents lack, the scheduler rebuilds
// its state, and the periodic jobs start. It returns the running role; the caller gives the
// server its scheduler.
func (inst *Instance) becomePrimary(ctx context.Context, lease journal.Lease) (_ *primaryRole, err error) {
	cfg, logger := inst.cfg, inst.logger
	start := time.Now()
	p := &primaryRole{}
	defer func() {
		if err != nil && p.journal != nil {
			p.journal.Close()
		}
	}()
	pcfg := scheduler.PrimaryConfig{Config: scheduler.Config{
		Metrics:           inst.metrics,
		TaskSemaphoreSize: cfg.TaskSemaphoreSize,
		DeadTaskTimeout:   cfg.DeadTaskTimeout, ScavengePeriod: cfg.ScavengePeriod,
		DuplicateWorkerWindow: cfg.DuplicateWorkerWindow, TaskDuration: cfg.TaskDuration,
		BooksURL: cfg.BooksURL, DBGate: inst.tokens.Do, Books: inst.books, Sources: inst.mirrors,
		Quarantine: quarantineSettings(cfg),
	}, FlushPeriod: cfg.FlushPeriod}
	if pcfg.Notifier, pcfg.Jobs, err = inst.notifications(); err != nil {
		return nil, err
	}
	if cfg.Journal {
		p.journal, err = journal.Open(ctx, inst.db, journal.Options{Lease: lease, Holder: inst.holder(),
			LeaseTTL: cfg.LeaseTTL, OnFenced: inst.fenced, Dir: inst.db.JournalDir(), SyncEvery: cfg.JournalFsync,
			GroupWait: cfg.JournalGroupWait, Metrics: inst.metrics})
		if err != nil {
			return nil, err
		}
		pcfg.Journal = p.journal
	} else {
		logger.Warn("journal off: results acknowledged since a run's last write are lost if the server crashes, and no standby can take over")
	}
	pcfg.WriteHook = inst.writeFault()
	p.Primary = scheduler.NewPrimary(pcfg, inst.db, logger)
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	epoch := int64(0)
	if p.journal != nil {
		epoch = p.journal.Epoch()
	}
	logger.Info("primary: runs loaded, scheduler started", "cached_runs", p.RunCache().Len(), "epoch", epoch,
		"took", time.Since(start).Round(time.Millisecond))
	inst.metrics.SetPrimary(true)
	return p, nil
}

// finish stops the role: with save (a shutdown) the Primary writes worker_runs and every changed
// run and the lease is released, so that a standby takes over at once; without (a primary that
// lost its lease) nothing is written, its writes would be refused. Then the journal closes.
// Nothing of the role writes to the database afterwards.
func (p *primaryRole) finish(ctx context.Context, inst *Instance, save bool) []error {
	var errs []error
	if save {
		if err := p.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if err := p.Abandon(ctx); err != nil {
		inst.logger.Warn("stepping down", "err", err)
	}
	if p.journal != nil {
		p.journal.Close()
		if save && len(errs) == 0 {
			// Everything is written: a standby may take over at once.
			if err := p.journal.Release(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	inst.metrics.SetPrimary(false)
	return errs
}

// fenced is the journal's OnFenced, which must not block: it starts the step-down, which
// closes that journal, in a goroutine of its own that Shutdown joins. Once Shutdown has begun
// it starts none: Shutdown finishes the role itself, and the fence refuses its writes.
func (inst *Instance) fenced(err error) {
	inst.roleMu.Lock()
	defer inst.roleMu.Unlock()
	if inst.stopping {
		return
	}
	inst.steps.Go(func() { inst.stepDown(err) })
}

// stepDown follows fenced: another instance took the lease. The server stops
// scheduling at once (worker calls are told to retry, and nginx sends them on to the new
// primary), the role stops without writing, and the instance waits as a standby.
func (inst *Instance) stepDown(err error) {
	inst.roleMu.Lock()
	p := inst.primary
	inst.primary = nil
	stopping := inst.stopping
	inst.roleMu.Unlock()
	if p == nil {
		return
	}
	inst.logger.Error("stepping down: another instance is the primary now", "err", err)
	inst.srv.Demote("standby", dbRuns{inst.db})
	p.finish(context.Background(), inst, false)
	if !stopping {
		inst.watchLease()
	}
}

// watchLease starts the standby's loop: every leasePoll it tries to take the primary's lease,
// which succeeds once the lease has gone unrenewed for its time to live; then the instance
// becomes the primary. Shutdown stops the loop.
func (inst *Instance) watchLease() {
	inst.roleMu.Lock()
	defer inst.roleMu.Unlock()
	if inst.stopping || inst.watching != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	inst.watching = cancel
	inst.watchers.Add(1)
	go func() {
		defer inst.watchers.Done()
		inst.followLease(ctx)
	}()
}

func (inst *Instance) followLease(ctx context.Context) {
	t := time.NewTicker(leasePoll)
	defer t.Stop()
	var lastHolder string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lease, err := journal.AcquireLease(ctx, inst.db, inst.holder(), inst.cfg.LeaseTTL, time.Now())
		if errors.Is(err, journal.ErrLeaseHeld) {
			if lease.Holder != lastHolder {
				inst.logger.Info("standby: the primary holds its lease", "primary", lease.Holder, "epoch", lease.Epoch)
				lastHolder = lease.Holder
			}
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				inst.logger.Warn("standby: cannot read the primary's lease", "err", err)
			}
			continue
		}
		inst.logger.Warn("standby: the primary's lease lapsed; taking over", "previous", lastHolder, "epoch", lease.Epoch)
		p, err := inst.becomePrimary(ctx, lease)
		if err != nil {
			// The lease is ours but goes unrenewed: another standby (or this one, next
			// time round) takes it once it lapses.
			inst.logger.Error("standby: taking over failed", "err", err)
			continue
		}
		inst.roleMu.Lock()
		if inst.stopping {
			inst.roleMu.Unlock()
			p.finish(context.Background(), inst, true)
			return
		}
		inst.primary, inst.watching = p, nil
		semaphore := inst.semaphoreSize // a reload's size, if one came while this instance stood by
		inst.roleMu.Unlock()
		p.Scheduler().SetTaskSemaphoreSize(semaphore)
		inst.srv.Promote(p.Scheduler(), p.Scheduler(), p.RunCache().Changed)
		inst.logger.Warn("serving as the primary", "epoch", lease.Epoch)
		return
	}
}

// CrashInWriteEnv, in a binary built with the faultinject tag (the crash tests'), makes the
// server kill itself (SIGKILL) during its Nth run write, so that a test can show what a crash in
// the middle of one leaves. Other builds ignore it (faultinject_off.go).
const CrashInWriteEnv = "SHOAL_TEST_CRASH_IN_RUN_WRITE"

// quarantineSettings are the quarantine rule's thresholds from the configuration.
func quarantineSettings(cfg config.Config) quarantine.Settings {
	return quarantine.Settings{Enabled: cfg.Quarantine, P: cfg.QuarantineP,
		MinGames: cfg.QuarantineMinGames, MinTasks: cfg.QuarantineMinTasks, MinRuns: cfg.QuarantineMinRuns,
		MinRatio: cfg.QuarantineMinRatio, RateFloor: cfg.QuarantineRateFloor, FailureFloor: cfg.QuarantineFailureFloor}
}
