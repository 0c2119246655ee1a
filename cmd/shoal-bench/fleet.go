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

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/worker/fleet"
)

const fleetUsage = `usage: shoal-bench fleet --workers N [flags]

Runs N simulated workers in this process against a Shoal (or fishtest) server,
shows progress on stderr and prints a report (per-endpoint latency, errors,
tasks, games and the exactly-once check of every run touched) on stdout. It
exits non-zero when a run's results differ from what the fleet reported.

The workers log in as one user, all from this machine's address: give that user
a machine limit of at least N (shoal user add --machine-limit N).

Flags:
`

// fleetSettings are `shoal-bench fleet`'s settings: the fleet's options, and the few flags that are
// not one of them as they stand (lists given as text, and the report's file).
type fleetSettings struct {
	fleet.Options
	Until, Optimum, JSON string
}

// fleetFlags is the table of `shoal-bench fleet`'s flags. Only where the workers connect, and as
// whom, also come from the environment (the worker's variables); the rest are flags alone.
// fleet.Run checks the values.
func fleetFlags() []config.Option[fleetSettings] {
	return []config.Option[fleetSettings]{
		config.String("server", "the server's URL", func(o *fleetSettings) *string { return &o.ServerURL }, nil),
		config.String("username", "the workers' username", func(o *fleetSettings) *string { return &o.Username }, nil),
		config.String("password", "the workers' password (the environment keeps it out of ps)",
			func(o *fleetSettings) *string { return &o.Password }, nil).WithRedact(config.Redacted),
		config.Int("workers", "number of simulated workers (required)", func(o *fleetSettings) *int { return &o.Workers },
			1, "must be a positive integer").FlagOnly(),
		config.Int("concurrency", "cores each worker announces", func(o *fleetSettings) *int { return &o.Concurrency },
			1, "must be a positive integer").FlagOnly(),
		config.Float("elo", "true Elo of the tested engine over its base (logistic)", func(o *fleetSettings) *float64 { return &o.Elo }, nil).FlagOnly(),
		config.Float("draw_ratio", "share of drawn games", func(o *fleetSettings) *float64 { return &o.DrawRatio }, nil).FlagOnly(),
		config.Float("time_scale", "time compression: the workers' clocks and games run this many times faster; compress the server's time knobs alike",
			func(o *fleetSettings) *float64 { return &o.TimeScale }, nil).FlagOnly(),
		config.Duration("pair_time", "wall time of one game pair (0: two 10+0.1 games / concurrency / time scale)",
			func(o *fleetSettings) *time.Duration { return &o.PairTime }, nil).FlagOnly(),
		config.String("arrival", "how workers start: storm (all at once) or ramp",
			func(o *fleetSettings) *string { return (*string)(&o.Arrival) }, nil).FlagOnly(),
		config.Duration("ramp", "with --arrival ramp: start the workers evenly over this duration",
			func(o *fleetSettings) *time.Duration { return &o.Ramp }, nil).FlagOnly(),
		config.Float("vanish", "fraction of workers that vanish mid-task (their tasks await the dead-task timeout)",
			func(o *fleetSettings) *float64 { return &o.Vanish }, nil).FlagOnly(),
		config.Float("bad_data", "fraction of workers that send stats the server must refuse",
			func(o *fleetSettings) *float64 { return &o.BadData }, nil).FlagOnly(),
		config.Float("time_loss_rate", "a healthy worker's chance per game of a loss on time (0: 2e-4; negative: none)",
			func(o *fleetSettings) *float64 { return &o.TimeLossRate }, nil).FlagOnly(),
		config.Float("crash_rate", "a healthy worker's chance per game of an engine crash (0: 5e-5; negative: none)",
			func(o *fleetSettings) *float64 { return &o.CrashRate }, nil).FlagOnly(),
		config.Int("bad_workers", "how many workers are bad machines (the server's quarantine should catch them)",
			func(o *fleetSettings) *int { return &o.BadWorkers }, 0, "must be zero or a positive integer").FlagOnly(),
		config.Float("bad_time_loss_rate", "a bad machine's chance per game of a loss on time (with the next two all 0: 0.02)",
			func(o *fleetSettings) *float64 { return &o.BadTimeLossRate }, nil).FlagOnly(),
		config.Float("bad_crash_rate", "a bad machine's chance per game of an engine crash",
			func(o *fleetSettings) *float64 { return &o.BadCrashRate }, nil).FlagOnly(),
		config.Float("bad_fail_rate", "a bad machine's chance per batch of failing its task (failed_task)",
			func(o *fleetSettings) *float64 { return &o.BadFailRate }, nil).FlagOnly(),
		config.Duration("duration", "stop after this long (0: no limit)", func(o *fleetSettings) *time.Duration { return &o.Duration }, nil).FlagOnly(),
		config.String("until_finished", "stop once these runs are finished: RUN_ID,RUN_ID,...",
			func(o *fleetSettings) *string { return &o.Until }, nil).FlagOnly(),
		config.String("json", `also write the report as JSON to this file ("-": stdout, instead of the text report)`,
			func(o *fleetSettings) *string { return &o.JSON }, nil).FlagOnly(),
		config.Uint64("seed", "random seed for games, arrival and failures (0: random)", func(o *fleetSettings) *uint64 { return &o.Seed }).FlagOnly(),
		config.String("spsa_optimum", "for SPSA runs, each parameter's best value: NAME=VALUE,NAME=VALUE,...",
			func(o *fleetSettings) *string { return &o.Optimum }, nil).FlagOnly(),
		config.Float("spsa_elo_per_step", "for SPSA runs, the Elo one step c closer to the optimum is worth (0: 5)",
			func(o *fleetSettings) *float64 { return &o.SPSAEloPerStep }, nil).FlagOnly(),
		config.Int("processes", "split the workers over this many processes (each with its own heap and collector)",
			func(o *fleetSettings) *int { return &o.Processes }, 1, "must be a positive integer").FlagOnly(),
		config.Duration("stop_grace", "at the end, how long workers get to report the batch they are playing",
			func(o *fleetSettings) *time.Duration { return &o.StopGrace }, nil).FlagOnly(),
	}
}

