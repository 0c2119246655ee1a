package scheduler

import (
	"context"
	"errors"

	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler/quarantine"
)

// QuarantineAction is the event log's kind of the line written when a machine is quarantined:
// Username the server's, User the machine's owner, Worker its short name, Message the reason.
// The workers page writes one when an approver lifts a quarantine (Message "lifted (...)").
// The machine's owner is told of a quarantine (not of a lift) by applyQuarantines.
const QuarantineAction = "quarantine"

// quarantined is a verdict of the quarantine rule and the user who runs the machine, stored
// once the run's lock is released (applyQuarantines).
type quarantined struct {
	verdict  *quarantine.Verdict
	username string
}

// machineReport is what a task's report tells the quarantine record about its machine: games
// with time losses and crashes among them (Games), or the task's end (TaskEnded). It is
// collected under the run's lock and given to the record once the lock is released, so that
// no run's lock, and so no request_task choosing among the runs, waits on the record's.
type machineReport struct {
	machine, run, username     string
	games, timeLosses, crashes int
	ended, failed              bool
}

func (e *events) report(m machineReport) {
	if e.reports == nil {
		e.reports = e.reportBuf[:0]
	}
	e.reports = append(e.reports, m)
}

// noteGames notes, for the quarantine record, a task's accepted report: the games, time
// losses and crashes it adds to the task's previous one. Called under the run's lock.
func (s *Scheduler) noteGames(r *rundb.Run, t *rundb.Task, st rundb.Results, ev *events) {
	if !s.cfg.Quarantine.Enabled {
		return
	}
	games := played(st) - played(t.Stats)
	timeLosses := max(0, st.TimeLosses-t.Stats.TimeLosses)
	crashes := max(0, st.Crashes-t.Stats.Crashes)
	if games < 0 || games+timeLosses+crashes == 0 {
		return // the record would ignore it
	}
	ev.report(machineReport{machine: t.WorkerInfo.ShortName(), run: r.ID.Hex(), username: t.WorkerInfo.Username,
		games: games, timeLosses: timeLosses, crashes: crashes})
}

// noteTaskEnd notes, for the quarantine record, that a task ended, played out or failed by
// its machine (failed_task, stop_run). Called under the run's lock.
func (s *Scheduler) noteTaskEnd(r *rundb.Run, taskID int, failed bool, ev *events) {
	if !s.cfg.Quarantine.Enabled {
		return
	}
	w := r.Tasks[taskID].WorkerInfo
	ev.report(machineReport{machine: w.ShortName(), run: r.ID.Hex(), username: w.Username, ended: true, failed: failed})
}

// tellRecord gives the quarantine record what a call noted, in order, and collects its
// verdicts. Called with no lock held.
func (s *Scheduler) tellRecord(ev *events) {
	for _, m := range ev.reports {
		var v *quarantine.Verdict
		if m.ended {
			v = s.quar.TaskEnded(m.machine, m.run, m.failed)
		} else {
			v = s.quar.Games(m.machine, m.run, m.games, m.timeLosses, m.crashes)
		}
		if v != nil {
			ev.quarantines = append(ev.quarantines, quarantined{v, m.username})
		}
	}
	ev.reports = ev.reports[:0]
}

// applyQuarantines stores the quarantines the rule decided during a call, once the locks are
// released: each machine's record in the workers collection becomes a block that only an
// approver may lift, with the reason as its message (which request_task's banner shows), and
// the event log gets a quarantine line. A machine someone blocked already keeps that block.
// Rare: a machine is quarantined once until lifted. The caller holds a token of the database
// pool (the worker call's), as for writeActions.
func (s *Scheduler) applyQuarantines(ctx context.Context, ev *events) {
	s.tellRecord(ev)
	for _, q := range ev.quarantines {
		name := q.verdict.Machine
		reason := q.verdict.Reason()
		// The worker calls that decide a quarantine hold a token of the database pool already.
		err := func(ctx context.Context) error {
			w, err := s.db.workers.GetCached(ctx, name, nil)
			switch {
			case errors.Is(err, rundb.ErrNotFound):
				w = &rundb.Worker{WorkerName: name}
			case err != nil:
				return err
			case w.Blocked:
				return nil
			}
			w.Blocked, w.Message = true, reason
			w.BlockedBy, w.BlockedByApprover = systemUser, true
			w.Quarantined, w.QuarantinedSince = true, s.now().UTC()
			w.Quarantines++
			if err := s.db.workers.Put(ctx, w); err != nil {
				return err
			}
			s.writeActions(ctx, []*rundb.Action{{Action: QuarantineAction, Username: systemUser, User: q.username, Worker: name, Message: reason}})
			s.notify(ctx, notify.Event{Kind: notify.KindQuarantined, Username: q.username, Worker: name,
				Message: reason, Time: s.now()})
			return nil
		}(context.WithoutCancel(ctx))
		if err != nil {
			s.logger.Error("store quarantine", "worker", name, "reason", reason, "err", err)
			continue
		}
		s.cfg.Metrics.Quarantined()
		s.logger.Warn("worker quarantined", "worker", name, "reason", reason)
	}
}

// clearLifted forgets the record of a machine that request_task serves again after the rule
// flagged it: an approver lifted its quarantine, so it starts afresh.
func (s *Scheduler) clearLifted(name string) {
	if s.quar.Clear(name) {
		s.logger.Info("quarantine lifted: the worker's record starts afresh", "worker", name)
	}
}
