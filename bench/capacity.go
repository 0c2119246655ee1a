package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// capacityFleet is the headline target of the capacity scenario: the largest equivalent fleet
// (workers x time scale) that held every target.
const capacityFleet = 500000

// capacityTooBusy names a step's too-busy replies as a share of its request_task calls.
const capacityTooBusy = "too-busy replies per request_task call"

// capacityTarget is one of the targets a step of the capacity scenario is judged by,
// over the whole run: the figure of the step's report it reads, and the limit the figure must
// stay under. endpoint, if set, is the fleet's endpoint the figure is a latency of: a step whose
// fleet never called it (upload_pgn, when no task ended within the step) cannot judge it.
type capacityTarget struct {
	name, figure, unit, target, endpoint string
	limit                                float64
}

// capacityTargets are the targets a server must hold on one core over the whole run.
var capacityTargets = []capacityTarget{
	{"beat p99 (whole run)", "beat p99", "ms", "< 25", "beat", 25},
	{"update_task p99 (whole run)", "update_task p99", "ms", "< 50", "update_task", 50},
	{"request_task p99 (whole run)", "request_task p99", "ms", "< 100", "request_task", 100},
	{"upload_pgn p99 (whole run)", "upload_pgn p99", "ms", "< 250", "upload_pgn", 250},
	{"5xx replies", "5xx replies", "replies", "= 0", "", 0.5},
	{"false dead tasks", "false dead tasks (reclaimed, worker alive)", "tasks", "= 0", "", 0.5},
	{"too-busy replies per request_task call", capacityTooBusy, "%", "< 1", "", 1},
	{"server resident memory (peak over the whole run)", "server resident memory (peak over the whole run, VmHWM)", "MiB", "< 1024", "", 1024},
}

// capacityVerdict is what a step of the capacity scenario held: the targets it broke and those
// it could not judge, each said in words.
type capacityVerdict struct {
	broke, unmeasured []string
}

// held is whether the step broke no target. A target it could not measure (an endpoint its
// fleet never called) is not broken: the step is judged on the targets measured.
func (v capacityVerdict) held() bool { return len(v.broke) == 0 }

// judgeCapacityStep records the capacity targets in sc, a step's report (the steady scenario's
// whole-run figures, and sc.Endpoints), and says which it broke, and by how much.
func judgeCapacityStep(sc *scenarioReport) capacityVerdict {
	var v capacityVerdict
	if rt, ok := sc.Endpoints["request_task"]; ok && rt.Requests > 0 {
		busy, _ := sc.value("too-busy replies")
		sc.figure(capacityTooBusy, 100*busy/float64(rt.Requests), "%")
	}
	for _, t := range capacityTargets {
		fig, ok := sc.value(t.figure)
		if e, called := sc.Endpoints[t.endpoint]; t.endpoint != "" && (!called || e.Requests == 0) {
			ok = false
		}
		var figure *float64
		if ok {
			figure = new(fig)
		}
		sc.target(t.name, figure, t.unit, t.target, below(t.limit))
		switch {
		case !ok:
			what := "not measured"
			if t.endpoint != "" {
				what = "not called in this step"
			}
			v.unmeasured = append(v.unmeasured, fmt.Sprintf("%s (%s)", t.name, what))
		case fig >= t.limit:
			miss := fmt.Sprintf("%s: %.4g %s, target %s %s", t.name, fig, t.unit, t.target, t.unit)
			if !strings.HasPrefix(t.target, "=") {
				miss += fmt.Sprintf(" (%.2fx the limit)", fig/t.limit)
			}
			v.broke = append(v.broke, miss)
		}
	}
	return v
}

// ParseScales reads --capacity-scales: time scales separated by commas ("10,20,50"). newPlan
// checks that each is at least 1 and that they rise.
func ParseScales(list string) ([]float64, error) {
	var scales []float64
	for f := range strings.SplitSeq(list, ",") {
		k, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("invalid --capacity-scales %q: want time scales separated by commas", list)
		}
		scales = append(scales, k)
	}
	return scales, nil
}

// checkScales is newPlan's check of the capacity ladder: time scales of at least 1, each larger
// than the one before.
func checkScales(scales []float64) error {
	if len(scales) == 0 {
		return errors.New("bench: --capacity-scales is empty")
	}
	for i, k := range scales {
		if !(k >= 1) {
			return fmt.Errorf("bench: --capacity-scales: %g is under 1", k)
		}
		if i > 0 && !(k > scales[i-1]) {
			return fmt.Errorf("bench: --capacity-scales must rise: %g after %g", k, scales[i-1])
		}
	}
	return nil
}

