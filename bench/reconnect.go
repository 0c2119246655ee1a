package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// The reconnect scenario (a reconnection storm): the whole fleet, every worker holding a
// task, sees its server restart and comes back to it at once.
const (
	// reconnectScale is its time scale: 10,000 workers stand for 500,000 (with --quick, the
	// steady scenario's scale).
	reconnectScale = 50
	// reconnectSlowBeat and reconnectSteadyShare say when a second of the fleet's beats is
	// steady: at most 1 % of them (the p99) slower than the steady target's 25 ms or failed.
	reconnectSlowBeat    = 25 * time.Millisecond
	reconnectSteadyShare = 0.01
	// reconnectRecovery is the target: beats steady again within a minute of equivalent time
	// (wall time times the time scale) after the server is ready.
	reconnectRecovery = 60
	// reconnectRetry is the workers' wait between two attempts of a call that must reach the
	// server. A restart takes seconds whatever the time scale, so the workers' retries are not
	// compressed: five attempts span 20 s, as fishtest's 15 s span a real restart.
	reconnectRetry = 5 * time.Second
)

// benchReconnect runs set.Workers at time scale reconnectScale on set.Runs runs. Once every
// worker has arrived and holds a task, it restarts the server: SIGTERM, which the server answers
// with a graceful stop, then `shoal serve` again on the same data and address. The fleet works
// on and reports per second how its beats did (fleet.Report.Timeline). The targets: beats steady
// again (three seconds in a row with at most reconnectSteadyShare of them slow or failed,
// fleet.RecoveredAfter) within reconnectRecovery seconds of equivalent time after the server is
// ready; every acknowledged game in the runs once; no task held by two workers; no
// worker's task failed or abandoned; no task of a live worker declared dead.
func benchReconnect(ctx context.Context, set plan, sc *scenarioReport, stderr io.Writer) error {
	var recovered, exactlyOnce, shared, lost, falseDead *float64
	defer func() {
		sc.target("beats steady again after the restart (equivalent time)", recovered, "s",
			fmt.Sprintf("<= %d", reconnectRecovery), func(v float64) bool { return v <= reconnectRecovery })
		sc.target("exactly-once check", exactlyOnce, "bool", "= 1", atLeast(1))
		sc.target("tasks held by two workers", shared, "tasks", "= 0", below(0.5))
		sc.target("tasks lost by their workers (failed or abandoned)", lost, "tasks", "= 0", below(0.5))
		sc.target("false dead tasks", falseDead, "tasks", "= 0", below(0.5))
	}()
	k := float64(reconnectScale)
	if set.Quick {
		k = set.TimeScale
	}
	lset := set
	lset.TimeScale = k
	sc.figure("equivalent workers (workers x time scale)", float64(set.Workers)*k, "workers")
	s, err := startBenchServer(ctx, lset, set.Workers, stderr)
	if err != nil {
		return err
	}
	defer s.stop()
	if _, err := s.submitRuns(ctx, set.Runs); err != nil {
		return err
	}
	opts := fleetOptions(s, lset, set.Workers)
	ramp := min(30*time.Second, set.duration/5)
	restartAt := ramp + max(ramp/2, 10*time.Second)
	opts.Arrival, opts.Ramp, opts.StopRamp = fleet.Ramp, ramp, ramp
	opts.Duration = restartAt + max(2*ramp, 20*time.Second)
	opts.RetryDelay, opts.SlowBeat = reconnectRetry, reconnectSlowBeat

	type restarted struct {
		down, up time.Time
		err      error
	}
	done := make(chan restarted, 1)
	start := time.Now()
	go func() { // joined through done
		select {
		case <-time.After(restartAt):
		case <-ctx.Done():
			done <- restarted{err: ctx.Err()}
			return
		}
		// The fleet collects its garbage while the server is away, when nothing it measures
		// counts (beside the new server's start, not to lengthen the outage): otherwise the
		// outage's garbage brings a cycle, which stalls the fleet's core, into the seconds
		// judged (docs/benchmarks/README.md, "The reconnection storm at 500,000").
		collected := make(chan struct{})
		down, up, err := s.restart(ctx, func() {
			go func() { runtime.GC(); close(collected) }() // joined below
		})
		<-collected // restart calls its away before anything can fail
		done <- restarted{down, up, err}
	}()
	rep, err := fleet.Run(ctx, opts)
	r := <-done
	if err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("restart the server: %w", r.err)
	}
	fleetFigures(sc, rep)
	downAt, upAt := r.down.Sub(start).Seconds(), r.up.Sub(start).Seconds()
	sc.figure("restart: the server told to stop (after the first arrival)", downAt, "s")
	sc.figure("restart: the server away (told to stop to serving as the primary again)", upAt-downAt, "s")
	tl := rep.Timeline // judged here, not reported: the report holds figures
	if before := int(downAt) - 1; before >= 0 && before < len(tl) {
		sc.figure("workers holding a task the second before the restart", float64(tl[before].Busy), "workers")
	}
	// The ten seconds before the restart, for comparison.
	var beats, slow int64
	for i := max(int(downAt)-10, 0); i < int(downAt) && i < len(tl); i++ {
		beats, slow = beats+tl[i].Beats, slow+tl[i].SlowBeats
	}
	if beats > 0 {
		sc.figure("slow or failed beats in the 10 s before the restart", 100*float64(slow)/float64(beats), "%")
	}
	// The seconds from the first that began with the server serving: a beat sent earlier failed
	// because the server was away, not because it came back slowly.
	from, until := int(math.Ceil(upAt)), int(opts.Duration/time.Second)
	if secs, ok := fleet.RecoveredAfter(tl, from, until, reconnectSteadyShare); ok {
		wall := max(float64(from+secs)-upAt, 0)
		sc.figure("beats steady again after the restart (wall time from serving as the primary)", wall, "s")
		sc.figure("beats steady again after the restart (equivalent time)", wall*k, "s")
		recovered = new(wall * k)
	} else {
		sc.Limits = append(sc.Limits, fmt.Sprintf("The beats were not steady again (three seconds in a row with at most %g %% of them slower than %v or failed) in the %d s between the server's return and the fleet's stop.",
			100*reconnectSteadyShare, reconnectSlowBeat, until-from))
	}
	m, err := scrapeMetrics(ctx, s.base)
	if err != nil {
		return err
	}
	// The restarted process's counters: what it did since it was ready.
	dead := metricSum(m, "shoal_scheduler_tasks_reclaimed_total", `reason="dead"`)
	sc.figure("dead-task reclaims after the restart", dead, "tasks")
	falseDead = new(max(0, dead-float64(rep.WorkersVanished)))
	exactlyOnce, shared = new(boolFigure(rep.ExactlyOnce)), new(float64(rep.SharedTasks))
	for _, how := range slices.Sorted(maps.Keys(rep.TasksEnded)) {
		sc.figure("tasks ended: "+how, float64(rep.TasksEnded[how]), "tasks")
	}
	for _, kind := range slices.Sorted(maps.Keys(rep.AppErrors)) {
		sc.figure("error replies: "+kind, float64(rep.AppErrors[kind]), "replies")
	}
	nLost := rep.TasksEnded[string(worker.TaskFailed)] + rep.TasksEnded[string(worker.TaskAbandoned)]
	sc.figure("tasks lost by their workers (failed or abandoned)", float64(nLost), "tasks")
	lost = new(float64(nLost))
	return nil
}