// fleetCmd is `shoal-bench fleet`: a simulated fleet of workers and its report.
func fleetCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fleet", stderr)
	defaults := fleetSettings{Options: fleet.Options{ServerURL: defaultServer, Concurrency: 1, DrawRatio: 0.6, TimeScale: 1,
		Arrival: fleet.Storm, Ramp: 30 * time.Second, StopGrace: 30 * time.Second}}
	set, _, err := config.Table[fleetSettings]{Options: fleetFlags(), Help: fleetUsage}.Load(fs, args, getenv, defaults)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fleet: unexpected arguments %q", fs.Args())
	}
	if set.Workers <= 0 {
		return errors.New("fleet: --workers N is required (a positive number)")
	}
	if set.Username == "" || set.Password == "" {
		return errors.New("fleet: --username and --password (or SHOAL_USERNAME, SHOAL_PASSWORD) are required")
	}
	spsaOptimum, err := parseOptimum(set.Optimum)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	opts := set.Options
	opts.SPSAOptimum, opts.UntilFinished = spsaOptimum, splitList(set.Until)
	opts.Progress, opts.Terminal = stderr, isTerminal(stderr)
	if opts.Arrival != fleet.Ramp {
		opts.Ramp = 0
	}
	if opts.Processes > 1 {
		if opts.ShardCommand, err = shardCommand(); err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
	}
	if opts.Duration == 0 && len(opts.UntilFinished) == 0 {
		fmt.Fprintln(stderr, "No --duration or --until-finished: the fleet runs until interrupted (Ctrl-C).")
	}
	rep, err := fleet.Run(ctx, opts)
	if err != nil {
		return err
	}
	if set.JSON == "-" {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		if err := rep.WriteText(stdout); err != nil {
			return err
		}
		if set.JSON != "" {
			if err := writeReportFile(set.JSON, rep); err != nil {
				return fmt.Errorf("fleet: %w", err)
			}
		}
	}
	if !rep.ExactlyOnce {
		return errors.New("fleet: exactly-once check failed: a run's results differ from what the fleet reported")
	}
	return nil
}

// shardCommand is how a split fleet starts its processes: this binary's fleet.ShardSubcommand.
func shardCommand() ([]string, error) {
	exe, err := self()
	if err != nil {
		return nil, err
	}
	return []string{exe, fleet.ShardSubcommand}, nil
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
