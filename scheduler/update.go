package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/stats"
)

// Reply is the answer of update_task, beat, failed_task and request_spsa: whether the task
// lives on, with an optional Info or Error (fishtest's application-level error channel, sent
// with HTTP 200).
type Reply struct {
	TaskAlive *bool // nil: the field is absent (failed_task's {})
	Info      string
	Error     string
	SPSA      *SPSAReply

	stored func(context.Context) error // see Stored
}

// Stored waits until the change the reply answers is stored (its journal record written), and
// returns why not if it cannot be: the reply must not be sent before Stored returned nil. The
// call that made the reply returns as soon as the change is made, so that its caller can let go
// of what it holds (a token of the database pool) before it waits.
func (r Reply) Stored(ctx context.Context) error {
	if r.stored == nil {
		return nil
	}
	return r.stored(ctx)
}

// SPSAReply is the perturbation for one SPSA batch.
type SPSAReply struct {
	WParams []stats.SPSAWorkerParam
	BParams []stats.SPSABaseParam
	Sig     uint32
}

func alive(b bool) *bool {
	if b {
		return &isAlive
	}
	return &isDead
}

// isAlive and isDead are what every Reply's TaskAlive points to, shared so that a reply
// allocates none: read them, never write through a TaskAlive.
var isAlive, isDead = true, false

// ErrTaskNotFound means a task id beyond the run's tasks.
var ErrTaskNotFound = errors.New("task not found")

