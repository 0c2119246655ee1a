// Package bench is the harness of `shoal bench` (issue 8's measurements): it starts the server
// as a separate `shoal serve` process on a temporary embedded database (or a fresh database on
// MongoDB), drives it with a simulated fleet from this process, and writes report.json and
// report.md. Its scenarios are steady, storm, ceiling, critical-section, durability, capacity
// and reconnect; Run runs those asked for.
//
// Run changes process-wide state for the bench's sake: it may pin this process to some CPUs
// and raise its open-file limit, it sets the collector's GOGC to 400 while it runs (unless the
// environment sets GOGC), and its fleet profiles use the process's CPU profiler, so one bench
// runs at a time in a process.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/protocol/apiclient"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// benchScenarios are the scenarios in the order they run and are reported, and
// optionalScenarios those that run only when asked for (they take several steady runs).
var (
	benchScenarios    = []string{"steady", "storm", "ceiling", "critical-section"}
	optionalScenarios = []string{"durability", "capacity", "reconnect"}
)

// reportedScenarios are the report's sections in order: the scenarios, and the baseline's run
// of steady (--baseline) before steady.
var reportedScenarios = []string{baselineScenario, "steady", steadyAgain, baselineAgain, "storm", "ceiling", "critical-section", "durability", "capacity", "reconnect"}

// legScenarios are the scenarios made of legs, each leg a section of its own named
// <scenario>-<n>-... (durabilityLeg, capacityStep).
var legScenarios = []string{"durability", "capacity"}

// reportOrder is the order of rep's sections: reportedScenarios, then the legs of each of
// legScenarios in turn, by number.
func reportOrder(rep *benchReport) []string {
	order := slices.Clone(reportedScenarios)
	for _, scenario := range legScenarios {
		var legs []string
		for name := range rep.Scenarios {
			if strings.HasPrefix(name, scenario+"-") {
				legs = append(legs, name)
			}
		}
		slices.SortFunc(legs, func(a, b string) int { return legNumber(a) - legNumber(b) })
		order = append(order, legs...)
	}
	return order
}

// legNumber is the n of a leg's name, <scenario>-<n>-... (durability-3-journal-on,
// capacity-2-equivalent-200000).
func legNumber(name string) int {
	_, rest, _ := strings.Cut(name, "-")
	n, _ := strconv.Atoi(strings.Split(rest, "-")[0])
	return n
}

// plan is a bench's settings resolved (newPlan): the sizes by default, smaller with
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

// benchReport is report.json.
type benchReport struct {
	Started   time.Time                  `json:"started"`
	Elapsed   float64                    `json:"elapsed_s"`
	Machine   machineInfo                `json:"machine"`
	Commit    string                     `json:"commit"`
	Version   string                     `json:"version"`
	Settings  plan                       `json:"settings"`
	Scenarios map[string]*scenarioReport `json:"scenarios"`
}

// machineInfo describes where the bench ran.
type machineInfo struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	MemoryMiB int64  `json:"memory_mib"`
	OS        string `json:"os"`
	Go        string `json:"go"`
}

// scenarioReport is one scenario's settings, figures and targets. Skipped or Error say why
// figures are missing.
type scenarioReport struct {
	Skipped   string                          `json:"skipped,omitempty"`
	Error     string                          `json:"error,omitempty"`
	Figures   []benchFigure                   `json:"figures"`
	Endpoints map[string]fleet.EndpointReport `json:"endpoints,omitempty"`
	Targets   []benchTarget                   `json:"targets"`
	// Limits says, for targets not met, what the figures and profiles show limits them.
	Limits  []string        `json:"limits,omitempty"`
	Profile *profileSummary `json:"profile,omitempty"`
	// FleetProfile is the bench process's own (the fleet's) CPU profile, over the same time.
	FleetProfile *profileSummary `json:"fleet_profile,omitempty"`
	// Timeline is the fleet's beats second by second, for a scenario judged by when they were
	// steady (reconnect).
	Timeline []fleet.TimelineSecond `json:"timeline,omitempty"`
}

// benchFigure is one measured number.
type benchFigure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// benchTarget is one of issue 8's targets: the figure (nil when it could not be measured),
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

