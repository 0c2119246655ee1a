// Package bench is the harness of `shoal-bench bench`: it starts the server as a separate
// `shoal serve` process (the product's binary) on a temporary embedded database (or a fresh
// database on MongoDB), drives it with a simulated fleet from this process, and writes
// report.json and report.md. Its scenarios are steady, storm, ceiling, critical-section, durability, capacity
// and reconnect; Run runs those asked for.
//
// Run changes process-wide state for the bench's sake: it may pin this process to some CPUs
// and raise its open-file limit, it sets the collector's GOGC to 400 while it runs (unless the
// environment sets GOGC), and its fleet profiles use the process's CPU profiler, so one bench
// runs at a time in a process.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/config"
)

// benchScenarios are the scenarios in the order they run and are reported, and
// optionalScenarios those that run only when asked for (they take several steady runs).
var (
	benchScenarios    = []string{"steady", "storm", "ceiling", "critical-section"}
	optionalScenarios = []string{"durability", "capacity", "reconnect"}
)

// plan is a bench's settings resolved (newPlan): the full sizes by default, smaller with
// --quick. It is report.json's "settings".
type plan struct {
	Scenarios []string `json:"scenarios"`
	Quick     bool     `json:"quick"`
	Database  string   `json:"database"`
	TimeScale float64  `json:"time_scale"`
	Workers   int      `json:"steady_workers"`
	Runs      int      `json:"steady_runs"`
	Duration  string   `json:"steady_duration"`
	// StormSizes are the storm scenario's fleets, each arriving within a second.
	StormSizes      []int  `json:"storm_sizes"`
	CeilingDuration string `json:"ceiling_duration"`
	CeilingClients  int    `json:"ceiling_clients"`
	// Baseline is the shoal binary the steady scenario also runs against, in the same bench
	// run, for this build's ratios to it ("": none).
	Baseline string `json:"baseline,omitempty"`
	// Pinning says where the server and the fleet run.
	Pinning string `json:"pinning"`
	// FileLimit is the open-file limit the fleet and the servers ran with.
	FileLimit string `json:"file_limit"`
	// DurabilityRounds and DurabilityLeg shape the durability scenario (see benchDurability).
	DurabilityRounds int    `json:"durability_rounds"`
	DurabilityLeg    string `json:"durability_leg"`
	// CapacityScales and CapacityLeg shape the capacity scenario (see benchCapacity).
	CapacityScales []float64 `json:"capacity_scales"`
	CapacityLeg    string    `json:"capacity_leg"`
	// FleetProcesses is how many processes the steady scenario's fleet runs in.
	FleetProcesses int `json:"fleet_processes"`

	duration, ceilingDuration, durabilityLeg, capacityLeg time.Duration
	mongoURI, exe, self                                   string
	// serverExe is the binary that serves (exe unless the baseline is measured).
	serverExe string
	// profiles is where the server's pprof profiles are written ("": none are taken).
	profiles string
	// keep leaves each server's directory (its log and embedded database) in place.
	keep bool
	// wholeRun marks a run judged whole, stop included (the capacity scenario's steps): its
	// fleet stops over its arrival ramp instead of all at once (fleet.Options.StopRamp), since
	// every worker's final reports and PGN in the same second would be a burst of the bench's
	// making, and its profiles take no execution trace, which stalls both processes (traceFor).
	wholeRun bool
	// serveArgs are extra `shoal serve` flags (the durability scenario's --journal).
	serveArgs []string
	// taskset, if set, runs each server on CPU 0 (the bench pinned itself to the others).
	taskset string
	// bare is the run's yardstick, the bare handler's figures (nil until measured, or if it
	// failed): the ratios of the steady, ceiling and capacity scenarios divide by it.
	bare *bareYardstick
}

// onServerCore is the command that runs exe with args on the servers' CPU when the bench is
// pinned (taskset execs exe in its place: the process, and its pid, are exe's).
func (p plan) onServerCore(exe string, args ...string) *exec.Cmd {
	if p.taskset == "" {
		return exec.Command(exe, args...)
	}
	return exec.Command(p.taskset, append([]string{"-c", "0", exe}, args...)...)
}

// servedBy is p for a leg served by exe, its profiles (if any are taken) in the subdirectory
// dir of p's, so that they do not overwrite another leg's.
func (p plan) servedBy(exe, dir string) plan {
	p.serverExe = exe
	if p.profiles != "" {
		p.profiles = filepath.Join(p.profiles, dir)
	}
	return p
}

