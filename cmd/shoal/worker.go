package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/build"
)

// stcGameSeconds is fishtest's estimate of one game at 10+0.1 ((10 + 68*0.1) * 2 * 0.92 s), the
// simulated games' default length.
const stcGameSeconds = 30.912

// newBuilder makes the builder of a building worker (--build) and fills cfg's worker_info with
// what it builds with: the compiler its build command builds with (g++ unless the command says
// COMP=clang) and the ARCH this machine builds today's Stockfish with (or the operator's arch).
// A machine without that compiler is refused here, before any task: every build would fail.
func newBuilder(ctx context.Context, s config.Worker, cfg *worker.Config, logger *slog.Logger) (*build.Builder, error) {
	compiler, err := build.DetectCompiler(ctx, cmp.Or(s.BuildCommand, build.DefaultCommand))
	if err != nil {
		return nil, fmt.Errorf("worker: --build: %w", err)
	}
	jobs := s.BuildJobs
	if jobs == 0 {
		jobs = s.Concurrency
	}
	b, err := build.New(build.Config{Dir: s.Dir, Command: s.BuildCommand, Jobs: jobs, Timeout: s.BuildTimeout,
		CacheEntries: s.EngineCache, CacheBytes: int64(s.EngineCacheMB) << 20, Binary: s.EngineBinary, Arch: s.Arch,
		Logger: logger.With("component", "build")})
	if err != nil {
		return nil, fmt.Errorf("worker: --build: %w", err)
	}
	cfg.Compiler, cfg.GCCVersion = compiler.Name, compiler.Version
	cfg.WorkerArch = build.WorkerArch(build.ReadCPU(), s.Arch)
	return b, nil
}

// workerCmd is `shoal worker`: one worker playing simulated games, or real ones between UCI
// engines built from the runs' commits (--build) or found on this machine (--engine,
// --engines), for a server. An interrupt (ctx ending) finishes and reports the current batch, gives the task
// back and exits cleanly; a second interrupt quits at once.
func workerCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", stderr)
	s, err := config.LoadWorker(fs, args, getenv)
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(s.LogLevel)) // checked by the option table
	logger := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: level}))

	pairTime := s.SimPairTime
	if pairTime == 0 {
		// As long as real games would take: a worker that played instantly would hammer the
		// server with one task after another.
		scale := s.TimeScale
		if scale <= 0 {
			scale = 1
		}
		pairTime = time.Duration(2 * stcGameSeconds * float64(time.Second) / float64(max(s.Concurrency, 1)) / scale)
	}
	cfg := worker.Config{
		ServerURL: s.Server, Username: s.Username, Password: s.Password,
		Concurrency: s.Concurrency, MaxMemory: s.MaxMemory,
		UniqueKey: worker.NewUniqueKey(s.UUIDPrefix), TimeScale: s.TimeScale,
		Logger: logger, StopFile: s.StopFile, MaxTasks: s.MaxTasks,
	}
	var src worker.GameSource = &worker.SimSource{Elo: s.SimElo, DrawRatio: s.SimDrawRatio, GameTime: pairTime}
	games := "simulated"
	switch {
	case s.Build:
		b, err := newBuilder(ctx, s, &cfg, logger)
		if err != nil {
			return err
		}
		defer b.Close()
		src = &worker.EngineSource{Build: b, Books: s.Books, Dir: s.Dir, Factor: s.SpeedFactor, Concurrency: s.Concurrency}
		games = "built"
	case s.Engine != "" || s.Engines != "":
		src = &worker.EngineSource{Engine: s.Engine, Engines: s.Engines, Books: s.Books, Dir: s.Dir,
			Factor: s.SpeedFactor, Concurrency: s.Concurrency}
		games = "real"
	}
	w, err := worker.New(cfg, src)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	info := w.Info()
	attrs := []any{"server", s.Server, "worker", info.LongName(), "unique_key", info.UniqueKey, "games", games}
	switch games {
	case "built":
		attrs = append(attrs, "dir", s.Dir, "worker_arch", info.WorkerArch, "arch", cmp.Or(s.Arch, "best of the Makefile's"),
			"compiler", fmt.Sprintf("%s %d.%d.%d", info.Compiler, info.GCCVersion[0], info.GCCVersion[1], info.GCCVersion[2]),
			"build_command", s.BuildCommand, "speed_factor", s.SpeedFactor)
	case "real":
		attrs = append(attrs, "engine", s.Engine, "engines", s.Engines, "speed_factor", s.SpeedFactor)
	default:
		attrs = append(attrs, "sim_elo", s.SimElo, "sim_draw_ratio", s.SimDrawRatio)
	}
	logger.Info("Shoal worker starting", attrs...)

	// The worker runs on its own context: ctx ending asks for a graceful stop, which must still be
	// able to report the batch; runCtx ending is the hard stop.
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	select {
	case err = <-done:
	case <-ctx.Done():
		logger.Info("Interrupted: finishing the current batch; interrupt again to quit at once")
		w.Stop()
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		select {
		case err = <-done:
		case <-again:
			cancel()
			err = <-done
		}
		signal.Stop(again)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("worker: quit without reporting the current batch")
		}
		return fmt.Errorf("worker: %w", err)
	}
	if s.StopFile != "" {
		// fishtest's worker removes fish.exit on its way out, so that the next start works.
		if err := os.Remove(s.StopFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			logger.Warn("Could not remove the stop file", "file", s.StopFile, "err", err)
		}
	}
	logger.Info("Shoal worker stopped")
	return nil
}
