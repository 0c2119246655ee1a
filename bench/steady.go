package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// fleetOptions are the options every bench fleet shares.
func fleetOptions(s *benchServer, set plan, workers int) fleet.Options {
	return fleet.Options{ServerURL: s.base, Username: s.users.Workers.Name, Password: s.users.Workers.Password,
		Workers: workers, DrawRatio: 0.6, TimeScale: set.TimeScale, StopGrace: 15 * time.Second}
}

// benchSteady is the steady scenario: set.Workers at set.TimeScale on set.Runs runs for
// set.duration.
func benchSteady(ctx context.Context, set plan, sc *scenarioReport, stderr io.Writer) error {
	beatP99, fiveXX, falseDead, rss := (*float64)(nil), (*float64)(nil), (*float64)(nil), (*float64)(nil)
	var costs steadyCosts
	defer func() {
		sc.target("beat p99 (steady window)", beatP99, "ms", "< 25", below(25))
		sc.target("5xx replies", fiveXX, "replies", "= 0", below(0.5))
		sc.target("false dead tasks", falseDead, "tasks", "= 0", below(0.5))
		sc.target("server resident memory (peak, steady window)", rss, "MiB", "< 1024", below(1024))
		if !set.Quick { // the limits are the full size's: a quick fleet shares little
			costs.targets(sc, steadyRatioLimit)
		}
		sc.explainUnmet(set)
	}()
	sc.figure("equivalent workers (workers x time scale)", float64(set.Workers)*set.TimeScale, "workers")
	sc.figure("fleet processes", float64(set.FleetProcesses), "processes")
	s, err := startBenchServer(ctx, set, set.Workers, stderr)
	if err != nil {
		return err
	}
	defer s.stop()
	if _, err := s.submitRuns(ctx, set.Runs); err != nil {
		return err
	}
	before, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fleetBefore, err := readFleet()
	if err != nil {
		return err
	}
	mBefore, err := scrapeMetrics(ctx, s.base)
	if err != nil {
		return err
	}
	opts, profiledFor := steadyFleet(s, set)
	profiled := profileDuring(ctx, s, set, "steady", opts.WindowFrom, profiledFor)
	var fleetProfiled <-chan *profileSummary
	if opts.Processes <= 1 {
		fleetProfiled = profileFleet(ctx, set, "steady", opts.WindowFrom, profiledFor)
	}
	watched := watchProc(ctx, s, opts.WindowFrom, set.duration)
	// Each leg's fleet starts from a collected heap, as the first leg's does: the last leg's
	// garbage (most of a gigabyte at 10,000 workers) would otherwise bring the fleet's first
	// collection, a pause of every worker, into this leg's run.
	runtime.GC()
	rep, err := fleet.Run(ctx, opts)
	sc.Profile = <-profiled
	if fleetProfiled != nil {
		sc.FleetProfile = <-fleetProfiled
	} else if opts.ShardProfile != nil {
		sc.FleetProfile = summariseShardProfile(*opts.ShardProfile)
	}
	win := <-watched
	if err != nil {
		return err
	}
	after, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fleetAfter, err := readFleet()
	if err != nil {
		return err
	}
	m, err := scrapeMetrics(ctx, s.base)
	if err != nil {
		return err
	}
	fx := fleetFigures(sc, rep)
	windowFigures(sc, rep, "steady")
	fd := steadyServerFigures(sc, rep, m, before, after, fleetAfter.CPUSeconds-fleetBefore.CPUSeconds)
	costs.server, costs.fleet, costs.alloc = ratioFigures(sc, set.bare, allocatedBetween(mBefore, m), rep.Requests)
	if win.sampled {
		steadySampledFigures(sc, rep, win)
		rss = new(win.peakRSS)
	}
	if win.metricsFrom != nil && win.metricsUntil != nil {
		steadyMetricFigures(sc, rep, win)
	}
	if e, ok := windowEndpoint(rep, "beat"); ok {
		beatP99 = new(e.P99MS)
	}
	fiveXX, falseDead = new(fx), new(fd)
	return nil
}

