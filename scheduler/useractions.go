package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/stats"
)

// The actions a user takes on a run from its page: stop, purge, delete and modify (fishtest's
// /tests/stop, /tests/purge, /tests/delete and /tests/modify). Whether the user may act on the
// run at all (its owner or an approver) is the caller's check, as for ApproveRun; the methods
// take the acting username for the event log and, where a rule depends on it, whether the user
// is an approver.
//
// As in fishtest, a deleted run is not refused: stopping or deleting it again is harmless, and a
// purge or modification that revives it also undeletes it.

// maxModifyAge is the age from which a run can no longer be modified: fishtest refuses when
// (now - start_time).days > 30, that is from 31 whole days on.
const maxModifyAge = 31 * 24 * time.Hour

// ErrRunTooOld means ModifyRun on a run started more than 30 days ago.
var ErrRunTooOld = errors.New("run too old to be modified")

// StopRunByUser finishes run id for username, as fishtest's /tests/stop: every task ends and
// the run leaves the schedule. A run with auto-purge is then purged, which may revive it. The
// change is written before StopRunByUser returns, and logged as a stop_run action "User stop",
// after the auto-purge's purge_run action. Stopping a finished run is not an error: as in
// fishtest it is finished again and logged again. Errors: ErrRunNotFound, or a database error.
func (s *Scheduler) StopRunByUser(ctx context.Context, id rundb.ObjectID, username string) error {
	if err := s.calls.enter(); err != nil {
		return err
	}
	defer s.calls.leave()
	ev := &events{}
	now := s.now()
	err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		s.stopRun(r, now, ev)
		a := runAction("stop_run", username, r)
		a.Message = "User stop"
		ev.add(a)
		if username != r.Args.Username { // nobody needs telling of their own stop
			ev.note(notify.KindStopped, r, "stopped by "+username, now)
		}
		return runcache.PrioSaveNow, nil
	})
	// Actions are collected only once the run has changed, which stands even if writing it
	// through failed (the flusher retries), so they are logged either way.
	s.writeEvents(ctx, ev)
	if err != nil {
		return wrapUserAction("stop", id, err)
	}
	return nil
}

// PurgeRunByUser removes the games of bad workers from run id for username, as fishtest's
// /tests/purge: tasks with too many crashes or time losses, and the worst worker if the
// chi-square test finds it an outlier (p 0.01, residual 4.5, one round; looser than the
// auto-purge). The results are recomputed, and a run left undecided is revived. The change is
// written before PurgeRunByUser returns.
//
// The returned message is "" when something was purged, or else why nothing was: "Can only
// purge completed run", "Run too old to be purged", "You cannot purge a failed run" or "No bad
// workers", for the user to read; the run is then unchanged. Either way a purge_run action is
// logged, "Manual purge" or "Manual purge (not performed): <message>". Errors: ErrRunNotFound,
// or a database error.
func (s *Scheduler) PurgeRunByUser(ctx context.Context, id rundb.ObjectID, username string) (string, error) {
	if err := s.calls.enter(); err != nil {
		return "", err
	}
	defer s.calls.leave()
	var msg string
	var a *rundb.Action
	now := s.now()
	err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		msg = s.purgeRun(r, stats.ManualPurgeP, stats.ManualPurgeResidual, 1, now)
		a = runAction("purge_run", username, r)
		a.Message = "Manual purge"
		if msg != "" {
			a.Message = "Manual purge (not performed): " + msg
			return 0, runcache.ErrUnchanged
		}
		return runcache.PrioSaveNow, nil
	})
	if a != nil {
		s.writeActions(ctx, []*rundb.Action{a})
	}
	if err != nil {
		return "", wrapUserAction("purge", id, err)
	}
	return msg, nil
}

// DeleteRun finishes run id and marks it deleted for username, as fishtest's /tests/delete: it
// disappears from the run lists, with no auto-purge and no finished_run action. The change is
// written before DeleteRun returns and logged as a delete_run action. Errors: ErrRunNotFound,
// or a database error.
func (s *Scheduler) DeleteRun(ctx context.Context, id rundb.ObjectID, username string) error {
	if err := s.calls.enter(); err != nil {
		return err
	}
	defer s.calls.leave()
	var a *rundb.Action
	now := s.now()
	err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		s.setInactiveRun(r, now)
		r.Deleted = true
		a = runAction("delete_run", username, r)
		return runcache.PrioSaveNow, nil
	})
	if a != nil {
		s.writeActions(ctx, []*rundb.Action{a})
	}
	if err != nil {
		return wrapUserAction("delete", id, err)
	}
	return nil
}

// RunModification is what the modify form of a run page sets. Every field but Info is always
// applied; nil or blank Info keeps the run's description.
type RunModification struct {
	// NumGames is the run's game budget: 0 to MaxGames in steps of GamesStep. A fixed-games
	// run's budget cannot grow, and an SPSA run's cannot change (its gains were computed from it).
	NumGames int
	// Priority is any whole number; higher runs are scheduled first.
	Priority int
	// Throughput is a percentage >= 0 (100 is normal).
	Throughput int
	AutoPurge  bool
	// Info replaces the run's description, trimmed, if the run is the user's own.
	Info *string
}

// ModifyResult says what a modification did beyond the run's arguments, for the message the
// user is shown.
type ModifyResult struct {
	// Approved is whether the run is approved after the modification.
	Approved bool
	// Unapproved is whether the modification withdrew the run's approval: the user is not an
	// approver and raised the throughput above max(old, 100) or the priority above max(old, 0),
	// or modified a failed run.
	Unapproved bool
	// Revived is whether the modification restarted a finished run, which still needs games.
	Revived bool
}