// Settings are what `shoal-bench bench` is asked to do, one field a flag. A zero size or duration
// means the default: the full one, or the smaller --quick one.
type Settings struct {
	// Scenarios are the scenarios to run (DefaultScenarios unless asked otherwise), each once,
	// in the order given.
	Scenarios []string
	// Out is the directory for report.json and report.md.
	Out string
	// MongoURI, if set, runs each server on this MongoDB, in a fresh database, instead of the
	// embedded one.
	MongoURI string
	// Quick gives small sizes for tests and CI: 500 workers, 5 runs, 30 s.
	Quick bool
	// Workers, Runs and Duration are the steady scenario's fleet, active runs and working time
	// (default 10000, 50, 5m; quick 500, 5, 30s).
	Workers, Runs int
	Duration      time.Duration
	// DurabilityRounds are the durability scenario's rounds of four legs (default 3, quick 1),
	// DurabilityLeg how long the fleet works in each (default 1m, quick the steady duration).
	DurabilityRounds int
	DurabilityLeg    time.Duration
	// CapacityScales are the capacity scenario's time scales, step by step (default 10, 20, 30,
	// 50, 75, 100; quick 10, 20), CapacityLeg how long the fleet works in each step (default 2m,
	// quick the steady duration). The steps' fleet is Workers on Runs runs; TimeScale is not
	// theirs.
	CapacityScales []float64
	CapacityLeg    time.Duration
	// TimeScale compresses the server's knobs and the workers' clocks (at least 1).
	TimeScale float64
	// StormSizes are the storm scenario's fleets, each arriving within a second (default
	// 500, 5000, 20000; quick 500).
	StormSizes []int
	// Keep leaves each server's directory (server.log, the embedded database) in place and
	// says where it is.
	Keep bool
	// Profiles is the directory for the server's CPU and allocation profiles ("": Out/profiles;
	// "off": none).
	Profiles string
	// Baseline, if set, is a shoal binary the steady scenario and each storm also run against,
	// for this build's ratios to it.
	Baseline string
	// Pin runs the server on CPU 0 and the fleet on the other CPUs (needs 2 CPUs and taskset).
	Pin bool
	// FleetProcesses splits the fleets of the steady, durability and capacity scenarios over this
	// many processes (fleet.Options.Processes; 0: defaultFleetProcesses).
	FleetProcesses int

	// Exe is the product's shoal binary the bench runs as `shoal serve` and `shoal user add`.
	Exe string
	// Self is the bench's own binary, which it runs as BareCommand (the ceiling's yardstick)
	// and fleet.ShardSubcommand (a split fleet's processes).
	Self string
	// Version is this build's version, for the report.
	Version string
}

// ServerTimes are the `shoal serve` time knobs a server of the bench runs with.
type ServerTimes struct {
	HeartbeatPeriod, DeadTaskTimeout, ScavengePeriod, DuplicateWorkerWindow time.Duration
}

// ServerTimesAt are the time knobs of a server whose workers' clocks run scale times faster:
// the defaults compressed as the demo's are (config.Config.Compressed), so that a server at
// scale k sees its fleet as one k times larger at fishtest's periods.
func ServerTimesAt(scale float64) ServerTimes {
	c := config.DefaultConfig().Compressed(scale)
	return ServerTimes{HeartbeatPeriod: c.HeartbeatPeriod, DeadTaskTimeout: c.DeadTaskTimeout,
		ScavengePeriod: c.ScavengePeriod, DuplicateWorkerWindow: c.DuplicateWorkerWindow}
}

// DefaultScenarios are the scenarios a bench runs unless told which: every one but those that
// take several steady runs (durability).
func DefaultScenarios() []string { return slices.Clone(benchScenarios) }

