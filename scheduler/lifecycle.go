package scheduler

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/stats"
)

// The functions here change a run held under its lock (inside a run cache callback). They may
// take s.mu, never the other way round, and they collect actions in an *events to be written
// once the locks are released.

// inf is the residual of a task whose worker has no chi-square residual.
var inf = math.Inf(1)

// events collects the actions a change produces, and what its users are to be told.
type events struct {
	actions     []*rundb.Action
	notes       []notify.Event
	quarantines []quarantined // stored by applyQuarantines
	// reports are what a change tells the quarantine record, once the run's lock is released
	// (applyQuarantines); a call makes at most two, held in reportBuf.
	reports   []machineReport
	reportBuf [2]machineReport
}

// eventsPool holds the events of finished calls: update_task needs one a call, thousands a
// second, and its two quarantine reports make it a few hundred bytes.
var eventsPool = sync.Pool{New: func() any { return new(events) }}

// newEvents returns empty events from the pool; release gives them back once the call has
// stored and sent everything they hold (the slices go with it, to the collector).
func newEvents() *events { return eventsPool.Get().(*events) }

func (e *events) release() {
	*e = events{}
	eventsPool.Put(e)
}

func (e *events) add(a *rundb.Action) { e.actions = append(e.actions, a) }

// note tells run r's owner of an event of kind about r, with message.
func (e *events) note(kind string, r *rundb.Run, message string, now time.Time) {
	e.notes = append(e.notes, notify.Event{Kind: kind, Username: r.Args.Username, RunID: r.ID.Hex(),
		Run: RunLabel(r), Message: message, Time: now})
}

// systemUser is the username of actions the server itself takes.
const systemUser = "fishtest.system"

// runAction returns an action about run r.
func runAction(kind, username string, r *rundb.Run) *rundb.Action {
	return &rundb.Action{Action: kind, Username: username, RunID: r.ID.Hex(), Run: RunLabel(r)}
}

// taskAction returns an action about one task of r, naming its worker.
func taskAction(kind string, r *rundb.Run, taskID int) *rundb.Action {
	t := &r.Tasks[taskID]
	a := runAction(kind, t.WorkerInfo.Username, r)
	a.Worker = t.WorkerInfo.LongName()
	id := taskID
	a.TaskID = &id
	return a
}

// played is the number of games a results count holds.
func played(r rundb.Results) int { return r.Wins + r.Losses + r.Draws }

// endFinished is setInactiveTask's reason for a task that ended normally: its games played, or
// its run finished, stopped or deleted. Every other reason is a metrics.Reason*, a reclaim.
const endFinished = "finished"

// setInactiveTask ends a task: its worker is no longer counted on the run, and the games it
// committed shrink to the games it played. It reports whether the task was active; each task
// that ends is counted once, as finished or as reclaimed for reason.
func (s *Scheduler) setInactiveTask(r *rundb.Run, taskID int, now time.Time, reason string) bool {
	t := &r.Tasks[taskID]
	if !t.Active {
		return false
	}
	if reason == endFinished {
		s.cfg.Metrics.TaskFinished()
	} else {
		s.cfg.Metrics.TaskReclaimed(reason)
	}
	r.Workers = max(0, r.Workers-1)
	r.Cores = max(0, r.Cores-t.WorkerInfo.Concurrency) // never negative, whatever a record says
	r.CommittedGames += played(t.Stats) - t.NumGames
	t.LastUpdated = now
	t.SPSAParams = nil
	t.Active = false
	s.mu.Lock()
	if n := s.connections[t.WorkerInfo.RemoteAddr] - 1; n > 0 {
		s.connections[t.WorkerInfo.RemoteAddr] = n
	} else {
		delete(s.connections, t.WorkerInfo.RemoteAddr)
	}
	s.mu.Unlock()
	return true
}

// crashOrTime records a task with too many crashes or time losses in the event log.
func crashOrTime(r *rundb.Run, taskID int, ev *events) {
	st := r.Tasks[taskID].Stats
	games := played(st)
	if games == 0 || !stats.CrashOrTime(st.Crashes, st.TimeLosses, games) {
		return
	}
	a := taskAction("crash_or_time", r, taskID)
	a.Message = fmt.Sprintf("Time losses:%d(%.1f%%) Crashes:%d(%.1f%%)",
		st.TimeLosses, 100*float64(st.TimeLosses)/float64(games), st.Crashes, 100*float64(st.Crashes)/float64(games))
	ev.add(a)
}