// equivalentFleet is the fleet a step's workers stand for at time scale k.
func equivalentFleet(workers int, k float64) int { return int(float64(workers) * k) }

// capacityStep names step i (from 0) of workers at time scale k in the report.
func capacityStep(i, workers int, k float64) string {
	return fmt.Sprintf("capacity-%d-equivalent-%d", i+1, equivalentFleet(workers, k))
}

// climbCapacity runs the ladder's steps in order, step(i, k) running step i at time scale k,
// and stops at the first step that breaks a target or fails. It returns the largest equivalent
// fleet of workers that held every target (0 if none did) and the failed step's error.
func climbCapacity(scales []float64, workers int, step func(i int, k float64) (capacityVerdict, error)) (int, error) {
	largest := 0
	for i, k := range scales {
		v, err := step(i, k)
		if err != nil {
			return largest, err
		}
		if !v.held() {
			break
		}
		largest = equivalentFleet(workers, k)
	}
	return largest, nil
}

// benchCapacity is the capacity scenario: the steady scenario's fleet of set.Workers on
// set.Runs runs, its time scale raised step by step through set.CapacityScales, each step on a
// fresh server whose periods are compressed by the step's scale (ServerTimesAt) and for
// set.capacityLeg. Each step is judged by capacityTargets over its whole run (the fleet's
// whole-run percentiles, the window's reported beside them), and the climb stops at the first
// step that breaks one. Each step is a section of its own (capacityStep); the scenario's holds
// each step's main figures and the headline: the largest equivalent fleet that held every target.
func benchCapacity(ctx context.Context, set plan, sc *scenarioReport, rep *benchReport, stdout, stderr io.Writer) error {
	largest := 0
	defer func() {
		sc.figure("largest equivalent fleet that held every target", float64(largest), "workers")
		sc.target("largest equivalent fleet that held every target", new(float64(largest)), "workers",
			fmt.Sprintf(">= %d", capacityFleet), atLeast(capacityFleet))
		ladderCosts(sc, rep, set).targets(sc, ladderRatioLimit)
		heldSummary(sc, rep, set, largest)
	}()
	n := len(set.CapacityScales)
	largest, err := climbCapacity(set.CapacityScales, set.Workers, func(i int, k float64) (capacityVerdict, error) {
		name := capacityStep(i, set.Workers, k)
		leg := &scenarioReport{}
		rep.Scenarios[name] = leg
		eq := equivalentFleet(set.Workers, k)
		fmt.Fprintf(stdout, "bench: capacity step %d of %d: %d workers at time scale %g (equivalent %d)...\n", i+1, n, set.Workers, k, eq)
		lset := set
		lset.TimeScale, lset.duration = k, set.capacityLeg
		lset.wholeRun = true
		if set.profiles != "" {
			lset.profiles = filepath.Join(set.profiles, name)
		}
		err := benchSteady(ctx, lset, leg, stderr)
		// The steady scenario's targets are its window's; a step is judged over its whole run.
		leg.Targets, leg.Limits = nil, nil
		if err != nil {
			leg.Error = err.Error()
			return capacityVerdict{}, fmt.Errorf("step %d (time scale %g): %w", i+1, k, err)
		}
		v := judgeCapacityStep(leg)
		capacityFigures(sc, leg, fmt.Sprintf("step %d (k = %g)", i+1, k), v)
		for _, b := range v.broke {
			if leg.Profile != nil {
				b += "; see the CPU profiles below"
			}
			leg.Limits = append(leg.Limits, b+".")
		}
		var verdict string
		switch {
		case !v.held():
			verdict = fmt.Sprintf("step %d (time scale %g, equivalent %d) broke %s; the climb stopped there.", i+1, k, eq, strings.Join(v.broke, "; "))
			sc.Limits = append(sc.Limits, verdict)
		case len(v.unmeasured) > 0:
			verdict = fmt.Sprintf("step %d (time scale %g, equivalent %d) held every target it measured; not measured: %s.",
				i+1, k, eq, strings.Join(v.unmeasured, ", "))
			sc.Limits = append(sc.Limits, verdict)
		default:
			verdict = fmt.Sprintf("step %d (time scale %g, equivalent %d) held every target.", i+1, k, eq)
		}
		fmt.Fprintf(stdout, "bench: capacity %s\n", verdict)
		return v, nil
	})
	return err
}

