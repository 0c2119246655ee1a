package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/bench"
	"github.com/shoal-chess/shoal/config"
)

const benchUsage = `usage: shoal-bench bench [--scenarios steady,storm,ceiling,critical-section,durability,capacity,reconnect] [--out DIR] [--quick] [--shoal PATH]

Measures Shoal: starts the server (the shoal binary next to this program, or
--shoal PATH) as a separate process on a temporary embedded database (or
--mongo-uri, in a fresh database), drives it with a simulated fleet from this
process, and writes report.json and report.md to --out (default bench-out; make
bench PUBLISH=1 gives docs/benchmarks, the committed report). Scenarios:

  steady            N workers at time scale k on R active runs for D
  storm             500, 5,000 and 20,000 workers arriving within a second: time until
                    99 % hold a task, too-busy replies, request_task's latency
  ceiling           a bare net/http JSON handler's requests/s, and beat's
  critical-section  go test -bench of request_task's critical section (needs go)
  durability        rounds of steady four times, journal off, on, on, off: what storing
                    each acknowledged change before the reply costs, as the median of the
                    rounds' ratios (not in the default set)
  capacity          steady on a fresh server at each of --capacity-scales in turn (the
                    equivalent fleet workers x scale, the server's periods scaled alike)
                    for --capacity-leg each, until a step breaks one of the bench's
                    targets over its whole run: the largest equivalent fleet that held
                    every target (not in the default set)
  reconnect         N workers at time scale 50 (quick: k), every one holding a task, see
                    the server restart (SIGTERM, then serve again on the same data): how
                    long after it is ready their beats are steady again, in equivalent
                    time, and no task lost or held twice (not in the default set)

Flags:
`

// benchSettings are `shoal-bench bench`'s settings: the bench's, the lists given as text, and
// the product binary to run.
type benchSettings struct {
	bench.Settings
	Scenarios, StormSizes, CapacityScales string
	Shoal                                 string
}

// benchFlags is the table of `shoal-bench bench`'s flags. Only the MongoDB URI also comes from the
// environment (serve's variable); the rest are flags alone. bench.Run checks the values.
func benchFlags() []config.Option[benchSettings] {
	str := func(key, usage string, field func(*benchSettings) *string) config.Option[benchSettings] {
		return config.String(key, usage, field, nil).FlagOnly()
	}
	count := func(key, usage string, field func(*benchSettings) *int) config.Option[benchSettings] {
		return config.Int(key, usage, field, 0, "must be a positive integer (0: the default)").FlagOnly()
	}
	duration := func(key, usage string, field func(*benchSettings) *time.Duration) config.Option[benchSettings] {
		return config.Duration(key, usage, field, nil).FlagOnly()
	}
	flag := func(key, usage string, field func(*benchSettings) *bool) config.Option[benchSettings] {
		return config.Bool(key, usage, field).FlagOnly()
	}
	return []config.Option[benchSettings]{
		str("scenarios", "comma-separated scenarios to run", func(s *benchSettings) *string { return &s.Scenarios }),
		str("out", "directory for report.json and report.md", func(s *benchSettings) *string { return &s.Out }),
		config.String("mongo_uri", "run the server on this MongoDB (a fresh database) instead of the embedded one",
			func(s *benchSettings) *string { return &s.MongoURI }, nil).WithRedact(config.RedactURI),
		flag("quick", "small sizes for tests and CI: 500 workers, 5 runs, 30 s", func(s *benchSettings) *bool { return &s.Quick }),
		count("workers", "steady: workers (0: 10000, quick 500)", func(s *benchSettings) *int { return &s.Workers }),
		count("runs", "steady: active runs (0: 50, quick 5)", func(s *benchSettings) *int { return &s.Runs }),
		duration("duration", "steady: how long the fleet works (0: 5m, quick 30s)", func(s *benchSettings) *time.Duration { return &s.Duration }),
		count("durability_rounds", "durability: rounds of four legs, journal off, on, on, off (0: 3, quick 1)",
			func(s *benchSettings) *int { return &s.DurabilityRounds }),
		duration("durability_leg", "durability: how long the fleet works in each leg (0: 1m, quick 30s)",
			func(s *benchSettings) *time.Duration { return &s.DurabilityLeg }),
		str("capacity_scales", "capacity: comma-separated time scales, one step each, rising (default 10,20,30,50,75,100; quick 10,20)",
			func(s *benchSettings) *string { return &s.CapacityScales }),
		duration("capacity_leg", "capacity: how long the fleet works in each step (0: 2m, quick 30s)",
			func(s *benchSettings) *time.Duration { return &s.CapacityLeg }),
		config.Float("time_scale", "time compression of the server's knobs and the workers' clocks",
			func(s *benchSettings) *float64 { return &s.TimeScale }, nil).FlagOnly(),
		str("storm_workers", "storm: comma-separated fleet sizes, each arriving within a second (default 500,5000,20000; quick 500)",
			func(s *benchSettings) *string { return &s.StormSizes }),
		flag("keep", "keep each server's directory (server.log, the embedded database) and print where it is",
			func(s *benchSettings) *bool { return &s.Keep }),
		str("profiles", `directory for the server's CPU and allocation profiles (default OUT/profiles; "off": none)`,
			func(s *benchSettings) *string { return &s.Profiles }),
		str("shoal", "the shoal binary to run as the server (default: shoal next to this program)",
			func(s *benchSettings) *string { return &s.Shoal }),
		str("baseline", "steady and each storm: also run against this shoal binary (say, built from the commit before a change), legs alternating, and report the ratios",
			func(s *benchSettings) *string { return &s.Baseline }),
		count("fleet_processes", "steady, durability and capacity: split the fleet over this many processes (0: 4)",
			func(s *benchSettings) *int { return &s.FleetProcesses }),
		flag("pin", "run the server on CPU 0 and the fleet on the other CPUs (needs 2 CPUs and taskset)",
			func(s *benchSettings) *bool { return &s.Pin }),
	}
}

