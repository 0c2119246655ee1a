package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// stormLeg is one of a storm size's runs: what stdout calls it, its figures' label, its plan
// (which binary serves), and its result.
type stormLeg struct {
	what, label string
	set         plan
	res         *stormResult
}

// stormRatios records this build's storm figures as ratios of the baseline's, each the
// geometric mean of the two pairs' (this1/base1, where this build ran second, and
// this2/base2, where the baseline did), as pairedRatios does for steady.
func stormRatios(sc *scenarioReport, label string, this1, base1, this2, base2 *stormResult) {
	for _, f := range []struct {
		name string
		of   func(*stormResult) float64
	}{
		{"too-busy replies per worker", (*stormResult).tooBusyPerWorker},
		{"tasks handed out", func(r *stormResult) float64 { return float64(r.rep.TasksStarted) }},
		{"request_task p99", func(r *stormResult) float64 { return r.requestTask().P99MS }},
		{"server CPU", func(r *stormResult) float64 { return r.cpu }},
	} {
		if b1, b2 := f.of(base1), f.of(base2); b1 > 0 && b2 > 0 {
			sc.figure(fmt.Sprintf("%s: ratio to the baseline: %s", label, f.name), math.Sqrt(f.of(this1)/b1*f.of(this2)/b2), "x")
		}
	}
}

// stormTargetUpTo is the largest storm the targets hold for; larger ones are reported.
const stormTargetUpTo = 5000

// stormLimit bounds a storm: workers that hold no task by then never got one.
const stormLimit = 60 * time.Second

// benchStorm is the storm scenario: for each of set.StormSizes, that many workers arrive at once
// (within a second) at a fresh server, and the figures say how the server absorbs them: the time
// until 99 % of them hold a task, too-busy replies per worker, tasks handed out, request_task's
// latency, the server's CPU, and the exactly-once check. With --baseline each size runs four
// times, alternating between the baseline's server and this build's, for this build's ratios
// to it.
func benchStorm(ctx context.Context, set plan, sc *scenarioReport, stdout, stderr io.Writer) error {
	for _, w := range set.StormSizes {
		label := fmt.Sprintf("storm %d", w)
		// Against a baseline the storm runs four times, alternating as steady does (baseline,
		// this build, this build again, baseline again), so that a leg's place in the run
		// cancels out of the ratios; this build's figures and targets are its first leg's.
		legs := []stormLeg{{"", label, set, nil}}
		if set.Baseline != "" {
			legs = []stormLeg{
				{" against the baseline", label + " baseline", set.servedBy(set.Baseline, "baseline"), nil},
				{"", label, set, nil},
				{", again", label + " again", set.servedBy(set.serverExe, "again"), nil},
				{" against the baseline, again", label + " baseline again", set.servedBy(set.Baseline, "baseline-again"), nil},
			}
		}
		var r *stormResult
		for i := range legs {
			leg := &legs[i]
			fmt.Fprintf(stdout, "bench: %s%s...\n", label, leg.what)
			var err error
			if leg.res, err = stormOnce(ctx, leg.set, w, stderr); err != nil {
				return fmt.Errorf("%s: %w", leg.label, err)
			}
			leg.res.figures(sc, leg.label)
			if leg.label == label {
				r = leg.res
			}
		}
		if len(legs) == 4 {
			stormRatios(sc, label, legs[1].res, legs[0].res, legs[2].res, legs[3].res)
		}
		if w > stormTargetUpTo {
			continue
		}
		sc.Profile, sc.FleetProfile = r.profile, r.fleetProfile // the largest storm with targets: what limits them
		var held *float64
		if p := r.rep.FirstTaskP99S; p >= 0 {
			held = new(p)
		}
		sc.target(label+": time until 99 % of the workers hold a task", held, "s", "<= 15", func(v float64) bool { return v <= 15 })
		sc.target(label+": too-busy replies per worker", new(r.tooBusyPerWorker()), "replies", "<= 1", func(v float64) bool { return v <= 1 })
		sc.target(label+": request_task p99", new(r.requestTask().P99MS), "ms", "< 100", below(100))
		sc.target(label+": exactly-once check", new(boolFigure(r.rep.ExactlyOnce)), "bool", "= 1", func(v float64) bool { return v == 1 })
	}
	sc.explainUnmet(set)
	return nil
}

// stormProfiled is how long the storm's profiles run from the first arrival: the arrival and
// the first tasks, not the games that follow.
const stormProfiled = 5 * time.Second

// stormResult is one storm against one server.
type stormResult struct {
	workers int
	rep     *fleet.Report
	cpu     float64 // the server's CPU seconds from the first arrival to the fleet's end
	// arrival is from the first arrival until 99 % of the workers held a task (0 if they never
	// did); serverCores and fleetCores are the CPU each side used over it, per wall second.
	arrival                 time.Duration
	serverCores, fleetCores float64
	// serverP50MS and serverP99MS are request_task's quantiles in the server's own histogram
	// (bucket upper bounds), from the handler's start to its answer: without the time spent
	// waiting to be accepted and read, or in the fleet.
	serverP50MS, serverP99MS float64
	profile                  *profileSummary
	// fleetProfile is the bench process's over the same time: the client side of the storm.
	fleetProfile *profileSummary
}