// undecided reports whether a run still needs games: not all played, and no SPRT decision.
func undecided(r *rundb.Run) bool {
	if played(r.Results) >= r.Args.NumGames {
		return false
	}
	return r.Args.SPRT == nil || r.Args.SPRT.State == ""
}

// computeFlags returns a finished run's green and yellow flags.
func computeFlags(r *rundb.Run) (green, yellow bool) {
	if !r.Finished || r.Args.SPSA != nil {
		return false, false
	}
	state := ""
	if r.Args.SPRT != nil {
		state = r.Args.SPRT.State
	} else if e, err := stats.GetElo(r.Results.Pentanomial); err == nil {
		if e.LOS < 0.05 {
			state = stats.Rejected
		} else if e.LOS > 0.95 {
			state = stats.Accepted
		}
	}
	switch {
	case state == stats.Accepted:
		return true, false
	case state == stats.Rejected && r.Results.Wins > r.Results.Losses:
		return false, true
	}
	return false, false
}

// setInactiveRun finishes a run: every task ends and it leaves the unfinished set.
func (s *Scheduler) setInactiveRun(r *rundb.Run, now time.Time) {
	for i := range r.Tasks {
		s.setInactiveTask(r, i, now, endFinished)
	}
	s.mu.Lock()
	s.dropUnfinished(r.ID)
	s.mu.Unlock()
	r.Finished = true
	r.NPS, r.GamesPerMinute = 0, 0
	r.IsGreen, r.IsYellow = computeFlags(r)
}

// setActiveRun revives a run (after a purge or a modification).
func (s *Scheduler) setActiveRun(r *rundb.Run) {
	s.mu.Lock()
	s.addUnfinished(r.ID)
	s.mu.Unlock()
	r.Deleted, r.Failed, r.IsGreen, r.IsYellow, r.Finished = false, false, false, false, false
	// A revived run starts its count of build failures afresh; the reports stay to be read.
	for i := range r.BuildFailures {
		r.BuildFailures[i].Counted = false
	}
}

// stopRun finishes a run and, if it asks for it, purges bad workers, which may revive it.
func (s *Scheduler) stopRun(r *rundb.Run, now time.Time, ev *events) {
	s.setInactiveRun(r, now)
	if r.Args.AutoPurge && r.Args.SPSA == nil {
		msg := s.purgeRun(r, stats.AutoPurgeP, stats.AutoPurgeResidual, 1, now)
		a := runAction("purge_run", r.Args.Username, r)
		a.Message = "Auto purge"
		if msg != "" {
			a.Message = "Auto purge (not performed): " + msg
		}
		ev.add(a)
	}
}

// purgeRun marks the tasks of bad workers (and tasks with too many crashes or time losses) as
// bad, recomputes the results and revives the run if that leaves it undecided. It returns why
// nothing was purged, or "".
func (s *Scheduler) purgeRun(r *rundb.Run, p, res float64, iters int, now time.Time) string {
	switch {
	case !r.Finished:
		return "Can only purge completed run"
	case r.StartTime.IsZero() || now.Sub(r.StartTime) >= 31*24*time.Hour: // fishtest: .days > 30
		return "Run too old to be purged"
	case r.Failed:
		return "You cannot purge a failed run"
	}
	msg := "No bad workers"
	for i := range r.Tasks {
		t := &r.Tasks[i]
		if t.Bad {
			continue
		}
		if stats.CrashOrTime(t.Stats.Crashes, t.Stats.TimeLosses, played(t.Stats)) {
			msg = ""
			s.setBadTask(r, i, stats.CrashOrTimeResidual, stats.ResidualRed, now)
		}
	}
	tasks := TaskResults(r)
	chi2 := stats.GetChi2(tasks, nil)
	rounds := iters
	if msg == "" {
		rounds = iters - 1
	}
	bad := map[string]bool{}
	for _, k := range badWorkers(tasks, chi2, p, res, rounds) {
		bad[k] = true
	}
	for i := range r.Tasks {
		t := &r.Tasks[i]
		if t.Bad || !bad[t.WorkerInfo.UniqueKey] {
			continue
		}
		msg = ""
		residual, ok := chi2.Residual[t.WorkerInfo.UniqueKey]
		if !ok {
			residual = inf
		}
		s.setBadTask(r, i, residual, stats.ResidualColor(residual, chi2), now)
	}
	if msg != "" {
		return msg
	}
	r.Results = computeResults(r)
	if r.Args.SPRT != nil {
		_ = updateSPRT(r)
	}
	if undecided(r) {
		s.setActiveRun(r)
	} else {
		r.IsGreen, r.IsYellow = computeFlags(r)
	}
	return ""
}