// capacityFigures are the figures of a step (its report leg) that the capacity scenario's
// section repeats, each named after label.
func capacityFigures(sc, leg *scenarioReport, label string, v capacityVerdict) {
	sc.figure(label+": equivalent fleet", valueOr(leg, "equivalent workers (workers x time scale)"), "workers")
	for _, name := range []string{"beat", "update_task", "request_task", "upload_pgn"} {
		if e, ok := leg.Endpoints[name]; ok && e.Requests > 0 {
			sc.figure(label+": "+name+" p99 (whole run)", e.P99MS, "ms")
		}
	}
	for _, f := range []struct{ figure, name string }{
		{capacityTooBusy, capacityTooBusy},
		{"5xx replies", "5xx replies"},
		{"false dead tasks (reclaimed, worker alive)", "false dead tasks"},
		{"server resident memory (peak over the whole run, VmHWM)", "server resident memory (peak, VmHWM)"},
		{"server CPU per wall second", "server CPU per wall second (whole run)"},
		{"server CPU per request", "server CPU per request (whole run)"},
		{serverRatioFigure, serverRatioFigure + " (whole run)"},
		{fleetCPUFigure, "fleet CPU per request (whole run)"},
		{fleetRatioFigure, fleetRatioFigure + " (whole run)"},
		{allocFigure, allocFigure},
		{allocRatioFigure, allocRatioFigure},
	} {
		if x, ok := leg.value(f.figure); ok {
			sc.figure(label+": "+f.name, x, unitOf([]*scenarioReport{leg}, f.figure))
		}
	}
	sc.figure(label+": held every target", boolFigure(v.held()), "bool")
}

// valueOr is the figure name of sc, or 0.
func valueOr(sc *scenarioReport, name string) float64 {
	v, _ := sc.value(name)
	return v
}

// equivalentFleets are the equivalent fleets of workers at each of scales.
func equivalentFleets(workers int, scales []float64) []int {
	eq := make([]int, len(scales))
	for i, k := range scales {
		eq[i] = equivalentFleet(workers, k)
	}
	return eq
}

// ladderCosts are the costs (steadyCosts) of the ladder's step at capacityFleet equivalent
// workers, recorded in sc under that step's name; each is nil if no step ran at that size.
func ladderCosts(sc *scenarioReport, rep *benchReport, set plan) steadyCosts {
	var c steadyCosts
	for i, k := range set.CapacityScales {
		if equivalentFleet(set.Workers, k) != capacityFleet {
			continue
		}
		leg := rep.Scenarios[capacityStep(i, set.Workers, k)]
		if leg == nil {
			break
		}
		read := func(name string) *float64 {
			if v, ok := leg.value(name); ok {
				return new(v)
			}
			return nil
		}
		c.server, c.fleet, c.alloc = read(serverRatioFigure), read(fleetRatioFigure), read(allocFigure)
	}
	return c
}

// heldSummary says in sc's notes which steps held every target, each with its CPU ratios to
// the yardstick beside it, the largest held step first.
func heldSummary(sc *scenarioReport, rep *benchReport, set plan, largest int) {
	if largest == 0 {
		return
	}
	var held []string
	for i, k := range set.CapacityScales {
		eq := equivalentFleet(set.Workers, k)
		leg := rep.Scenarios[capacityStep(i, set.Workers, k)]
		if leg == nil || eq > largest {
			break
		}
		line := fmt.Sprintf("%s (k = %g)", humanize.Comma(int64(eq)), k)
		if us, ok := leg.value("server CPU per request"); ok {
			line += fmt.Sprintf(": server %.1f µs a request", us)
			if r, ok := leg.value(serverRatioFigure); ok {
				line += fmt.Sprintf(" (%.2fx bare)", r)
			}
		}
		if r, ok := leg.value(fleetRatioFigure); ok {
			line += fmt.Sprintf(", fleet %.2fx bare", r)
		}
		if b, ok := leg.value(allocFigure); ok {
			line += fmt.Sprintf(", %s B allocated a request", humanize.Comma(int64(b)))
			if r, ok := leg.value(allocRatioFigure); ok {
				line += fmt.Sprintf(" (%.2fx bare)", r)
			}
		}
		held = append([]string{line}, held...)
	}
	sc.Notes = append(sc.Notes, "**Held every target over the whole run:** "+strings.Join(held, "; ")+".")
}