// newPlan resolves s into a bench's plan: defaults for the sizes not given, and every setting
// checked. Its errors name the flag at fault.
func newPlan(s Settings) (plan, error) {
	set := plan{Quick: s.Quick, TimeScale: s.TimeScale, Workers: 10000, Runs: 50, duration: 5 * time.Minute,
		StormSizes: []int{500, 5000, 20000}, ceilingDuration: 10 * time.Second, CeilingClients: 64, mongoURI: s.MongoURI}
	if s.Quick {
		set.Workers, set.Runs, set.duration, set.StormSizes, set.ceilingDuration = 500, 5, 30*time.Second, []int{500}, 4*time.Second
	}
	for _, o := range []struct {
		flag int
		into *int
	}{{s.Workers, &set.Workers}, {s.Runs, &set.Runs}} {
		if o.flag != 0 {
			*o.into = o.flag
		}
	}
	if s.Duration != 0 {
		set.duration = s.Duration
	}
	if len(s.StormSizes) > 0 {
		set.StormSizes = slices.Clone(s.StormSizes)
	}
	set.DurabilityRounds, set.durabilityLeg = 3, time.Minute
	if s.Quick {
		set.DurabilityRounds, set.durabilityLeg = 1, set.duration
	}
	if s.DurabilityRounds != 0 {
		set.DurabilityRounds = s.DurabilityRounds
	}
	if s.DurabilityLeg != 0 {
		set.durabilityLeg = s.DurabilityLeg
	}
	set.DurabilityLeg = set.durabilityLeg.String()
	set.CapacityScales, set.capacityLeg = []float64{10, 20, 30, 50, 75, 100}, 2*time.Minute
	if s.Quick {
		set.CapacityScales, set.capacityLeg = []float64{10, 20}, set.duration
	}
	if s.CapacityScales != nil {
		set.CapacityScales = slices.Clone(s.CapacityScales)
	}
	if s.CapacityLeg != 0 {
		set.capacityLeg = s.CapacityLeg
	}
	set.CapacityLeg = set.capacityLeg.String()
	set.FleetProcesses = defaultFleetProcesses
	if s.FleetProcesses != 0 {
		set.FleetProcesses = s.FleetProcesses
	}
	set.Duration, set.CeilingDuration = set.duration.String(), set.ceilingDuration.String()
	set.Database = "embedded"
	if set.mongoURI != "" {
		set.Database = "mongodb (fresh database per scenario)"
	}
	switch {
	case set.Workers < 1 || set.Runs < 1 || set.duration <= 0:
		return set, errors.New("bench: --workers, --runs and --duration must be positive")
	case !(set.TimeScale >= 1):
		return set, errors.New("bench: --time-scale must be at least 1")
	case set.capacityLeg <= 0:
		return set, errors.New("bench: --capacity-leg must be positive")
	case set.FleetProcesses < 1 || set.FleetProcesses > set.Workers:
		return set, fmt.Errorf("bench: --fleet-processes %d: want 1 to the steady fleet's %d workers", set.FleetProcesses, set.Workers)
	}
	if err := checkScales(set.CapacityScales); err != nil {
		return set, err
	}
	for _, name := range s.Scenarios {
		if !slices.Contains(benchScenarios, name) && !slices.Contains(optionalScenarios, name) {
			return set, fmt.Errorf("bench: unknown scenario %q (want %s)", name, strings.Join(append(benchScenarios, optionalScenarios...), ","))
		}
		if !slices.Contains(set.Scenarios, name) {
			set.Scenarios = append(set.Scenarios, name)
		}
	}
	if len(set.Scenarios) == 0 {
		return set, errors.New("bench: no scenario given")
	}
	set.exe, set.self, set.serverExe, set.keep, set.Baseline = s.Exe, s.Self, s.Exe, s.Keep, s.Baseline
	switch set.profiles = s.Profiles; set.profiles {
	case "":
		set.profiles = filepath.Join(s.Out, "profiles")
	case "off":
		set.profiles = ""
	}
	return set, nil
}