// benchCmd is `shoal-bench bench`: its flags become bench.Settings, and the bench package does the
// rest.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	set, shoal, err := loadBench(args, getenv, stderr)
	if err != nil {
		return err
	}
	if set.Exe, err = productBinary(shoal); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if set.Self, err = self(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return bench.Run(ctx, set, stdout, stderr)
}

// defaultBenchOut is where a bench writes its report unless told: outside the tracked files
// (make bench PUBLISH=1 replaces the committed report in docs/benchmarks).
const defaultBenchOut = "bench-out"

// loadBench turns `shoal-bench bench`'s arguments into the bench's settings, the binaries to run
// aside, and --shoal.
func loadBench(args []string, getenv func(string) string, stderr io.Writer) (bench.Settings, string, error) {
	fs := newFlagSet("bench", stderr)
	defaults := benchSettings{Settings: bench.Settings{Out: defaultBenchOut, TimeScale: 10, Pin: true},
		Scenarios: strings.Join(bench.DefaultScenarios(), ",")}
	in, _, err := config.Table[benchSettings]{Options: benchFlags(), Help: benchUsage}.Load(fs, args, getenv, defaults)
	if err != nil {
		return bench.Settings{}, "", fmt.Errorf("bench: %w", err)
	}
	if fs.NArg() > 0 {
		return bench.Settings{}, "", fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	set := in.Settings
	set.Scenarios, set.Version = splitList(in.Scenarios), version
	if in.StormSizes != "" {
		for _, f := range strings.Split(in.StormSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return bench.Settings{}, "", fmt.Errorf("bench: invalid --storm-workers %q: want positive numbers separated by commas", in.StormSizes)
			}
			set.StormSizes = append(set.StormSizes, n)
		}
	}
	if in.CapacityScales != "" {
		if set.CapacityScales, err = bench.ParseScales(in.CapacityScales); err != nil {
			return bench.Settings{}, "", fmt.Errorf("bench: %w", err)
		}
	}
	return set, in.Shoal, nil
}