// badWorkers is stats.GetBadWorkers reusing a chi2 already computed for the first round, as
// fishtest does; with no rounds it finds nobody.
func badWorkers(tasks []stats.TaskResult, chi2 stats.Chi2, p, res float64, rounds int) []string {
	if rounds <= 0 {
		return nil
	}
	return stats.GetBadWorkers(tasks, p, res, rounds)
}

// TaskResults gives the chi-square test (stats.GetChi2) the tasks of r, one for each, in
// order: each with its worker's unique key, whether it is bad, and its game counts.
func TaskResults(r *rundb.Run) []stats.TaskResult {
	out := make([]stats.TaskResult, len(r.Tasks))
	for i, t := range r.Tasks {
		out[i] = stats.TaskResult{UniqueKey: t.WorkerInfo.UniqueKey, Bad: t.Bad, Wins: t.Stats.Wins,
			Losses: t.Stats.Losses, Draws: t.Stats.Draws, Pentanomial: t.Stats.Pentanomial}
	}
	return out
}

// setBadTask ends a task and moves its games out of the run: a copy with the residual goes to
// bad_tasks, and the task itself keeps its place with zero stats.
func (s *Scheduler) setBadTask(r *rundb.Run, taskID int, residual float64, color string, now time.Time) {
	t := &r.Tasks[taskID]
	if t.Bad {
		return
	}
	// A purge works on finished runs, whose tasks have already ended (and been counted);
	// a task marked bad is counted once more, as purged, and only once if it was still active.
	if !s.setInactiveTask(r, taskID, now, metrics.ReasonPurge) {
		s.cfg.Metrics.TaskReclaimed(metrics.ReasonPurge)
	}
	bad := *t
	bad.Stats.Pentanomial = append([]int(nil), t.Stats.Pentanomial...)
	id, res := taskID, residual
	bad.TaskID, bad.Bad, bad.Residual, bad.ResidualColor = &id, true, &res, color
	r.BadTasks = append(r.BadTasks, bad)
	r.CommittedGames -= played(t.Stats)
	t.Bad = true
	t.Stats = rundb.NewResults()
}

// computeResults sums the tasks' stats.
func computeResults(r *rundb.Run) rundb.Results {
	out := rundb.NewResults()
	for _, t := range r.Tasks {
		addResults(&out, t.Stats, rundb.Results{})
	}
	return out
}

// finishedRunMessage is the finished_run action's summary of a run's outcome.
func finishedRunMessage(r *rundb.Run) string {
	if r.Args.SPSA != nil {
		return "SPSA tune finished"
	}
	var msg string
	if sp := r.Args.SPRT; sp != nil {
		e, err := stats.EstimateSPRTElo(ToStatsResults(r.Results), sp.Alpha, sp.Beta, 0.05, sp.Elo0, sp.Elo1, sp.EloModel)
		if err != nil {
			msg = fmt.Sprintf("Result:%s", sp.State)
		} else {
			msg = fmt.Sprintf("Result:%s Elo:%.2f[%.2f,%.2f] LOS:%.0f%%", sp.State, e.Elo, e.CI[0], e.CI[1], 100*e.LOS)
		}
	} else {
		cells := r.Results.Pentanomial
		if cells == nil {
			cells = []int{r.Results.Losses, r.Results.Draws, r.Results.Wins}
		}
		result := "rejected"
		if r.IsGreen {
			result = "accepted"
		}
		e, err := stats.GetElo(cells)
		if err != nil {
			msg = "Result:" + result
		} else {
			msg = fmt.Sprintf("Result:%s Elo:%.2f[%.2f,%.2f] LOS:%.0f%%", result, e.Elo, e.Elo-e.Elo95, e.Elo+e.Elo95, 100*e.LOS)
		}
	}
	p := r.Results.Pentanomial
	total := 0
	for _, x := range p {
		total += 2 * x
	}
	return fmt.Sprintf("%s Games:%d Ptnml:%s", msg, total, pyList(p))
}

// pyList prints ints as Python prints a list with the spaces removed: [1,2,3].
func pyList(xs []int) string {
	b := []byte{'['}
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", x)
	}
	return string(append(b, ']'))
}