// Run is `shoal-bench bench`: it runs the scenarios s asks for, prints each one's targets to stdout as
// it ends, and writes report.json and report.md to s.Out. A scenario that fails is reported and
// the others still run; Run then returns an error naming the failed ones. stderr gets what the
// servers and the fleets say that is not the report's.
func Run(ctx context.Context, s Settings, stdout, stderr io.Writer) error {
	set, err := newPlan(s)
	if err != nil {
		return err
	}
	if set.Baseline != "" {
		if _, err := os.Stat(set.Baseline); err != nil {
			return fmt.Errorf("bench: --baseline: %w", err)
		}
		// Servers run in directories of their own.
		if set.Baseline, err = filepath.Abs(set.Baseline); err != nil {
			return fmt.Errorf("bench: --baseline: %w", err)
		}
	}
	if err := os.MkdirAll(s.Out, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}

	set.Pinning = "not pinned (--pin=false)"
	if s.Pin {
		taskset, why := benchPinning()
		switch {
		case taskset == "":
			set.Pinning = why
		case pinSelf(1) != nil:
			set.Pinning = "not pinned: setting this process's CPUs failed"
		default:
			set.taskset = taskset
			set.Pinning = fmt.Sprintf("server on CPU 0, fleet on CPUs 1-%d", runtime.NumCPU()-1)
			if runtime.NumCPU() == 2 && os.Getenv("GOMAXPROCS") == "" {
				// Restored when Run returns; an environment's GOMAXPROCS stands.
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(fleetProcs))
				set.Pinning += fmt.Sprintf(" (GOMAXPROCS %d)", fleetProcs)
			}
		}
	}
	fmt.Fprintf(stdout, "bench: %s\n", set.Pinning)
	if os.Getenv("GOGC") == "" { // restored when Run returns: tests run it in their process
		// A lazier collector in the fleet's process delays its workers less, which the
		// latencies would count, at a cost in memory no target measures (docs/benchmarks/
		// README.md, "The tails were the fleet's"); the servers it starts keep the default.
		defer debug.SetGCPercent(debug.SetGCPercent(fleetGCPercent))
	}
	largest := set.Workers
	if slices.Contains(set.Scenarios, "storm") {
		largest = max(largest, slices.Max(set.StormSizes))
	}
	set.FileLimit = raiseFileLimit(uint64(2*largest + 1000))
	fmt.Fprintf(stdout, "bench: %s\n", set.FileLimit)
	rep := &benchReport{Started: time.Now().UTC().Truncate(time.Second), Machine: readMachine(), Commit: gitDescribe(),
		Version: s.Version, Settings: set, Scenarios: map[string]*scenarioReport{}}
	var failed []string
	for _, name := range set.Scenarios {
		if ctx.Err() != nil {
			break
		}
		if set.bare == nil && slices.Contains(yardstickUsers, name) && rep.Scenarios[yardstickScenario] == nil {
			if err := runYardstick(ctx, &set, rep, stdout); err != nil {
				failed = append(failed, yardstickScenario)
			}
		}
		fmt.Fprintf(stdout, "bench: %s...\n", name)
		sc := &scenarioReport{}
		rep.Scenarios[name] = sc
		var err error
		switch name {
		case "steady":
			if set.Baseline != "" {
				err = benchSteadyAgainst(ctx, set, sc, rep, stdout, stderr)
				break
			}
			err = benchSteady(ctx, set, sc, stderr)
		case "storm":
			err = benchStorm(ctx, set, sc, stdout, stderr)
		case "ceiling":
			err = benchCeiling(ctx, &set, sc, stderr)
		case "critical-section":
			err = benchCriticalSection(ctx, sc)
		case "durability":
			err = benchDurability(ctx, set, sc, rep, stdout, stderr)
		case "capacity":
			err = benchCapacity(ctx, set, sc, rep, stdout, stderr)
		case "reconnect":
			err = benchReconnect(ctx, set, sc, stderr)
		}
		if err != nil {
			sc.Error = err.Error()
			failed = append(failed, name)
			fmt.Fprintf(stdout, "bench: %s failed: %v\n", name, err)
		}
		for _, t := range sc.Targets {
			fig := "not measured"
			if t.Figure != nil {
				fig = fmt.Sprintf("%.4g %s", *t.Figure, t.Unit)
			}
			fmt.Fprintf(stdout, "  %-40s %-20s target %-10s met %v\n", t.Name, fig, t.Target, t.Met)
		}
	}
	rep.Elapsed = math.Round(time.Since(rep.Started).Seconds())
	if err := writeBenchReport(s.Out, rep); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(stdout, "bench: wrote %s and %s\n", filepath.Join(s.Out, "report.json"), filepath.Join(s.Out, "report.md"))
	if len(failed) > 0 {
		return fmt.Errorf("bench: scenarios failed: %s", strings.Join(failed, ", "))
	}
	return ctx.Err()
}

// runYardstick measures the run's yardstick into set.bare and its section of rep.
func runYardstick(ctx context.Context, set *plan, rep *benchReport, stdout io.Writer) error {
	fmt.Fprintf(stdout, "bench: %s (the bare net/http handler)...\n", yardstickScenario)
	sc := &scenarioReport{}
	rep.Scenarios[yardstickScenario] = sc
	bare, err := measureYardstick(ctx, *set, sc)
	if err != nil {
		sc.Error = err.Error()
		fmt.Fprintf(stdout, "bench: %s failed: %v\n", yardstickScenario, err)
		return err
	}
	set.bare = bare
	return nil
}

// fleetGCPercent is the bench process's GOGC unless the environment sets one.
const fleetGCPercent = 400