// ModifyRun applies m to run id for username, as fishtest's /tests/modify; approver is whether
// username may approve runs. A run that is still undecided afterwards is made active again,
// which revives a finished (or failed, or deleted) run; a non-approver's raise of throughput
// or priority, or change to a failed run, withdraws its approval first. The change is written
// before ModifyRun returns and logged as a modify_run action whose message lists the changed
// fields ("modify: priority changed from 0 to 1, num-games changed from 20000 to 40000"),
// preceded by an approve_run action "unapproved" when the approval is withdrawn.
//
// Unlike fishtest, which leaves it to the next update_task, an unfinished run that the new
// budget leaves decided (all its games played) is finished at once, with a finished_run action,
// so that no unfinished run is ever decided.
//
// Errors change nothing: ErrRunNotFound; ErrRunTooOld (started more than 30 days ago); a
// *FieldError naming "num_games" or "throughput"; or a database error.
func (s *Scheduler) ModifyRun(ctx context.Context, id rundb.ObjectID, username string, approver bool, m RunModification) (ModifyResult, error) {
	if err := s.calls.enter(); err != nil {
		return ModifyResult{}, err
	}
	defer s.calls.leave()
	var res ModifyResult
	ev := &events{}
	now := s.now()
	err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		if r.StartTime.IsZero() || now.Sub(r.StartTime) >= maxModifyAge {
			return 0, ErrRunTooOld
		}
		if err := checkModification(r.Args, m); err != nil {
			return 0, err
		}
		if !approver && r.Approved && (float64(m.Throughput) > max(r.Args.Throughput, 100) ||
			float64(m.Priority) > max(r.Args.Priority, 0) || r.Failed) {
			r.Approved, r.Approver = false, ""
			res.Unapproved = true
			a := runAction("approve_run", username, r)
			a.Message = "unapproved"
			ev.add(a)
		}
		before := r.Args
		r.Args.NumGames = m.NumGames
		r.Args.Priority = float64(m.Priority)
		r.Args.Throughput = float64(m.Throughput)
		r.Args.AutoPurge = m.AutoPurge
		if m.Info != nil && username == r.Args.Username {
			if info := strings.TrimSpace(*m.Info); info != "" {
				r.Args.Info = info
			}
		}
		a := runAction("modify_run", username, r)
		a.Message = modifyMessage(before, r.Args)
		ev.add(a)

		switch {
		case undecided(r):
			res.Revived = r.Finished
			s.setActiveRun(r)
		case !r.Finished:
			s.stopRun(r, now, ev)
			if r.Finished {
				a := runAction("finished_run", r.Args.Username, r)
				a.Message = finishedRunMessage(r)
				ev.add(a)
				ev.note(notify.KindFinished, r, a.Message, now)
			}
		}
		res.Approved = r.Approved
		return runcache.PrioSaveNow, nil
	})
	// A refusal returns before any action is collected.
	s.writeEvents(ctx, ev)
	if err != nil {
		return ModifyResult{}, wrapUserAction("modify", id, err)
	}
	return res, nil
}

// checkModification applies the modify form's rules, in fishtest's order, to a run's arguments.
func checkModification(args rundb.RunArgs, m RunModification) error {
	n := m.NumGames
	switch {
	case n > args.NumGames && args.SPRT == nil && args.SPSA == nil:
		return fieldErr("num_games", "%d: a fixed-games run cannot grow beyond its %d games; submit a new run instead", n, args.NumGames)
	case args.SPSA != nil && n != args.NumGames:
		return fieldErr("num_games", "%d: an SPSA run's %d games cannot change, its gains are based on them", n, args.NumGames)
	case n < 0:
		return fieldErr("num_games", "%d: must be >= 0", n)
	case n%GamesStep != 0:
		return fieldErr("num_games", "%d: must be a multiple of %d", n, GamesStep)
	case n > MaxGames:
		return fieldErr("num_games", "%d: must be <= %d", n, MaxGames)
	case m.Throughput < 0:
		return fieldErr("throughput", "%d: must be >= 0 (a percentage; 100 is normal)", m.Throughput)
	case m.Throughput > MaxThroughput:
		return fieldErr("throughput", "%d: must be <= %d (a percentage; 100 is normal)", m.Throughput, MaxThroughput)
	case m.Priority > MaxPriority || m.Priority < -MaxPriority:
		return fieldErr("priority", "%d: must be from -%d to %d", m.Priority, MaxPriority, MaxPriority)
	}
	return nil
}

// modifyMessage is the modify_run action's list of changed arguments, with fishtest's names and
// Python's spelling of the values ("auto-purge changed from False to True").
func modifyMessage(before, after rundb.RunArgs) string {
	var parts []string
	add := func(name, from, to string) {
		if from != to {
			parts = append(parts, name+" changed from "+from+" to "+to)
		}
	}
	add("priority", pyNumber(before.Priority), pyNumber(after.Priority))
	add("num-games", strconv.Itoa(before.NumGames), strconv.Itoa(after.NumGames))
	add("throughput", pyNumber(before.Throughput), pyNumber(after.Throughput))
	add("auto-purge", pyBool(before.AutoPurge), pyBool(after.AutoPurge))
	return "modify: " + strings.Join(parts, ", ")
}

// pyNumber prints a stored whole number as Python prints the int fishtest keeps.
func pyNumber(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// wrapUserAction names the action and run on an error, keeping the errors callers test for
// (ErrRunNotFound, ErrRunTooOld, *FieldError) testable with errors.Is and errors.As; a
// *FieldError is returned as it is, for the form to mark its field.
func wrapUserAction(action string, id rundb.ObjectID, err error) error {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		return err
	case errors.Is(err, ErrRunNotFound):
		return err
	}
	return fmt.Errorf("%s run %s: %w", action, id, err)
}