func below(limit float64) func(float64) bool   { return func(v float64) bool { return v < limit } }
func atLeast(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }

// Settings are what `shoal bench` is asked to do, one field a flag. A zero size or duration
// means the default: the issue's, or the smaller --quick one.
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

// Run is `shoal bench`: it runs the scenarios s asks for, prints each one's targets to stdout as
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
		// The fleet's process, not the server, made the tails vary from leg to leg: its
		// goroutines' scheduling latency p99 ran from 134 to 940 ms with the server's alike
		// (its HTTP transport was most of it, see fleet's transport.go). A lazier collector is
		// one source of that delay less, at a cost in the bench process's memory, which no
		// target measures; the servers it starts keep the default.
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
			err = benchCeiling(ctx, set, sc, stderr)
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

// benchServer is a `shoal serve` child process with the demo's users.
type benchServer struct {
	cmd     *exec.Cmd
	base    string
	users   demo.Users
	dir     string
	log     *os.File
	pprof   string    // base URL of the server's profiles
	keep    bool      // leave dir in place
	stderr  io.Writer // where stop says it kept dir
	done    chan struct{}
	waitErr error
	// start is the command that starts the server again (restart), the same each time.
	start func() *exec.Cmd
}

// startBenchServer starts `shoal serve` as a child process on a fresh database, its time knobs
// ServerTimesAt(set.TimeScale) (compressed as the demo's are), with the demo's users (machine limit
// machineLimit) added with `shoal user add` before it starts. With --keep, stop tells stderr
// where the server's directory is.
func startBenchServer(ctx context.Context, set plan, machineLimit int, stderr io.Writer) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "shoal-bench-")
	if err != nil {
		return nil, err
	}
	s := &benchServer{dir: dir, keep: set.keep, stderr: stderr, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	port, err := LoopbackPort()
	if err != nil {
		return nil, err
	}
	db := []string{"--data", filepath.Join(dir, "data")}
	if set.mongoURI != "" {
		db = append(db, "--mongo-uri", set.mongoURI, "--database", "shoal_bench_"+strings.ToLower(rand.Text()[:10]))
	}
	if s.users, err = demo.AddUsersCLI(ctx, set.exe, db, machineLimit, func(string) string { return rand.Text() }); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "SHOAL_ADMIN_PASSWORD="+rand.Text())
	s.log, err = os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if set.profiles != "" {
		pport, err := LoopbackPort()
		if err != nil {
			return nil, err
		}
		paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
		db = append(db, "--pprof-addr", paddr)
		s.pprof = "http://" + paddr
	}
	times := ServerTimesAt(set.TimeScale)
	args := append([]string{"serve", "--addr", addr, "--log-level", "warn",
		"--heartbeat-period", times.HeartbeatPeriod.String(), "--dead-task-timeout", times.DeadTaskTimeout.String(),
		"--scavenge-period", times.ScavengePeriod.String(), "--duplicate-worker-window", times.DuplicateWorkerWindow.String()}, db...)
	args = append(args, set.serveArgs...)
	// Not CommandContext: the server is stopped with SIGTERM, gracefully, by stop.
	s.start = func() *exec.Cmd {
		cmd := set.onServerCore(set.serverExe, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = env, s.log, s.log, dir
		return cmd
	}
	s.base = "http://" + addr
	if err := s.launch(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// launch starts the server's process and waits until it is ready (/readyz polled every 20 ms, so
// that a restart's return is timed closely).
func (s *benchServer) launch(ctx context.Context) error {
	s.cmd, s.done = s.start(), make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start shoal serve: %w", err)
	}
	cmd, done := s.cmd, s.done
	go func() { s.waitErr = cmd.Wait(); close(done) }() // joined by stop
	return s.waitUntil(ctx, "ready", 20*time.Millisecond, func() bool { return serverReady(ctx, s.base) })
}

// restart stops the server gracefully, as stop does, calls away (if not nil) once its process
// has exited, and starts it again on the same data and address. down is when it was told to
// stop, up when it was ready again as the primary: a server starting beside the lease of the
// one it replaces may be ready first as a standby, whose worker API answers 503.
func (s *benchServer) restart(ctx context.Context, away func()) (down, up time.Time, err error) {
	down = time.Now()
	stopChild(s.cmd.Process, s.done, time.Minute)
	if away != nil {
		away()
	}
	if err := s.launch(ctx); err != nil {
		return down, time.Time{}, err
	}
	err = s.waitUntil(ctx, "the primary", 20*time.Millisecond, func() bool {
		role, _ := s.role(ctx)
		return role == "primary"
	})
	if err != nil {
		return down, time.Time{}, err
	}
	return down, time.Now(), nil
}

// waitUntil polls the running server every period until ok says it is what names, and fails
// once its process exits, ctx ends or 90 s have passed.
func (s *benchServer) waitUntil(ctx context.Context, what string, period time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(90 * time.Second); ; {
		if ok() {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("shoal serve exited before it was %s (%v): %s", what, s.waitErr, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shoal serve not %s after 90 s: %s", what, s.logTail())
		}
	}
}

// role is the server's role as /readyz says it.
func (s *benchServer) role(ctx context.Context) (string, error) {
	body, err := httpGet(ctx, s.base+"/readyz")
	if err != nil {
		return "", err
	}
	var r protocol.ReadyReply
	if err := json.Unmarshal(body, &r); err != nil {
		return "", err
	}
	return r.Role, nil
}

// serverReady reports whether the server at base answers /readyz with 200.
func serverReady(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logTail is the end of the server's log, for an error message.
func (s *benchServer) logTail() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// stop ends the server with SIGTERM (SIGKILL after a minute) and removes its directory.
func (s *benchServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		stopChild(s.cmd.Process, s.done, time.Minute)
	}
	if s.log != nil {
		s.log.Close()
	}
	if s.keep {
		fmt.Fprintf(s.stderr, "bench: kept the server's directory %s\n", s.dir)
		return
	}
	os.RemoveAll(s.dir)
}

// submitRuns creates and approves n fixed-games runs that do not finish during a bench.
func (s *benchServer) submitRuns(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, 0, n)
	for i := range n {
		req := demo.RunRequest(fmt.Sprintf("bench run %d", i+1))
		req.NumGames = 400000
		id, err := demo.SubmitRun(ctx, s.base, s.users, req)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// LoopbackPort returns a loopback port free a moment ago.
func LoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// procUsage is a process's CPU time and memory, from /proc.
type procUsage struct {
	CPUSeconds     float64
	RSSMiB, HWMMiB float64
	// ChildCPUSeconds is the part of CPUSeconds that readServer found in the server's child
	// processes (the embedded database).
	ChildCPUSeconds float64
	// ReapedCPUSeconds is the CPU of the process's children that have exited and been waited
	// for (cutime + cstime): in the bench process, the processes of a split fleet once it ends.
	ReapedCPUSeconds float64
}

// readProc reads /proc/pid/stat (utime + stime and cutime + cstime, in clock ticks of 1/100 s, Linux's USER_HZ on
// every common architecture) and /proc/pid/status (VmRSS, VmHWM).
func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	u.CPUSeconds = (utime + stime) / 100
	if len(f) >= 15 {
		cutime, _ := strconv.ParseFloat(f[13], 64)
		cstime, _ := strconv.ParseFloat(f[14], 64)
		u.ReapedCPUSeconds = (cutime + cstime) / 100
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for line := range strings.Lines(string(status)) {
		key, val, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		switch key {
		case "VmRSS":
			u.RSSMiB = kb / 1024
		case "VmHWM":
			u.HWMMiB = kb / 1024
		}
	}
	return u, nil
}

// readFleet is readProc of this process (the bench, and the fleet when it runs here), with the
// CPU of its children that have ended added: the processes of a split fleet, once it has run.
func readFleet() (procUsage, error) {
	u, err := readProc(os.Getpid())
	u.CPUSeconds += u.ReapedCPUSeconds
	return u, err
}

// readServer is readProc of the server's process and its children, summed: the embedded
// database runs as a child process of the server (embedded_db_process), and its CPU and memory
// are the server's.
func readServer(pid int) (procUsage, error) {
	u, err := readProc(pid)
	if err != nil {
		return u, err
	}
	// Each thread lists the children it started.
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if c, err := readProc(child); err == nil { // a child may have exited meanwhile
				u.CPUSeconds += c.CPUSeconds
				u.ChildCPUSeconds += c.CPUSeconds
				u.RSSMiB += c.RSSMiB
				u.HWMMiB += c.HWMMiB
			}
		}
	}
	return u, nil
}

// procWindow is what watchProc saw of a process over a window: the cores it used (CPU seconds
// per wall second) and its peak resident memory over samples taken every half second, if any
// sample was taken.
type procWindow struct {
	// cores are CPU seconds per wall second, dbCores the embedded database's part of them.
	cores, dbCores, peakRSS float64
	sampled                 bool
	// metrics are the server's /metrics at both ends (nil if a scrape failed).
	metricsFrom, metricsUntil map[string]float64
}

// watchProc samples process pid's resident memory every half second from `from` to `until`
// after now, and its CPU time at both ends; the channel delivers the result at until (or
// when ctx ends).
func watchProc(ctx context.Context, s *benchServer, from, until time.Duration) <-chan procWindow {
	pid := s.cmd.Process.Pid
	out := make(chan procWindow, 1)
	go func() {
		var w procWindow
		defer func() { out <- w }()
		start := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-time.After(from):
		}
		first, err := readServer(pid)
		if err != nil {
			return
		}
		w.metricsFrom, _ = scrapeMetrics(ctx, s.base)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last := first
		for time.Since(start) < until {
			if u, err := readServer(pid); err == nil {
				last = u
				w.peakRSS = max(w.peakRSS, u.RSSMiB)
				w.sampled = true
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		secs := max(time.Since(start)-from, time.Millisecond).Seconds()
		w.cores = (last.CPUSeconds - first.CPUSeconds) / secs
		w.dbCores = (last.ChildCPUSeconds - first.ChildCPUSeconds) / secs
		w.metricsUntil, _ = scrapeMetrics(ctx, s.base)
	}()
	return out
}

// scrapeMetrics reads the server's /metrics into series ("name{labels}") and values.
func scrapeMetrics(ctx context.Context, base string) (map[string]float64, error) {
	data, err := httpGet(ctx, base+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape /metrics: %w", err)
	}
	return ParseMetrics(bytes.NewReader(data))
}

// ParseMetrics reads Prometheus text into series ("name{labels}") and values.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// httpGet returns the body of url's 200 reply (a scrape or a profile, unbounded in practice);
// any other reply is an error.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	return apiclient.Get(ctx, http.DefaultClient, url, math.MaxInt64)
}

// seriesMatches says whether series ("name{labels}") is one of name's whose labels contain
// every one of labels.
func seriesMatches(series, name string, labels []string) bool {
	n, rest, _ := strings.Cut(series, "{")
	if n != name {
		return false
	}
	for _, l := range labels {
		if !strings.Contains(rest, l) {
			return false
		}
	}
	return true
}

// histQuantile is the q-quantile of a Prometheus histogram over the requests between two
// scrapes, as the upper bound of the bucket that holds it, summed over the series whose labels
// contain every one of labels.
func histQuantile(from, until map[string]float64, name string, q float64, labels ...string) (float64, bool) {
	counts := map[float64]float64{}
	for series, v := range until {
		if !seriesMatches(series, name+"_bucket", labels) {
			continue
		}
		i := strings.Index(series, `le="`)
		if i < 0 {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(series[i+4:], "}"), `"`), 64)
		if err != nil {
			continue
		}
		counts[le] += v - from[series]
	}
	les := make([]float64, 0, len(counts))
	for le := range counts {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 || counts[les[len(les)-1]] <= 0 {
		return 0, false
	}
	total := counts[les[len(les)-1]] // le="+Inf" is the last, cumulative
	for _, le := range les {
		if counts[le] >= q*total {
			return le, !math.IsInf(le, 1)
		}
	}
	return 0, false
}

// metricSum adds the series of name whose labels contain every one of labels (`reason="dead"`).
func metricSum(m map[string]float64, name string, labels ...string) float64 {
	var sum float64
	for series, v := range m {
		if seriesMatches(series, name, labels) {
			sum += v
		}
	}
	return sum
}

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

// fleetOptions are the options every bench fleet shares.
func fleetOptions(s *benchServer, set plan, workers int) fleet.Options {
	return fleet.Options{ServerURL: s.base, Username: s.users.Workers.Name, Password: s.users.Workers.Password,
		Workers: workers, DrawRatio: 0.6, TimeScale: set.TimeScale, StopGrace: 15 * time.Second}
}

// benchSteady is the steady scenario: set.Workers at set.TimeScale on set.Runs runs for
// set.duration.
func benchSteady(ctx context.Context, set plan, sc *scenarioReport, stderr io.Writer) error {
	beatP99, fiveXX, falseDead, rss := (*float64)(nil), (*float64)(nil), (*float64)(nil), (*float64)(nil)
	defer func() {
		sc.target("beat p99 (steady window)", beatP99, "ms", "< 25", below(25))
		sc.target("5xx replies", fiveXX, "replies", "= 0", below(0.5))
		sc.target("false dead tasks", falseDead, "tasks", "= 0", below(0.5))
		sc.target("server resident memory (peak, steady window)", rss, "MiB", "< 1024", below(1024))
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
	opts := fleetOptions(s, set, set.Workers)
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
	profiledFor := min(time.Minute, set.duration-opts.WindowFrom-2*time.Second)
	profiled := profileDuring(ctx, s, set, "steady", opts.WindowFrom, profiledFor)
	var fleetProfiled <-chan *profileSummary
	if set.FleetProcesses > 1 {
		// The first of the fleet's processes profiles itself, as profileFleet does this one.
		opts.Processes, opts.ShardCommand = set.FleetProcesses, []string{set.self, fleet.ShardSubcommand}
		if set.profiles != "" {
			opts.ShardProfile = &fleet.ShardProfile{Dir: set.profiles, Name: "steady", After: opts.WindowFrom, For: profiledFor}
			if !set.wholeRun {
				opts.ShardProfile.TraceFor = traceFor
			}
		}
	} else {
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
		sc.figure("fleet CPU per request (the bench process and its fleet processes)", perRequest(fleetAfter.CPUSeconds-fleetBefore.CPUSeconds), "µs")
	}
	sc.figure("server resident memory (end)", after.RSSMiB, "MiB")
	sc.figure("server resident memory (peak over the whole run, VmHWM)", after.HWMMiB, "MiB")
	if win.sampled {
		sc.figure("steady: server CPU per wall second", win.cores, "cores")
		sc.figure("steady: the embedded database's CPU per wall second", win.dbCores, "cores")
		if st := rep.Window; st != nil && st.Requests > 0 && st.UntilSeconds > st.FromSeconds {
			rate := float64(st.Requests) / (st.UntilSeconds - st.FromSeconds)
			sc.figure("steady: server CPU per request", win.cores/rate*1e6, "µs")
		}
		sc.figure("steady: server resident memory (peak, sampled every 0.5 s)", win.peakRSS, "MiB")
		rss = new(win.peakRSS)
	}
	if win.metricsFrom != nil && win.metricsUntil != nil {
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
		flushes := metricSum(win.metricsUntil, "shoal_runcache_flush_duration_seconds_count") - metricSum(win.metricsFrom, "shoal_runcache_flush_duration_seconds_count")
		flushSecs := metricSum(win.metricsUntil, "shoal_runcache_flush_duration_seconds_sum") - metricSum(win.metricsFrom, "shoal_runcache_flush_duration_seconds_sum")
		if flushes > 0 {
			sc.figure("steady: run writes (run cache flushes)", flushes, "writes")
			sc.figure("steady: run write mean duration", flushSecs/flushes*1000, "ms")
		}
		delta := func(name string) float64 { return metricSum(win.metricsUntil, name) - metricSum(win.metricsFrom, name) }
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
	if e, ok := windowEndpoint(rep, "beat"); ok {
		beatP99 = new(e.P99MS)
	}
	fiveXX, falseDead = new(fx), new(fd)
	return nil
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
// tails: with one binary in both legs, the second's beat p99 came out 2 to 3.5 times the
// first's (docs/benchmarks). In one pair this build runs second, in the other the baseline
// does, so a factor that comes with the place cancels out.
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
	return nil
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

// fleetGCPercent is the bench process's GOGC unless the environment sets one.
const fleetGCPercent = 400

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

// benchCeiling measures a bare net/http JSON handler and Shoal's beat with the same load
// generator, and the ratio of the two.
func benchCeiling(ctx context.Context, set plan, sc *scenarioReport, stderr io.Writer) error {
	ratio, cpuRatio := (*float64)(nil), (*float64)(nil)
	defer func() {
		sc.target("beat throughput / bare net/http", ratio, "ratio", ">= 0.5", atLeast(0.5))
		sc.target("server CPU per beat / bare net/http CPU per request", cpuRatio, "x", "<= 3", func(v float64) bool { return v <= 3 })
		sc.explainUnmet(set)
	}()
	clients := set.CeilingClients
	s, err := startBenchServer(ctx, set, clients, stderr)
	if err != nil {
		return err
	}
	defer s.stop()

	// One task per client, for valid beats.
	ids, err := s.submitRuns(ctx, 1)
	if err != nil {
		return err
	}
	bodies := make([][]byte, clients)
	for i := range clients {
		bodies[i], err = beatBody(ctx, s, i)
		if err != nil {
			return fmt.Errorf("get a task for beat (run %s): %w", ids[0], err)
		}
	}

	// The yardstick: a bare net/http JSON handler in a process of its own on the server's
	// core, so that both sides' CPU per request comes from /proc alike.
	bare, err := startBare(ctx, set)
	if err != nil {
		return err
	}
	bareBefore, err := readProc(bare.cmd.Process.Pid)
	if err != nil {
		bare.stop()
		return err
	}
	bareOK, bareSecs, bareErrs := loadGenerate(ctx, bare.url, bodies, set.ceilingDuration)
	bareAfter, err := readProc(bare.cmd.Process.Pid)
	bare.stop()
	if err != nil {
		return err
	}
	before, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	profiled := profileDuring(ctx, s, set, "ceiling", time.Second, set.ceilingDuration-2*time.Second)
	beatOK, beatSecs, beatErrs := loadGenerate(ctx, s.base+"/api/beat", bodies, set.ceilingDuration)
	sc.Profile = <-profiled
	after, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	bareRate, beatRate := float64(bareOK)/bareSecs, float64(beatOK)/beatSecs
	sc.figure("bare net/http JSON handler", bareRate, "req/s")
	sc.figure("bare net/http errors", float64(bareErrs), "requests")
	sc.figure("shoal beat", beatRate, "req/s")
	sc.figure("shoal beat errors (non-200 or task not alive)", float64(beatErrs), "requests")
	sc.figure("concurrent clients", float64(clients), "clients")
	if bareRate > 0 {
		r := beatRate / bareRate
		sc.figure("beat / bare ratio", r, "ratio")
		ratio = &r
	}
	// CPU per request, failed ones counted (they cost CPU too): /proc counts in hundredths of a
	// second, well under a percent of the seconds a ceiling leg burns. Shoal's figure includes
	// its CPU profile's sampling and its embedded database's background work.
	if bareOK > 0 && beatOK > 0 {
		bareUS := (bareAfter.CPUSeconds - bareBefore.CPUSeconds) / float64(bareOK+bareErrs) * 1e6
		beatUS := (after.CPUSeconds - before.CPUSeconds) / float64(beatOK+beatErrs) * 1e6
		sc.figure("bare net/http CPU per request", bareUS, "µs")
		sc.figure("shoal CPU per beat", beatUS, "µs")
		if bareUS > 0 {
			cpuRatio = new(beatUS / bareUS)
			sc.figure("shoal CPU per beat / bare CPU per request", *cpuRatio, "x")
		}
	}
	return nil
}

// beatBody takes a task for worker i through request_task and returns the body of a beat for it.
func beatBody(ctx context.Context, s *benchServer, i int) ([]byte, error) {
	w, err := worker.New(worker.Config{ServerURL: s.base, Username: s.users.Workers.Name,
		Password: s.users.Workers.Password, UniqueKey: worker.NewUniqueKey(fmt.Sprintf("bc%06d", i))}, &worker.SimSource{})
	if err != nil {
		return nil, err
	}
	info := w.Info()
	c := &apiclient.Client{Server: s.base, HTTP: http.DefaultClient}
	for attempt := 0; ; attempt++ {
		var task protocol.TaskReply
		err := c.Post(ctx, "/api/request_task", protocol.Request{Password: s.users.Workers.Password, WorkerInfo: info}, &task)
		if err != nil {
			return nil, fmt.Errorf("request_task: %w", err)
		}
		if task.Run != nil && task.TaskID != nil {
			return json.Marshal(protocol.Request{Password: s.users.Workers.Password, WorkerInfo: info,
				RunID: &task.Run.ID, TaskID: task.TaskID})
		}
		if task.Error != "" || attempt >= 20 {
			return nil, fmt.Errorf("request_task: no task: %s%s", task.Error, task.Info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loadGenerate posts bodies[i] from client i, as fast as each reply comes, for d; it returns
// the successful requests (200 with no "error" and, for beats, a live task), the seconds they
// took, and the failures.
func loadGenerate(ctx context.Context, url string, bodies [][]byte, d time.Duration) (ok int64, secs float64, failed int64) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = len(bodies) + 4
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var okN, failedN atomic.Int64
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, body := range bodies {
		wg.Go(func() {
			for lctx.Err() == nil {
				req, _ := http.NewRequestWithContext(lctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					if lctx.Err() == nil {
						failedN.Add(1)
					}
					continue
				}
				var reply struct {
					Error     string `json:"error"`
					TaskAlive *bool  `json:"task_alive"`
				}
				err = json.NewDecoder(resp.Body).Decode(&reply)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || reply.Error != "" || (reply.TaskAlive != nil && !*reply.TaskAlive) {
					failedN.Add(1)
					continue
				}
				okN.Add(1)
			}
		})
	}
	wg.Wait()
	return okN.Load(), time.Since(start).Seconds(), failedN.Load()
}

// benchLine is a line of `go test -bench` output: name, iterations, ns/op.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)

// benchCriticalSection runs the scheduler's Go benchmarks when the go tool and the module's
// source are at hand.
func benchCriticalSection(ctx context.Context, sc *scenarioReport) error {
	at100 := (*float64)(nil)
	defer func() {
		sc.target("request_task critical section at 100 runs (mean ns/op)", at100, "µs", "< 100", below(100))
	}()
	goTool, err := exec.LookPath("go")
	if err != nil {
		sc.Skipped = "skipped: go is not on PATH"
		return nil
	}
	root := moduleRoot()
	if root == "" {
		sc.Skipped = "skipped: not run from Shoal's source tree (no go.mod of github.com/shoal-chess/shoal above the working directory)"
		return nil
	}
	cmd := exec.CommandContext(ctx, goTool, "test", "-run", "^$", "-count", "1",
		"-bench", "^(BenchmarkRequestTaskCriticalSection|BenchmarkRequestTask|BenchmarkUpdateTask)$",
		"./scheduler/")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("go test -bench ./scheduler/: %w: %s", err, tail)
	}
	found := false
	for line := range strings.Lines(out.String()) {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		us := ns / 1000
		sc.figure(m[1], us, "µs/op")
		found = true
		if m[1] == "BenchmarkRequestTaskCriticalSection/runs=100" {
			at100 = new(us)
		}
	}
	if !found {
		return fmt.Errorf("go test -bench printed no benchmark line: %s", apiclient.Snippet(out.Bytes()))
	}
	return nil
}

// moduleRoot is the directory above the working directory holding Shoal's go.mod, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/shoal-chess/shoal\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// readMachine describes this machine from /proc.
func readMachine() machineInfo {
	m := machineInfo{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMiB = kb / 1024
			}
		}
	}
	return m
}

// gitDescribe is `git describe --always --dirty` of Shoal's source tree above the working
// directory (or of the working directory), or "unknown".
func gitDescribe() string {
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = moduleRoot()
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// writeBenchReport writes report.json and report.md to dir.
func writeBenchReport(dir string, rep *benchReport) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(benchMarkdown(rep)), 0o644)
}

// benchMarkdown is the report for people.
func benchMarkdown(rep *benchReport) string {
	var b strings.Builder
	set := rep.Settings
	fmt.Fprintf(&b, "# Shoal benchmark report\n\n")
	fmt.Fprintf(&b, "Generated by `shoal bench` on %s in %.0f s. Commit `%s`, shoal %s.\n\n", rep.Started.Format(time.RFC3339), rep.Elapsed, rep.Commit, rep.Version)
	fmt.Fprintf(&b, "**Machine:** %s, %d cores, %d MiB, %s, %s.\n\n", rep.Machine.CPU, rep.Machine.Cores, rep.Machine.MemoryMiB, rep.Machine.OS, rep.Machine.Go)
	fmt.Fprintf(&b, "**Settings:** database %s; time scale k = %g; steady %d workers (equivalent %d) on %d runs for %s; storms of %v workers, each arriving within a second; ceiling %d clients for %s each",
		set.Database, set.TimeScale, set.Workers, int(float64(set.Workers)*set.TimeScale), set.Runs, set.Duration,
		set.StormSizes, set.CeilingClients, set.CeilingDuration)
	if slices.Contains(set.Scenarios, "durability") {
		fmt.Fprintf(&b, "; durability %d rounds of four %s legs", set.DurabilityRounds, set.DurabilityLeg)
	}
	if slices.Contains(set.Scenarios, "capacity") {
		fmt.Fprintf(&b, "; capacity %d workers on %d runs at time scales %v (equivalent %v), %s a step, each judged over its whole run",
			set.Workers, set.Runs, set.CapacityScales, equivalentFleets(set.Workers, set.CapacityScales), set.CapacityLeg)
	}
	if set.Quick {
		b.WriteString(" (**--quick**: not the issue's sizes)")
	}
	fleetWhere := "in the bench process"
	if set.FleetProcesses > 1 {
		fleetWhere = fmt.Sprintf("in the bench process, except the steady, durability and capacity fleets, split over %d processes of their own", set.FleetProcesses)
	}
	fmt.Fprintf(&b, ".\n\nThe server runs as a separate `shoal serve` process; the fleet and the load generator run %s, on the same machine (%s; %s).\n", fleetWhere, set.Pinning, set.FileLimit)
	if set.Baseline != "" {
		fmt.Fprintf(&b, "\n**Baseline:** in the same bench run, the steady scenario ran four times, against `%s`, this build, this build again and the baseline again (sections %s, steady, %s and %s), and each storm ran first against the baseline (storm's \"baseline\" figures), then against this build; figures named \"ratio to the baseline\" are this build's over the baseline's, for steady the geometric mean of the two pairs' ratios, so that a leg's place in the run, which weighs on its tails, cancels out.\n", set.Baseline, baselineScenario, steadyAgain, baselineAgain)
	}
	for _, name := range reportOrder(rep) {
		sc, ok := rep.Scenarios[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		if sc.Skipped != "" {
			fmt.Fprintf(&b, "%s\n\n", sc.Skipped)
		}
		if sc.Error != "" {
			fmt.Fprintf(&b, "**Error:** %s\n\n", strings.ReplaceAll(sc.Error, "\n", " "))
		}
		if len(sc.Targets) > 0 {
			b.WriteString("| Target | Figure | Target | Met |\n|---|---:|---|---|\n")
			for _, t := range sc.Targets {
				fig := "not measured"
				if t.Figure != nil {
					fig = fmt.Sprintf("%.4g %s", *t.Figure, t.Unit)
				}
				met := "no"
				if t.Met {
					met = "yes"
				}
				fmt.Fprintf(&b, "| %s | %s | %s %s | %s |\n", t.Name, fig, t.Target, t.Unit, met)
			}
			b.WriteString("\n")
		}
		for _, l := range sc.Limits {
			fmt.Fprintf(&b, "**What limits it.** %s\n\n", l)
		}
		if len(sc.Figures) > 0 {
			b.WriteString("| Figure | Value | Unit |\n|---|---:|---|\n")
			for _, f := range sc.Figures {
				fmt.Fprintf(&b, "| %s | %.4g | %s |\n", f.Name, f.Value, f.Unit)
			}
		}
		profileMarkdown(&b, "Server", sc.Profile)
		fleetProfiled := "Fleet (bench process)"
		if _, split := sc.value("fleet processes"); split && set.FleetProcesses > 1 {
			fleetProfiled = fmt.Sprintf("Fleet (the first of its %d processes)", set.FleetProcesses)
		}
		profileMarkdown(&b, fleetProfiled, sc.FleetProfile)
	}
	return b.String()
}