// TaskOwner returns who a task belongs to, for the check that a worker only reports on its own
// tasks: the worker's unique key and username, and its remote address.
func (s *Scheduler) TaskOwner(ctx context.Context, runID rundb.ObjectID, taskID int) (rundb.WorkerInfo, error) {
	var wi rundb.WorkerInfo
	found := false
	err := s.runs.View(ctx, runID, func(r *rundb.Run) {
		if taskID >= 0 && taskID < len(r.Tasks) {
			wi, found = r.Tasks[taskID].WorkerInfo, true
		}
	})
	if errors.Is(err, rundb.ErrNotFound) {
		return wi, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	if err != nil {
		return wi, err
	}
	if !found {
		return wi, fmt.Errorf("%w: %s/%d", ErrTaskNotFound, runID, taskID)
	}
	return wi, nil
}

// modifyTask is modifyStored for a callback that works on task taskID, which must exist.
func (s *Scheduler) modifyTask(ctx context.Context, runID rundb.ObjectID, taskID int, fn func(*rundb.Run) (runcache.Prio, error)) (stored func(context.Context) error, err error) {
	return s.modifyStored(ctx, runID, taskID, func(r *rundb.Run) (runcache.Prio, error) {
		if taskID < 0 || taskID >= len(r.Tasks) {
			return 0, fmt.Errorf("%w: %s/%d", ErrTaskNotFound, runID.Hex(), taskID)
		}
		return fn(r)
	})
}

// RunLabel returns the event log's label of a run (see RunLabel), without copying it.
func (s *Scheduler) RunLabel(ctx context.Context, id rundb.ObjectID) (string, error) {
	var label string
	err := s.runs.View(ctx, id, func(r *rundb.Run) { label = RunLabel(r) })
	if errors.Is(err, rundb.ErrNotFound) {
		return "", fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return label, err
}

// SPSAUpdate is the spsa block of an update_task.
type SPSAUpdate struct {
	Wins, Losses, Draws, NumGames int
	Sig                           uint32
}

// UpdateTask applies a worker's cumulative results for its task: the difference from its last
// report is added to the run once, however often a report is repeated; the SPRT, the SPSA state
// and the task's end follow; a decided run is stopped. The reply may be sent once its Stored
// returned nil.
func (s *Scheduler) UpdateTask(ctx context.Context, wi rundb.WorkerInfo, runID rundb.ObjectID, taskID int, st rundb.Results, spsa *SPSAUpdate) (Reply, error) {
	if err := s.calls.enter(); err != nil {
		return Reply{}, err
	}
	defer s.calls.leave()
	var reply Reply
	ev := newEvents()
	defer ev.release()
	now := s.now()
	stored, err := s.modifyTask(ctx, runID, taskID, func(r *rundb.Run) (runcache.Prio, error) {
		t := &r.Tasks[taskID]
		numGames, oldGames := played(st), played(t.Stats)
		spsaGames := 0
		if r.Args.SPSA != nil && spsa != nil {
			spsaGames = spsa.Wins + spsa.Losses + spsa.Draws
		}
		if !t.Active {
			reply = Reply{TaskAlive: alive(false), Info: fmt.Sprintf("Update_task: task %s/%d is not active", runID.Hex(), taskID)}
			return 0, runcache.ErrUnchanged
		}
		if numGames > 0 && sameResults(st, t.Stats) {
			// The report already applied, sent again (its reply was lost, or the server
			// restarted before answering): acknowledged, and counted as a beat only, so that
			// a retry is harmless. An SPSA batch is not applied twice either.
			t.LastUpdated = now
			reply = Reply{TaskAlive: alive(true)}
			return runcache.PrioNormal, nil
		}
		var problem string
		switch {
		case !plausible(st, t.NumGames):
			problem = fmt.Sprintf("Update_task: task %s/%d has incompatible stats. The task has %d games; the report counts more.",
				runID.Hex(), taskID, t.NumGames)
		case numGames < oldGames || (spsaGames > 0 && numGames <= 0) || (spsaGames > 0 && numGames <= oldGames):
			problem = fmt.Sprintf("Update_task: task %s/%d has incompatible stats. Before %d. Now %d. SPSA_games %d.",
				runID.Hex(), taskID, oldGames, numGames, spsaGames)
		case (numGames-oldGames)%2 != 0:
			problem = fmt.Sprintf("Update_task: odd number of games received for task %s/%d. Before %d. Now %d.",
				runID.Hex(), taskID, oldGames, numGames)
		case r.Args.SPRT != nil && numGames%batchGames(r) != 0:
			problem = fmt.Sprintf("Update_task: the number of games received for task %s/%d is incompatible with the SPRT batch size",
				runID.Hex(), taskID)
		}
		if problem != "" {
			s.setInactiveTask(r, taskID, now, metrics.ReasonInvalid)
			reply = Reply{TaskAlive: alive(false), Error: problem}
			return runcache.PrioMedium, nil
		}

		addResults(&r.Results, st, t.Stats)
		s.noteGames(r, t, st, ev)
		t.Stats = st
		t.LastUpdated = now
		// The task keeps the concurrency it was sized and counted with: the run's cores
		// drop by that number when it ends, whatever the worker reports since.
		wi.Concurrency = t.WorkerInfo.Concurrency
		t.WorkerInfo = wi
		prio := runcache.PrioNormal
		if r.Args.SPSA != nil && spsa != nil && spsaGames == spsa.NumGames {
			if err := s.applySPSA(r, t, spsa); err != nil {
				s.logger.Warn("spsa update refused", "run_id", runID, "task_id", taskID, "err", err)
			}
		}
		if numGames >= t.NumGames {
			s.setInactiveTask(r, taskID, now, endFinished)
			crashOrTime(r, taskID, ev)
			s.noteTaskEnd(r, taskID, false, ev)
			prio = runcache.PrioMedium
		}
		r.LastUpdated = now
		if err := updateSPRT(r); err != nil {
			s.logger.Error("sprt update", "run_id", runID, "err", err)
		}
		if !undecided(r) {
			s.stopRun(r, now, ev)
			if r.Finished {
				a := runAction("finished_run", r.Args.Username, r)
				a.Message = finishedRunMessage(r)
				ev.add(a)
				ev.note(notify.KindFinished, r, a.Message, now)
			}
			reply = Reply{TaskAlive: alive(false)}
			return runcache.PrioSaveNow, nil
		}
		reply = Reply{TaskAlive: alive(t.Active)}
		return prio, nil
	})
	s.writeEvents(ctx, ev)
	s.applyQuarantines(ctx, ev)
	reply.stored = stored
	return reply, err
}

// plausible reports whether every count of a task's report fits in the task's games, which also
// keeps the sums below from overflowing on absurd numbers.
func plausible(st rundb.Results, games int) bool {
	for _, n := range []int{st.Wins, st.Losses, st.Draws, st.Crashes, st.TimeLosses} {
		if n < 0 || n > games {
			return false
		}
	}
	for _, p := range st.Pentanomial {
		if p < 0 || p > games {
			return false
		}
	}
	return st.Wins+st.Losses+st.Draws <= games
}

// cell is pentanomial cell i, 0 when a result predates the pentanomial.
func cell(p []int, i int) int {
	if i < len(p) {
		return p[i]
	}
	return 0
}

// addResults adds new - old to the run's totals.
func addResults(total *rundb.Results, now, before rundb.Results) {
	total.Wins += now.Wins - before.Wins
	total.Losses += now.Losses - before.Losses
	total.Draws += now.Draws - before.Draws
	total.Crashes += now.Crashes - before.Crashes
	total.TimeLosses += now.TimeLosses - before.TimeLosses
	if len(total.Pentanomial) < 5 {
		total.Pentanomial = append(total.Pentanomial, make([]int, 5-len(total.Pentanomial))...)
	}
	for i := range 5 {
		total.Pentanomial[i] += cell(now.Pentanomial, i) - cell(before.Pentanomial, i)
	}
}

// applySPSA moves the SPSA parameters by a finished batch's result, with the perturbation that
// was handed out for it; the stored perturbation is used up either way, so a replay is refused.
func (s *Scheduler) applySPSA(r *rundb.Run, t *rundb.Task, u *SPSAUpdate) error {
	p := t.SPSAParams
	t.SPSAParams = nil
	if p == nil {
		return errors.New("no SPSA batch was handed out for this task")
	}
	state := toStatsSPSA(r.Args.SPSA)
	err := state.Update(p.Iter, p.PackedFlips, stats.SPSAResult{
		Wins: u.Wins, Losses: u.Losses, Draws: u.Draws, NumGames: u.NumGames, Sig: u.Sig})
	if err != nil {
		return err
	}
	applySPSA(r.Args.SPSA, state)
	return nil
}

// Beat records that the worker of a task is alive.
func (s *Scheduler) Beat(ctx context.Context, runID rundb.ObjectID, taskID int) (Reply, error) {
	if err := s.calls.enter(); err != nil {
		return Reply{}, err
	}
	defer s.calls.leave()
	var active bool
	now := s.now()
	// A beat only moves last_updated: not worth a journal record; a crash loses at most the
	// beats since the run's last write, which the dead-task timeout dwarfs.
	err := s.modify(ctx, runID, func(r *rundb.Run) (runcache.Prio, error) {
		if taskID < 0 || taskID >= len(r.Tasks) {
			return 0, fmt.Errorf("%w: %s/%d", ErrTaskNotFound, runID.Hex(), taskID)
		}
		t := &r.Tasks[taskID]
		active = t.Active
		if !active {
			return 0, runcache.ErrUnchanged
		}
		s.cfg.Metrics.ObserveBeatLag(now.Sub(t.LastUpdated))
		t.LastUpdated = now
		return runcache.PrioNormal, nil
	})
	return Reply{TaskAlive: alive(active)}, err
}

// FailedTask ends a task its worker gave up on, and logs why. The reply may be sent once its
// Stored returned nil.
func (s *Scheduler) FailedTask(ctx context.Context, runID rundb.ObjectID, taskID int, message string) (Reply, error) {
	if err := s.calls.enter(); err != nil {
		return Reply{}, err
	}
	defer s.calls.leave()
	var build buildReport
	if isBuildFailure(message) {
		var err error
		build.failed = true
		if build.counts, err = s.buildFailureCounts(ctx, runID, taskID); err != nil {
			return Reply{}, err
		}
	}
	ev := &events{}
	reply, err := s.failTask(ctx, taskRef{runID, taskID}, message, metrics.ReasonFailed, build, s.now(), ev)
	s.writeEvents(ctx, ev)
	s.applyQuarantines(ctx, ev)
	return reply, err
}

// failTask ends an active task for reason (a metrics.Reason*) and logs a failed_task action
// with message; a worker's report of a failed build (build.failed) is kept on the run. The
// reply's Stored waits for the change to be stored.
func (s *Scheduler) failTask(ctx context.Context, ref taskRef, message, reason string, build buildReport, now time.Time, ev *events) (Reply, error) {
	var reply Reply
	stored, err := s.modifyStored(ctx, ref.run, ref.task, func(r *rundb.Run) (runcache.Prio, error) {
		if ref.task >= len(r.Tasks) || !r.Tasks[ref.task].Active {
			reply = Reply{TaskAlive: alive(false), Info: fmt.Sprintf("Failed_task: task %s/%d is not active", ref.run.Hex(), ref.task)}
			return 0, runcache.ErrUnchanged
		}
		s.setInactiveTask(r, ref.task, now, reason)
		crashOrTime(r, ref.task, ev)
		if reason == metrics.ReasonFailed { // the worker's own report, not the server's
			s.noteTaskEnd(r, ref.task, true, ev)
		}
		a := taskAction("failed_task", r, ref.task)
		a.Message = message
		ev.add(a)
		if !build.failed {
			return runcache.PrioMedium, nil
		}
		// The report goes into the run's document, which a journal record of the task does not
		// carry: written whole at once (a build failure is rare).
		if noteBuildFailure(r, ref.task, message, build.counts, now) && !r.Finished {
			stop := taskAction("stop_run", r, ref.task)
			stop.Message = buildStopMessage(r)
			ev.add(stop)
			ev.note(notify.KindStopped, r, stop.Message, now)
			r.Failed = true
			r.Failures++
			s.stopRun(r, now, ev)
		}
		return runcache.PrioSaveNow, nil
	})
	reply.stored = stored
	return reply, err
}

// ErrTooFewCPUHours and ErrRunFinished are stop_run's two refusals, answered with 401.
var (
	ErrTooFewCPUHours = errors.New("too few CPU hours to stop a run")
	ErrRunFinished    = errors.New("run is already finished")
)

// MinCPUHoursToStop is what a user must have contributed for their workers to stop a run.
const MinCPUHoursToStop = 1000

// StopRunByWorker handles a worker's report that the run cannot work (engine crash, wrong bench):
// a user with enough CPU hours stops and fails the run; otherwise only the task ends. Either way
// the report is logged.
func (s *Scheduler) StopRunByWorker(ctx context.Context, wi rundb.WorkerInfo, runID rundb.ObjectID, taskID int, message string, cpuHours float64) error {
	if err := s.calls.enter(); err != nil {
		return err
	}
	defer s.calls.leave()
	authorized := cpuHours >= MinCPUHoursToStop
	ev := &events{}
	now := s.now()
	var finished bool
	stored, err := s.modifyTask(ctx, runID, taskID, func(r *rundb.Run) (runcache.Prio, error) {
		if r.Finished {
			finished = true
			return 0, runcache.ErrUnchanged
		}
		a := runAction("stop_run", wi.Username, r)
		a.Worker = r.Tasks[taskID].WorkerInfo.LongName()
		id := taskID
		a.TaskID = &id
		a.Message = message
		if !authorized {
			a.Message += " (not authorized)"
		}
		ev.add(a)
		s.noteTaskEnd(r, taskID, true, ev)
		if !authorized {
			s.setInactiveTask(r, taskID, now, metrics.ReasonFailed)
			return runcache.PrioMedium, nil
		}
		r.Failed = true
		r.Failures++
		s.stopRun(r, now, ev)
		ev.note(notify.KindStopped, r, fmt.Sprintf("stopped by a worker of %s: %s", wi.Username, message), now)
		return runcache.PrioSaveNow, nil
	})
	s.writeEvents(ctx, ev)
	s.applyQuarantines(ctx, ev)
	if err == nil {
		err = stored(ctx) // rare enough to wait here
	}
	switch {
	case err != nil:
		return err
	case finished:
		return fmt.Errorf("%w: Run %s is already finished", ErrRunFinished, runID.Hex())
	case !authorized:
		return fmt.Errorf("%w: User %s has too few games to stop a run", ErrTooFewCPUHours, wi.Username)
	}
	return nil
}

// ErrNotSPSA means request_spsa on a run that is not an SPSA tune.
var ErrNotSPSA = errors.New("not an SPSA run")

// RequestSPSA hands the worker of an SPSA task the perturbation of its next batch and remembers
// it, so the result can be applied with the same flips. The reply may be sent once its Stored
// returned nil.
func (s *Scheduler) RequestSPSA(ctx context.Context, runID rundb.ObjectID, taskID int) (Reply, error) {
	if err := s.calls.enter(); err != nil {
		return Reply{}, err
	}
	defer s.calls.leave()
	var reply Reply
	var notSPSA bool
	stored, err := s.modifyTask(ctx, runID, taskID, func(r *rundb.Run) (runcache.Prio, error) {
		t := &r.Tasks[taskID]
		if !t.Active {
			reply = Reply{TaskAlive: alive(false), Info: fmt.Sprintf("request_spsa_data: task %s/%d is not active", runID.Hex(), taskID)}
			return 0, runcache.ErrUnchanged
		}
		if r.Args.SPSA == nil {
			notSPSA = true
			return 0, runcache.ErrUnchanged
		}
		b, err := toStatsSPSA(r.Args.SPSA).NewBatch(nil)
		if err != nil {
			return 0, fmt.Errorf("spsa batch for %s/%d: %w", runID.Hex(), taskID, err)
		}
		t.SPSAParams = &rundb.SPSAParams{Iter: b.Iter, PackedFlips: b.PackedFlips}
		reply = Reply{TaskAlive: alive(true), SPSA: &SPSAReply{WParams: b.WParams, BParams: b.BParams, Sig: b.Sig}}
		return runcache.PrioNormal, nil
	})
	if err == nil && notSPSA {
		err = fmt.Errorf("%w: %s", ErrNotSPSA, runID.Hex())
	}
	reply.stored = stored
	return reply, err
}
