package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker/fleet"
	"github.com/shoal-chess/shoal/worker/match"
)

// demoTimeScale is the demo's time compression: the server's knobs and the workers' clocks run
// 120 times faster than fishtest's (a 30.9 s STC game takes a quarter of a second).
const demoTimeScale = 120

// demoRepository is the repository --source names: a directory as it is, or a .tar.gz unpacked
// into dir (the fixture holds one repository, stockfish.git).
func demoRepository(source, dir string) (string, error) {
	info, err := os.Stat(source)
	if err != nil {
		return "", err
	}
	if info.IsDir() {
		return filepath.Abs(source)
	}
	return demo.Unpack(source, filepath.Join(dir, "repository"))
}

// demoConfig is a server configuration for a simulation: an embedded database in dataDir, any
// free port, and fishtest's time knobs compressed by scale (config.Config.Compressed: the
// dead-task timeout stays at least 5 s, the scavenge period at least half a second, and
// task_duration keeps fishtest's size of a task in games). The database runs in this process:
// its process of its own is the product's `shoal db`, which this binary is not.
func demoConfig(dataDir string, scale float64) config.Config {
	cfg := config.DefaultConfig().Compressed(scale)
	cfg.DataDir = dataDir
	cfg.Addr = "127.0.0.1:0"
	cfg.LogLevel = "warn"
	cfg.EmbeddedDBProcess = false
	return cfg
}

// demoCmd is `shoal-bench demo`: a server on a temporary embedded database, an SPRT test submitted
// and approved through the API, and a simulated fleet that plays it until it is decided; with
// --engine, local workers playing real games with that engine decide it instead; with --source,
// a patch submitted by branch name is built from the server's sources by a local worker and
// played for a fixed number of games.
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
	source := fs.String("source", "", "build the engines from source: a git repository, or a .tar.gz of one (such as Stockfish 11's fixture), whose branches are submitted by name")
	newTag := fs.String("new-tag", "tweak-capture-reductions", "with --source: the patch's branch")
	baseTag := fs.String("base-tag", "tweak-futility", "with --source: the base's branch")
	games := fs.Int("games", 200, "with --source: games to play before the run is stopped")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *source != "" && *engine != "" {
		return errors.New("demo: --source builds the engines; give it or --engine, not both")
	}
	if *source != "" && *games < 2 {
		return errors.New("demo: --games must be at least 2")
	}
	realGames := *engine != "" || *source != ""
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
	repo := ""
	if *source != "" {
		if repo, err = demoRepository(*source, dir); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		cfg.ReposAllowed = append(cfg.ReposAllowed, repo)
	}
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
	switch {
	case *source != "":
		fmt.Fprintf(stdout, "Server ready at %s/\n", base)
		err = demo.RunSource(ctx, base, inst.DB(), demo.Source{Repo: repo, NewTag: *newTag, BaseTag: *baseTag,
			Games: *games, TC: *tc, Speed: *speed, Concurrency: runtime.NumCPU(), WorkerDir: filepath.Join(dir, "worker"),
			Limit: *limit, Stop: func(ctx context.Context, id rundb.ObjectID, username string) error {
				p := inst.Primary()
				if p == nil {
					return errors.New("the server is no longer the primary")
				}
				return p.Scheduler().StopRunByUser(ctx, id, username)
			}}, stdout)
	case realGames:
		fmt.Fprintf(stdout, "Server ready at %s/\n", base)
		err = demo.RunReal(ctx, base, inst.DB(), demo.Real{Engine: *engine, NewOptions: *newOptions, BaseOptions: *baseOptions,
			TC: *tc, Speed: *speed, Workers: *workers, Limit: *limit}, stdout)
	default:
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