// steadyCosts are a steady run's whole-run costs against the yardstick: the server's and the
// fleet's CPU per request as ratios to the bare handler's, and the server's allocated bytes per
// request (ratioFigures); nil where not measured.
type steadyCosts struct {
	server, fleet, alloc *float64
}

// targets records the targets on c in sc, the server's CPU ratio under serverLimit.
func (c steadyCosts) targets(sc *scenarioReport, serverLimit float64) {
	limit := fmt.Sprintf("<= %g", serverLimit)
	sc.target(serverRatioFigure+" (whole run)", c.server, "x", limit, atMost(serverLimit))
	sc.target(fleetRatioFigure+" (whole run)", c.fleet, "x", fmt.Sprintf("<= %g", fleetRatioLimit), atMost(fleetRatioLimit))
	sc.target(allocFigure, c.alloc, "bytes", fmt.Sprintf("<= %d", allocLimitBytes), atMost(allocLimitBytes))
}

// allocatedBetween is the bytes the server allocated between two scrapes of its metrics (the Go
// runtime's cumulative count), 0 if either lacks it.
func allocatedBetween(from, until map[string]float64) float64 {
	a, b := metricSum(from, "go_memstats_alloc_bytes_total"), metricSum(until, "go_memstats_alloc_bytes_total")
	if a <= 0 || b <= a {
		return 0
	}
	return b - a
}

// steadyFleet is the steady scenario's fleet on s, and how long its profiles cover, from the
// start of its steady window (opts.WindowFrom). A fleet split over processes has the first of
// them profile itself (opts.ShardProfile); one in this process is profiled by profileFleet.
func steadyFleet(s *benchServer, set plan) (opts fleet.Options, profiledFor time.Duration) {
	opts = fleetOptions(s, set, set.Workers)
	// Arrivals are spread over a fifth of the run (a minute of the default five), so that the
	// first tasks end, and new ones are handed out, over a minute of the window too.
	opts.Arrival, opts.Ramp, opts.Duration = fleet.Ramp, min(time.Minute, set.duration/5), set.duration
	if set.wholeRun {
		opts.StopRamp = opts.Ramp
	}
	// The targets are the steady state's: the window leaves out the arrival ramp and the first
	// tasks' start, and the burst of final reports when the fleet stops.
	opts.Window, opts.WindowFrom = true, min(opts.Ramp+20*time.Second, set.duration/3)
	// The profile covers the working fleet: from the start of the window for up to a minute.
	profiledFor = min(time.Minute, set.duration-opts.WindowFrom-2*time.Second)
	if set.FleetProcesses > 1 {
		opts.Processes, opts.ShardCommand = set.FleetProcesses, []string{set.self, fleet.ShardSubcommand}
		if set.profiles != "" {
			opts.ShardProfile = &fleet.ShardProfile{Dir: set.profiles, Name: "steady", After: opts.WindowFrom, For: profiledFor}
			if !set.wholeRun {
				opts.ShardProfile.TraceFor = traceFor
			}
		}
	}
	return opts, profiledFor
}

// steadyServerFigures records the whole run's server figures: dead tasks from the server's
// metrics m, CPU and memory from /proc before and after, fleetCPU the fleet's CPU seconds. It
// returns the false dead tasks (reclaimed while their worker was alive).
func steadyServerFigures(sc *scenarioReport, rep *fleet.Report, m map[string]float64, before, after procUsage, fleetCPU float64) float64 {
	dead := metricSum(m, "shoal_scheduler_tasks_reclaimed_total", `reason="dead"`)
	fd := max(0, dead-float64(rep.WorkersVanished))
	sc.figure("dead-task reclaims", dead, "tasks")
	sc.figure("false dead tasks (reclaimed, worker alive)", fd, "tasks")
	sc.figure("tasks assigned", metricSum(m, "shoal_scheduler_tasks_assigned_total"), "tasks")
	cpu := after.CPUSeconds - before.CPUSeconds
	sc.figure("server CPU", cpu, "s")
	sc.figure("server CPU per wall second", cpu/max(rep.ElapsedSeconds, 1e-9), "cores")
	if rep.Requests > 0 {
		// Per request of any kind, the fleet's stop included; the database's part is the
		// embedded database process's (0 on MongoDB, which runs elsewhere).
		perRequest := func(secs float64) float64 { return secs / float64(rep.Requests) * 1e6 }
		sc.figure("server CPU per request", perRequest(cpu), "µs")
		sc.figure("server CPU per request: the embedded database's part", perRequest(after.ChildCPUSeconds-before.ChildCPUSeconds), "µs")
		sc.figure(fleetCPUFigure, perRequest(fleetCPU), "µs")
	}
	sc.figure("server resident memory (end)", after.RSSMiB, "MiB")
	sc.figure("server resident memory (peak over the whole run, VmHWM)", after.HWMMiB, "MiB")
	return fd
}

