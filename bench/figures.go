package bench

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// benchFigure is one measured number.
type benchFigure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// benchTarget is one of the bench's targets (docs/benchmarks/README.md): the figure (nil when it could not be measured),
// the target as text ("< 25") and whether it is met.
type benchTarget struct {
	Name   string   `json:"name"`
	Figure *float64 `json:"figure"`
	Unit   string   `json:"unit"`
	Target string   `json:"target"`
	Met    bool     `json:"met"`
}

func (s *scenarioReport) figure(name string, v float64, unit string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	s.Figures = append(s.Figures, benchFigure{name, v, unit})
}

// target records a target; ok(v) says whether v meets it.
func (s *scenarioReport) target(name string, v *float64, unit, target string, ok func(float64) bool) {
	t := benchTarget{Name: name, Unit: unit, Target: target}
	if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
		t.Figure = v
		t.Met = ok(*v)
	}
	s.Targets = append(s.Targets, t)
}

func below(limit float64) func(float64) bool { return func(v float64) bool { return v < limit } }

func atLeast(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }

func atMost(limit float64) func(float64) bool { return func(v float64) bool { return v <= limit } }

// fleetFigures records what every fleet scenario reports: per-endpoint latency and rates,
// too-busy replies and 5xx.
func fleetFigures(sc *scenarioReport, rep *fleet.Report) (fiveXX float64) {
	sc.Endpoints = rep.Endpoints
	secs := max(rep.ElapsedSeconds, 1e-9)
	sc.figure("requests per second", float64(rep.Requests)/secs, "req/s")
	endpointFigures(sc, "", rep.Endpoints, secs)
	for code, n := range rep.HTTPErrors {
		if strings.HasPrefix(code, "5") {
			fiveXX += float64(n)
		}
	}
	sc.figure("too-busy replies", float64(rep.TooBusy), "replies")
	sc.figure("5xx replies", fiveXX, "replies")
	sc.figure("transport errors", float64(rep.TransportErrors), "calls")
	sc.figure("games reported", float64(rep.GamesReported), "games")
	sc.figure("exactly-once check passed", boolFigure(rep.ExactlyOnce), "bool")
	// What the check depends on: an update_task without a reply (cut off when the fleet
	// stops) may or may not have been applied, so the server can hold games the fleet never
	// saw accepted without any being lost.
	sc.figure("updates in doubt (no reply)", float64(rep.UpdatesInDoubt), "calls")
	sc.figure("requests cancelled by the fleet", float64(rep.CancelledRequests), "calls")
	sc.figure("tasks with updates from two workers", float64(rep.SharedTasks), "tasks")
	var server, fleet float64
	for _, r := range rep.Runs {
		server += float64(r.ServerGames)
		fleet += float64(r.FleetGames)
	}
	sc.figure("server games minus fleet-accepted games", server-fleet, "games")
	return fiveXX
}

// windowFigures records the latencies and rates of the fleet's window (fleet.WindowReport),
// each figure's name starting with label.
func windowFigures(sc *scenarioReport, rep *fleet.Report, label string) {
	st := rep.Window
	if st == nil {
		return
	}
	secs := max(st.UntilSeconds-st.FromSeconds, 1e-9)
	sc.figure(label+" window start (after the first arrival)", st.FromSeconds, "s")
	sc.figure(label+" window end (the fleet starts to stop)", st.UntilSeconds, "s")
	sc.figure(label+": requests per second", float64(st.Requests)/secs, "req/s")
	endpointFigures(sc, label+": ", st.Endpoints, secs)
	sc.figure(label+": too-busy replies", float64(st.TooBusy), "replies")
}

// endpointFigures records each endpoint's rate over secs seconds and its latencies, endpoints
// in name order, each figure's name starting with prefix.
func endpointFigures(sc *scenarioReport, prefix string, endpoints map[string]fleet.EndpointReport, secs float64) {
	for _, name := range slices.Sorted(maps.Keys(endpoints)) {
		e := endpoints[name]
		sc.figure(prefix+name+" rate", float64(e.Requests)/secs, "req/s")
		sc.figure(prefix+name+" p50", e.P50MS, "ms")
		sc.figure(prefix+name+" p99", e.P99MS, "ms")
		sc.figure(prefix+name+" max", e.MaxMS, "ms")
	}
}