func (r *stormResult) tooBusyPerWorker() float64 { return float64(r.rep.TooBusy) / float64(r.workers) }

func (r *stormResult) requestTask() fleet.EndpointReport { return r.rep.Endpoints["request_task"] }

// figures reports r under label.
func (r *stormResult) figures(sc *scenarioReport, label string) {
	if r.rep.FirstTaskP99S >= 0 {
		sc.figure(label+": time until 99 % of the workers hold a task", r.rep.FirstTaskP99S, "s")
	} else {
		sc.figure(label+": workers without a task after the storm's limit (more than 1 %)", float64(r.rep.WorkersUntasked), "workers")
	}
	sc.figure(label+": time until half the workers hold a task", r.rep.FirstTaskP50S, "s")
	sc.figure(label+": too-busy replies per worker", r.tooBusyPerWorker(), "replies")
	sc.figure(label+": tasks handed out", float64(r.rep.TasksStarted), "tasks")
	rt := r.requestTask()
	sc.figure(label+": request_task p50", rt.P50MS, "ms")
	sc.figure(label+": request_task p99", rt.P99MS, "ms")
	if r.serverP99MS > 0 {
		sc.figure(label+": server-side request_task p50 (bucket upper bound)", r.serverP50MS, "ms")
		sc.figure(label+": server-side request_task p99 (bucket upper bound)", r.serverP99MS, "ms")
	}
	sc.figure(label+": server CPU", r.cpu, "s")
	if r.arrival > 0 {
		sc.figure(label+": arrival (until 99 % were given a task)", r.arrival.Seconds(), "s")
		sc.figure(label+": server CPU per wall second over the arrival", r.serverCores, "cores")
		sc.figure(label+": fleet CPU per wall second over the arrival", r.fleetCores, "cores")
	}
	sc.figure(label+": exactly-once check passed", boolFigure(r.rep.ExactlyOnce), "bool")
	sc.figure(label+": updates in doubt (no reply)", float64(r.rep.UpdatesInDoubt), "calls")
}

// stormOnce starts a server, lets w workers arrive at once, and stops them 5 s after 99 % of
// them hold a task (or at stormLimit).
func stormOnce(ctx context.Context, set plan, w int, stderr io.Writer) (*stormResult, error) {
	s, err := startBenchServer(ctx, set, w, stderr)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if _, err := s.submitRuns(ctx, max(1, min(set.Runs, 10))); err != nil {
		return nil, err
	}
	before, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	fleetBefore, err := readProc(os.Getpid())
	if err != nil {
		return nil, err
	}
	metricsBefore, err := scrapeMetrics(ctx, s.base)
	if err != nil {
		return nil, err
	}
	res := &stormResult{workers: w}
	start := time.Now()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := fleetOptions(s, set, w)
	opts.Arrival, opts.Ramp, opts.Duration = fleet.Ramp, time.Second, stormLimit // all arriving within a second
	// The profiles cover the arrival, where the storm's targets are decided.
	profiled := profileDuring(ctx, s, set, fmt.Sprintf("storm-%d", w), 0, stormProfiled)
	fleetProfiled := profileFleet(ctx, set, fmt.Sprintf("storm-%d", w), 0, stormProfiled)
	var rep *fleet.Report
	var runErr error
	done := make(chan struct{})
	go func() { rep, runErr = fleet.Run(fctx, opts); close(done) }() // joined below
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
poll:
	for {
		select {
		case <-done:
			break poll
		case <-tick.C:
		}
		m, err := scrapeMetrics(ctx, s.base)
		if err == nil && metricSum(m, "shoal_scheduler_tasks_assigned_total") >= 0.99*float64(w) {
			res.arrival = time.Since(start)
			srv, serr := readServer(s.cmd.Process.Pid)
			fl, ferr := readProc(os.Getpid())
			if serr == nil && ferr == nil {
				res.serverCores = (srv.CPUSeconds - before.CPUSeconds) / res.arrival.Seconds()
				res.fleetCores = (fl.CPUSeconds - fleetBefore.CPUSeconds) / res.arrival.Seconds()
			}
			select {
			case <-time.After(5 * time.Second):
			case <-done:
			}
			cancel()
			break poll
		}
	}
	<-done
	if m, err := scrapeMetrics(ctx, s.base); err == nil {
		route := `route="/api/request_task"`
		if q, ok := histQuantile(metricsBefore, m, "shoal_http_request_duration_seconds", 0.5, route); ok {
			res.serverP50MS = q * 1000
		}
		if q, ok := histQuantile(metricsBefore, m, "shoal_http_request_duration_seconds", 0.99, route); ok {
			res.serverP99MS = q * 1000
		}
	}
	after, err := readServer(s.cmd.Process.Pid)
	res.profile, res.fleetProfile = <-profiled, <-fleetProfiled
	if runErr != nil {
		return nil, runErr
	}
	if err != nil {
		return nil, err
	}
	if !rep.ExactlyOnce {
		// The runs that differ, for whoever reads the bench's output.
		fmt.Fprintf(stderr, "bench: storm of %d workers (server %s): the exactly-once check failed:\n", w, set.serverExe)
		_ = rep.WriteText(stderr)
	}
	res.rep, res.cpu = rep, after.CPUSeconds-before.CPUSeconds
	return res, nil
}