// steadySampledFigures records the server's CPU and memory sampled over the steady window.
func steadySampledFigures(sc *scenarioReport, rep *fleet.Report, win procWindow) {
	sc.figure("steady: server CPU per wall second", win.cores, "cores")
	sc.figure("steady: the embedded database's CPU per wall second", win.dbCores, "cores")
	if st := rep.Window; st != nil && st.Requests > 0 && st.UntilSeconds > st.FromSeconds {
		rate := float64(st.Requests) / (st.UntilSeconds - st.FromSeconds)
		sc.figure("steady: server CPU per request", win.cores/rate*1e6, "µs")
	}
	sc.figure("steady: server resident memory (peak, sampled every 0.5 s)", win.peakRSS, "MiB")
}

// steadyMetricFigures records what the server's metrics say of the steady window: its own view
// of the worker path's tails, the scheduling latencies, the run writes and the journal.
func steadyMetricFigures(sc *scenarioReport, rep *fleet.Report, win procWindow) {
	// The server's own view, without the loopback and the fleet's scheduling: the upper
	// bound of the histogram bucket holding the quantile.
	for _, route := range []string{"/api/beat", "/api/update_task", "/api/request_task"} {
		if q, ok := histQuantile(win.metricsFrom, win.metricsUntil, "shoal_http_request_duration_seconds", 0.99, `route="`+route+`"`); ok {
			sc.figure("steady: server-side "+strings.TrimPrefix(route, "/api/")+" p99 (bucket upper bound)", q*1000, "ms")
		}
	}
	// Where a tail the handler does not see waits: for a CPU in the server (its goroutines'
	// scheduling latency) or in the fleet's process.
	if q, ok := histQuantile(win.metricsFrom, win.metricsUntil, "go_sched_latencies_seconds", 0.99); ok {
		sc.figure("steady: server scheduling latency p99 (runnable to running, bucket upper bound)", q*1000, "ms")
	}
	if st := rep.Window; st != nil && st.SchedLatencyP99MS != nil {
		sc.figure("steady: fleet scheduling latency p99 (runnable to running, bucket upper bound)", *st.SchedLatencyP99MS, "ms")
	}
	delta := func(name string) float64 { return metricSum(win.metricsUntil, name) - metricSum(win.metricsFrom, name) }
	if flushes := delta("shoal_runcache_flush_duration_seconds_count"); flushes > 0 {
		sc.figure("steady: run writes (run cache flushes)", flushes, "writes")
		sc.figure("steady: run write mean duration", delta("shoal_runcache_flush_duration_seconds_sum")/flushes*1000, "ms")
	}
	if batches := delta("shoal_journal_write_duration_seconds_count"); batches > 0 {
		sc.figure("steady: journal batches", batches, "writes")
		sc.figure("steady: journal batch mean duration", delta("shoal_journal_write_duration_seconds_sum")/batches*1000, "ms")
		sc.figure("steady: journal records per batch (mean)", delta("shoal_journal_batch_records_sum")/batches, "records")
		if q, ok := histQuantile(win.metricsFrom, win.metricsUntil, "shoal_journal_write_duration_seconds", 0.99); ok {
			sc.figure("steady: journal batch p99 (bucket upper bound)", q*1000, "ms")
		}
		if waits := delta("shoal_journal_wait_seconds_count"); waits > 0 {
			sc.figure("steady: journal wait mean (queued to stored)", delta("shoal_journal_wait_seconds_sum")/waits*1000, "ms")
		}
		if q, ok := histQuantile(win.metricsFrom, win.metricsUntil, "shoal_journal_wait_seconds", 0.99); ok {
			sc.figure("steady: journal wait p99 (bucket upper bound)", q*1000, "ms")
		}
	}
}

