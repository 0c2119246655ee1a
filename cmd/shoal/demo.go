package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/worker/fleet"
	"github.com/shoal-chess/shoal/worker/match"
)

// demoTimeScale is the demo's time compression: the server's knobs and the workers' clocks run
// 120 times faster than fishtest's (a 30.9 s STC game takes a quarter of a second).
const demoTimeScale = 120

// demoConfig is a server configuration for a simulation: an embedded database in dataDir, any
// free port, and fishtest's time knobs compressed by scale (config.Config.Compressed: the
// dead-task timeout stays at least 5 s, the scavenge period at least half a second, and
// task_duration keeps fishtest's size of a task in games).
func demoConfig(dataDir string, scale float64) config.Config {
	cfg := config.DefaultConfig().Compressed(scale)
	cfg.DataDir = dataDir
	cfg.Addr = "127.0.0.1:0"
	cfg.LogLevel = "warn"
	return cfg
}

// demoCmd is `shoal demo`: a server on a temporary embedded database, an SPRT test submitted
// and approved through the API, and a simulated fleet that plays it until it is decided; with
// --engine, local workers playing real games with that engine decide it instead.
func demoCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	workers := fs.Int("workers", 300, "simulated workers")
	elo := fs.Float64("elo", 5, "true Elo of the patch (logistic)")
	drawRatio := fs.Float64("draw-ratio", 0.6, "share of drawn games")
	scale := fs.Float64("time-scale", demoTimeScale, "time compression of the server and the workers")
	limit := fs.Duration("timeout", 5*time.Minute, "give up if the test is not decided by then")
	seed := fs.Uint64("seed", 0, "random seed (0: random)")
	jsonOut := fs.String("json", "", "write the fleet's report as JSON to this file")
	engine := fs.String("engine", "", "play real games with this UCI engine (e.g. /usr/games/stockfish) instead of simulated ones")
	newOptions := fs.String("new-options", "Hash=16", "real games: the tested side's UCI options")
	baseOptions := fs.String("base-options", "Hash=16 UCI_LimitStrength=true UCI_Elo=1500", "real games: the base side's UCI options")
	tc := fs.String("tc", "10+0.1", "real games: the test's time control")
	speed := fs.Float64("speed-factor", 0.04, "real games: the workers play the time control this many times as long (0: scaled by this machine's bench, as for a real test)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	realGames := *engine != ""
	if realGames {
		// Real games take real time: one worker a core, nothing compressed.
		*scale = 1
		workersSet := false
		fs.Visit(func(f *flag.Flag) { workersSet = workersSet || f.Name == "workers" })
		if !workersSet {
			*workers = runtime.NumCPU()
		}
		if _, err := match.ParseTC(*tc); err != nil {
			return fmt.Errorf("demo: --tc: %w", err)
		}
		if !(*speed >= 0) {
			return errors.New("demo: --speed-factor must not be negative")
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected arguments %q", fs.Args())
	}
	if *workers < 1 || !(*scale >= 1) {
		return errors.New("demo: --workers must be positive and --time-scale at least 1")
	}

	dir, err := os.MkdirTemp("", "shoal-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	cfg := demoConfig(dir, *scale)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// The server logs only warnings and errors, to stderr: stdout is the demo's story.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintf(stdout, "Starting Shoal on a temporary embedded database (%s), time compressed %g×...\n", dir, *scale)
	inst, err := node.Start(ctx, cfg, node.Env{Logger: logger, Getenv: func(string) string { return "" }, Stdout: io.Discard, Version: version})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	base := "http://" + inst.Addr()
	if realGames {
		fmt.Fprintf(stdout, "Server ready at %s/\n", base)
		err = demo.RunReal(ctx, base, inst.DB(), demo.Real{Engine: *engine, NewOptions: *newOptions, BaseOptions: *baseOptions,
			TC: *tc, Speed: *speed, Workers: *workers, Limit: *limit}, stdout)
	} else {
		fmt.Fprintf(stdout, "Server ready at %s/ (heartbeat %v, dead task after %v, a task %v of wall time).\n",
			base, cfg.HeartbeatPeriod, cfg.DeadTaskTimeout, time.Duration(float64(cfg.TaskDuration)/(*scale)).Round(100*time.Millisecond))
		sim := demo.Simulated{Workers: *workers, Elo: *elo, DrawRatio: *drawRatio, TimeScale: *scale, Limit: *limit,
			Seed: *seed, Terminal: isTerminal(stdout)}
		if *jsonOut != "" {
			sim.Report = func(rep *fleet.Report) error { return writeReportFile(*jsonOut, rep) }
		}
		err = demo.RunSimulated(ctx, base, inst.DB(), sim, stdout)
	}
	return errors.Join(err, inst.Shutdown())
}
