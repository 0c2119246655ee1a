package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
)

// A worker that cannot build a run's engines fails its task with a message that starts with
// protocol.BuildFailedPrefix (Shoal's worker) or that is fishtest's worker's report of a failed
// make. The run keeps the latest report of each such worker, and its page shows them. A report
// counts towards stopping the run when its worker's user may stop runs, as stop_run asks
// (MinCPUHoursToStop of contributed CPU time); once BuildFailuresToStop different workers' reports
// count, the run is stopped as failed, as a wrong bench stops it: a patch that does not compile
// would otherwise fail every task it is given, and an account without that record cannot stop
// others' runs by reporting failures.

// BuildFailuresToStop is how many different workers must fail to build a run before it is
// stopped: one could be a broken machine, three are the patch.
const BuildFailuresToStop = 3

// Bounds of what a run keeps of build failures: the reports of this many workers, each cut to
// this many bytes (Shoal's worker sends at most 4,000).
const (
	maxBuildFailures       = 10
	maxBuildFailureMessage = 5120
)

// isBuildFailure reports whether a failed task's message says the worker could not build the
// run's engines: Shoal's worker's report, or fishtest's worker's ("Executing ['make', ...]
// failed. Error: ...").
func isBuildFailure(message string) bool {
	return strings.HasPrefix(message, protocol.BuildFailedPrefix) ||
		strings.HasPrefix(message, "Executing ['make'") && strings.Contains(message, "failed")
}

// buildReport is what a failed task's message says of a build: whether it reports one that
// failed, and whether that report counts towards stopping the run (buildFailureCounts).
type buildReport struct{ failed, counts bool }

// noteBuildFailure records the build failure of task taskID's worker on r (counted: it counts
// towards the stop) and reports whether r has now failed to build on BuildFailuresToStop
// different workers whose reports count.
func noteBuildFailure(r *rundb.Run, taskID int, message string, counted bool, now time.Time) bool {
	worker := r.Tasks[taskID].WorkerInfo.ShortName()
	if len(message) > maxBuildFailureMessage {
		message = strings.ToValidUTF8(message[:maxBuildFailureMessage], "")
	}
	f := rundb.BuildFailure{Worker: worker, TaskID: taskID, Time: now.UTC().Truncate(time.Millisecond),
		Message: message, Counted: counted}
	r.BuildFailures = slices.DeleteFunc(r.BuildFailures, func(b rundb.BuildFailure) bool { return b.Worker == worker })
	r.BuildFailures = append(r.BuildFailures, f)
	if n := len(r.BuildFailures); n > maxBuildFailures {
		r.BuildFailures = slices.Delete(r.BuildFailures, 0, n-maxBuildFailures)
	}
	counting := 0
	for _, b := range r.BuildFailures {
		if b.Counted {
			counting++
		}
	}
	return counting >= BuildFailuresToStop
}

// buildFailureCounts reports whether a build failure of the worker of task taskID of run runID
// counts towards stopping the run: its user's contributed CPU hours, read from the database
// before any lock is taken. A user the database does not know has none.
func (s *Scheduler) buildFailureCounts(ctx context.Context, runID rundb.ObjectID, taskID int) (bool, error) {
	owner, err := s.TaskOwner(ctx, runID, taskID)
	if err != nil {
		return false, nil // failTask answers for a task that is gone
	}
	st, err := s.db.allTime.Get(ctx, owner.Username)
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the CPU hours of %s: %w", owner.Username, err)
	}
	return st.CPUHours >= MinCPUHoursToStop, nil
}

// buildStopMessage is the stop_run action's message of a run stopped for its build failures:
// how many workers failed and the first line of the last one's report.
func buildStopMessage(r *rundb.Run) string {
	last := r.BuildFailures[len(r.BuildFailures)-1].Message
	line, _, _ := strings.Cut(last, "\n")
	return fmt.Sprintf("Stopped: %d workers failed to build it. The last said: %s", len(r.BuildFailures), line)
}