// baselineScenario is the report's name for the steady scenario's first leg against
// --baseline; baselineAgain and steadyAgain name the second legs of the baseline and of this
// build (benchSteadyAgainst).
const (
	baselineScenario = "steady-baseline"
	steadyAgain      = "steady-again"
	baselineAgain    = "steady-baseline-again"
)

// comparedFigures are the steady figures benchSteadyAgainst reports as ratios of the baseline's:
// the worker path's latencies in the steady window, and the server's CPU.
var comparedFigures = []string{"steady: beat p99", "steady: update_task p99", "steady: request_task p99",
	"steady: beat p50", "steady: update_task p50", "steady: server CPU per wall second"}

// benchSteadyAgainst runs the steady scenario four times in one bench run, against the
// baseline binary, this one, this one again and the baseline again, and records this build's
// figures as ratios of the baseline's (below 1: this build is faster or cheaper): the geometric
// mean of the two pairs' ratios. Legs alternate because a leg's place in the run weighs on its
// tails (docs/benchmarks/README.md, "How it measures"): in one pair this build runs second, in
// the other the baseline does, so a factor that comes with the place cancels out.
func benchSteadyAgainst(ctx context.Context, set plan, sc *scenarioReport, rep *benchReport, stdout, stderr io.Writer) error {
	base, base2, this2 := &scenarioReport{}, &scenarioReport{}, &scenarioReport{}
	// Every leg is profiled (into a directory of its own, see plan.servedBy): the profiles cost
	// the server (mutex and block sampling) and the fleet some CPU, which all legs should pay
	// alike.
	legs := []struct {
		what, name string
		set        plan
		sc         *scenarioReport
	}{
		{"the baseline " + set.Baseline, baselineScenario, set.servedBy(set.Baseline, "baseline"), base},
		{"this build", "steady", set, sc},
		{"this build, again", steadyAgain, set.servedBy(set.serverExe, "again"), this2},
		{"the baseline, again", baselineAgain, set.servedBy(set.Baseline, "baseline-again"), base2},
	}
	for _, leg := range legs {
		fmt.Fprintf(stdout, "bench: steady against %s...\n", leg.what)
		rep.Scenarios[leg.name] = leg.sc
		if err := benchSteady(ctx, leg.set, leg.sc, stderr); err != nil {
			if leg.sc != sc {
				leg.sc.Error = err.Error()
			}
			return fmt.Errorf("%s: %w", leg.name, err)
		}
	}
	pairedRatios(sc, base, this2, base2)
	baselineTargets(sc)
	return nil
}

// baselineTargets judges the worker path against the baseline: each call's p99 in the steady
// window, as the paired ratio, at most 1. A call no leg made in its window (request_task, when
// a short run's tasks outlast it) cannot be judged, and sc's notes say so.
func baselineTargets(sc *scenarioReport) {
	var unjudged []string
	for _, call := range []string{"beat", "update_task", "request_task"} {
		v, ok := sc.value("ratio to the baseline: " + call + " p99")
		if !ok {
			unjudged = append(unjudged, call)
			continue
		}
		sc.target(call+" p99 (steady window) / the baseline's", new(v), "x", "<= 1", atMost(1))
	}
	if len(unjudged) > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("Not judged against the baseline, as a leg's steady window had no call of it: %s.",
			strings.Join(unjudged, ", ")))
	}
}

// pairedRatios records in this1 this build's comparedFigures as ratios of the baseline's: the
// geometric mean of this1/base1 (this build ran second) and this2/base2 (the baseline did).
func pairedRatios(this1, base1, this2, base2 *scenarioReport) {
	for _, name := range comparedFigures {
		b1, ok1 := this1.value(name)
		a1, ok2 := base1.value(name)
		b2, ok3 := this2.value(name)
		a2, ok4 := base2.value(name)
		if ok1 && ok2 && ok3 && ok4 && a1 > 0 && a2 > 0 {
			this1.figure("ratio to the baseline: "+strings.TrimPrefix(name, "steady: "), math.Sqrt(b1/a1*b2/a2), "x")
		}
	}
}
