package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

const fleetUsage = `usage: shoal fleet --workers N [flags]

Runs N simulated workers in this process against a Shoal (or fishtest) server,
shows progress on stderr and prints a report (per-endpoint latency, errors,
tasks, games and the exactly-once check of every run touched) on stdout. It
exits non-zero when a run's results differ from what the fleet reported.

The workers log in as one user, all from this machine's address: give that user
a machine limit of at least N (shoal user add --machine-limit N).

Flags:
`

// fleetCmd is `shoal fleet`: a simulated fleet of workers and its report.
func fleetCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fleet", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, fleetUsage)
		fs.PrintDefaults()
	}
	server := fs.String("server", envOr(getenv, "SHOAL_SERVER", defaultServer), "the server's URL (env SHOAL_SERVER)")
	username := fs.String("username", getenv("SHOAL_USERNAME"), "the workers' username (env SHOAL_USERNAME)")
	password := fs.String("password", getenv("SHOAL_PASSWORD"), "the workers' password (env SHOAL_PASSWORD, which keeps it out of ps)")
	workers := fs.Int("workers", 0, "number of simulated workers (required)")
	concurrency := fs.Int("concurrency", 1, "cores each worker announces")
	elo := fs.Float64("elo", 0, "true Elo of the tested engine over its base (logistic)")
	drawRatio := fs.Float64("draw-ratio", 0.6, "share of drawn games")
	timeScale := fs.Float64("time-scale", 1, "time compression: the workers' clocks and games run this many times faster; compress the server's time knobs alike")
	pairTime := fs.Duration("pair-time", 0, "wall time of one game pair (default: two 10+0.1 games / concurrency / time scale)")
	arrival := fs.String("arrival", string(fleet.Storm), "how workers start: storm (all at once) or ramp")
	ramp := fs.Duration("ramp", 30*time.Second, "with --arrival ramp: start the workers evenly over this duration")
	vanish := fs.Float64("vanish", 0, "fraction of workers that vanish mid-task (their tasks await the dead-task timeout)")
	badData := fs.Float64("bad-data", 0, "fraction of workers that send stats the server must refuse")
	duration := fs.Duration("duration", 0, "stop after this long (0: no limit)")
	until := fs.String("until-finished", "", "stop once these runs are finished: RUN_ID,RUN_ID,...")
	jsonOut := fs.String("json", "", `also write the report as JSON to this file ("-": stdout, instead of the text report)`)
	seed := fs.Uint64("seed", 0, "random seed for games, arrival and failures (0: random)")
	optimum := fs.String("spsa-optimum", "", "for SPSA runs, each parameter's best value: NAME=VALUE,NAME=VALUE,...")
	eloPerStep := fs.Float64("spsa-elo-per-step", 0, "for SPSA runs, the Elo one step c closer to the optimum is worth (default 5)")
	grace := fs.Duration("stop-grace", 30*time.Second, "at the end, how long workers get to report the batch they are playing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fleet: unexpected arguments %q", fs.Args())
	}
	if *workers <= 0 {
		return errors.New("fleet: --workers N is required (a positive number)")
	}
	if *username == "" || *password == "" {
		return errors.New("fleet: --username and --password (or SHOAL_USERNAME, SHOAL_PASSWORD) are required")
	}
	spsaOptimum, err := parseOptimum(*optimum)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	opts := fleet.Options{
		ServerURL: *server, Username: *username, Password: *password,
		Workers: *workers, Concurrency: *concurrency, Elo: *elo, DrawRatio: *drawRatio,
		SPSAOptimum: spsaOptimum, SPSAEloPerStep: *eloPerStep, TimeScale: *timeScale, PairTime: *pairTime,
		Arrival: fleet.Arrival(*arrival), Ramp: *ramp, Vanish: *vanish, BadData: *badData,
		Duration: *duration, UntilFinished: splitList(*until), Seed: *seed,
		Progress: stderr, Terminal: isTerminal(stderr), StopGrace: *grace,
	}
	if opts.Arrival != fleet.Ramp {
		opts.Ramp = 0
	}
	if opts.Duration == 0 && len(opts.UntilFinished) == 0 {
		fmt.Fprintln(stderr, "No --duration or --until-finished: the fleet runs until interrupted (Ctrl-C).")
	}
	rep, err := fleet.Run(ctx, opts)
	if err != nil {
		return err
	}
	if *jsonOut == "-" {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		if err := rep.WriteText(stdout); err != nil {
			return err
		}
		if *jsonOut != "" {
			if err := writeReportFile(*jsonOut, rep); err != nil {
				return fmt.Errorf("fleet: %w", err)
			}
		}
	}
	if !rep.ExactlyOnce {
		return errors.New("fleet: exactly-once check failed: a run's results differ from what the fleet reported")
	}
	return nil
}

// writeReportFile writes the JSON report to path, replacing it whole.
func writeReportFile(path string, rep *fleet.Report) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// parseOptimum reads "NAME=VALUE,NAME=VALUE".
func parseOptimum(s string) (map[string]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range splitList(s) {
		name, value, ok := strings.Cut(part, "=")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if !ok || strings.TrimSpace(name) == "" || err != nil {
			return nil, fmt.Errorf("invalid --spsa-optimum entry %q: want NAME=VALUE", part)
		}
		out[strings.TrimSpace(name)] = v
	}
	return out, nil
}

// isTerminal reports whether w is a character device (a terminal), where progress is
// rewritten in place rather than printed line by line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