// windowEndpoint is an endpoint's figures in the fleet's window, if it was called there.
func windowEndpoint(rep *fleet.Report, name string) (fleet.EndpointReport, bool) {
	if rep.Window == nil {
		return fleet.EndpointReport{}, false
	}
	e, ok := rep.Window.Endpoints[name]
	return e, ok && e.Requests > 0
}

// value is the figure named name, if the scenario has it.
func (s *scenarioReport) value(name string) (float64, bool) {
	for _, f := range s.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// explainUnmet records what limits each target not met, from the scenario's figures: for
// steady's beat p99, whether the time passes in the server's handler (its own histogram) or
// outside it.
func (s *scenarioReport) explainUnmet(set plan) {
	for _, t := range s.Targets {
		if t.Met || t.Figure == nil {
			continue
		}
		if storm, found := strings.CutSuffix(t.Name, ": request_task p99"); found && strings.HasPrefix(storm, "storm ") {
			if line, ok := s.explainStorm(storm, t); ok {
				s.Limits = append(s.Limits, line)
				continue
			}
		}
		if t.Name == allocFigure && set.bare != nil && set.bare.allocB > 0 {
			s.Limits = append(s.Limits, fmt.Sprintf("%s: the yardstick, a bare net/http handler, allocated %.0f B a request in this run (%.2fx the target); "+
				"what the server allocates is in its allocation profile below (go tool pprof -sample_index=alloc_space).", t.Name, set.bare.allocB, set.bare.allocB/allocLimitBytes))
			continue
		}
		server, ok := s.value("steady: server-side beat p99 (bucket upper bound)")
		if t.Name != "beat p99 (steady window)" || !ok {
			s.Limits = append(s.Limits, fmt.Sprintf("%s: see the CPU profiles below.", t.Name))
			continue
		}
		if server >= 25 {
			s.Limits = append(s.Limits, fmt.Sprintf("%s: the server's own histogram puts beat p99 at up to %g ms: the handler itself is over the target; see the server's CPU profile below.", t.Name, server))
			continue
		}
		line := fmt.Sprintf("%s: the fleet saw %.4g ms, while the server's own histogram puts beat p99 at no more than %g ms from the request's arrival in the handler to its answer. "+
			"The handler meets the target; the rest passes outside it, on the loopback and waiting for a core, as the server and the fleet's %d workers share this machine's %d cores",
			t.Name, *t.Figure, server, set.Workers, runtime.NumCPU())
		if cpu, ok := s.value("steady: server CPU per wall second"); ok {
			line += fmt.Sprintf(" (the server used %.2f cores over the window; the fleet's own profile is below)", cpu)
		}
		line += "."
		if w, ok := s.value("steady: run write mean duration"); ok {
			n, _ := s.value("steady: run writes (run cache flushes)")
			line += fmt.Sprintf(" The server's largest single cost is writing runs to the embedded database: %.0f writes of %.0f ms each in the window, the FerretDB share of its profile.", n, w)
		}
		s.Limits = append(s.Limits, line)
	}
}

// explainStorm says where a storm's request_task p99 went: in the server's handler, or before
// it (waiting to be accepted and read) and in the fleet, with how busy each side's core was
// while the workers arrived.
func (s *scenarioReport) explainStorm(storm string, t benchTarget) (string, bool) {
	server, ok := s.value(storm + ": server-side request_task p99 (bucket upper bound)")
	if !ok {
		return "", false
	}
	line := fmt.Sprintf("%s: the fleet saw %.4g ms; the server's own histogram puts request_task p99 at no more than %g ms from the handler's start to its answer",
		t.Name, *t.Figure, server)
	if server >= 100 {
		line += ": the handler itself is over the target"
	} else {
		line += ": the rest passed before the handler (the connection waiting to be accepted and its request to be read) and in the fleet"
	}
	srv, ok1 := s.value(storm + ": server CPU per wall second over the arrival")
	fl, ok2 := s.value(storm + ": fleet CPU per wall second over the arrival")
	arrival, ok3 := s.value(storm + ": arrival (until 99 % were given a task)")
	if ok1 && ok2 && ok3 {
		line += fmt.Sprintf(". Over the %.3g s the arrival took, the server used %.2f of its core and the fleet %.2f of its own", arrival, srv, fl)
	}
	return line + "; the CPU profiles below cover the arrival.", true
}

func boolFigure(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
