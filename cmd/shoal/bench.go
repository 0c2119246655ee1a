package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shoal-chess/shoal/bench"
)

const benchUsage = `usage: shoal bench [--scenarios steady,storm,ceiling,critical-section,durability] [--out DIR] [--quick]

Measures Shoal (issue 8): starts the server as a separate process on a temporary
embedded database (or --mongo-uri, in a fresh database), drives it with a
simulated fleet from this process, and writes report.json and report.md to
--out. Scenarios:

  steady            N workers at time scale k on R active runs for D
  storm             500, 5,000 and 20,000 workers arriving within a second: time until
                    99 % hold a task, too-busy replies, request_task's latency
  ceiling           a bare net/http JSON handler's requests/s, and beat's
  critical-section  go test -bench of request_task's critical section (needs go)
  durability        rounds of steady four times, journal off, on, on, off: what storing
                    each acknowledged change before the reply costs, as the median of the
                    rounds' ratios (not in the default set)

Flags:
`

// benchCmd is `shoal bench`: its flags become bench.Settings, and the bench package does the
// rest.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	scenarios := fs.String("scenarios", strings.Join(bench.DefaultScenarios(), ","), "comma-separated scenarios to run")
	out := fs.String("out", filepath.Join("docs", "benchmarks"), "directory for report.json and report.md")
	mongoURI := fs.String("mongo-uri", getenv("SHOAL_MONGO_URI"), "run the server on this MongoDB (a fresh database) instead of the embedded one")
	quick := fs.Bool("quick", false, "small sizes for tests and CI: 500 workers, 5 runs, 30 s")
	workers := fs.Int("workers", 0, "steady: workers (default 10000, quick 500)")
	runs := fs.Int("runs", 0, "steady: active runs (default 50, quick 5)")
	duration := fs.Duration("duration", 0, "steady: how long the fleet works (default 5m, quick 30s)")
	durRounds := fs.Int("durability-rounds", 0, "durability: rounds of four legs, journal off, on, on, off (default 3, quick 1)")
	durLeg := fs.Duration("durability-leg", 0, "durability: how long the fleet works in each leg (default 1m, quick 30s)")
	scale := fs.Float64("time-scale", 10, "time compression of the server's knobs and the workers' clocks")
	stormSizes := fs.String("storm-workers", "", "storm: comma-separated fleet sizes, each arriving within a second (default 500,5000,20000; quick 500)")
	keep := fs.Bool("keep", false, "keep each server's directory (server.log, the embedded database) and print where it is")
	profiles := fs.String("profiles", "", "directory for the server's CPU and allocation profiles (default OUT/profiles; \"off\": none)")
	baseline := fs.String("baseline", "", "steady: also run against this shoal binary (say, built from the commit before a change) and report the ratios")
	pin := fs.Bool("pin", true, "run the server on CPU 0 and the fleet on the other CPUs (needs 2 CPUs and taskset)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	set := bench.Settings{Scenarios: splitList(*scenarios), Out: *out, MongoURI: *mongoURI, Quick: *quick,
		Workers: *workers, Runs: *runs, Duration: *duration, DurabilityRounds: *durRounds, DurabilityLeg: *durLeg,
		TimeScale: *scale, Keep: *keep, Profiles: *profiles, Baseline: *baseline, Pin: *pin, Version: version}
	if *stormSizes != "" {
		for _, f := range strings.Split(*stormSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("bench: invalid --storm-workers %q: want positive numbers separated by commas", *stormSizes)
			}
			set.StormSizes = append(set.StormSizes, n)
		}
	}
	// The servers' time knobs are the demo's, at the bench's scale.
	cfg := demoConfig("", *scale)
	set.Server = bench.ServerTimes{HeartbeatPeriod: cfg.HeartbeatPeriod, DeadTaskTimeout: cfg.DeadTaskTimeout,
		ScavengePeriod: cfg.ScavengePeriod, DuplicateWorkerWindow: cfg.DuplicateWorkerWindow}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find my own binary: %w", err)
	}
	set.Exe = exe
	return bench.Run(ctx, set, stdout, stderr)
}
