package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-chess/shoal/worker"
)

// workerConfigEnv names the worker's configuration file when no --config flag is given. It is
// not SHOAL_CONFIG, which names the server's file: one machine may run both.
const workerConfigEnv = "SHOAL_WORKER_CONFIG"

// workerSettings is the configuration of `shoal worker`, built like the server's: defaults, then
// a TOML file, then SHOAL_<KEY> environment variables, then flags.
type workerSettings struct {
	Server, Username, Password string
	Concurrency, MaxMemory     int
	UUIDPrefix                 string
	TimeScale                  float64
	StopFile                   string
	MaxTasks                   int
	SimElo, SimDrawRatio       float64
	SimPairTime                time.Duration
	// Engine, Engines, Books and SpeedFactor make the worker play real games (EngineSource).
	Engine, Engines, Books string
	SpeedFactor            float64
	LogLevel               string
}

// defaultWorkerSettings has fishtest's default concurrency, max(1, min(3, cores-1)).
func defaultWorkerSettings() workerSettings {
	return workerSettings{
		Server:       defaultServer,
		Concurrency:  max(1, min(3, runtime.NumCPU()-1)),
		TimeScale:    1,
		SimDrawRatio: 0.5,
		LogLevel:     "info",
	}
}

// workerOption is one key of the worker's configuration: its TOML key, flag (the key with
// dashes) and environment variable (SHOAL_ and the key in capitals).
type workerOption struct {
	key, usage string
	numeric    bool   // the TOML file may give a number
	kind       string // the value's name in the flags' help: int, float, duration or string
	set        func(s *workerSettings, raw string) error
	get        func(s *workerSettings) string
	secret     bool
}

func (o workerOption) flag() string { return strings.ReplaceAll(o.key, "_", "-") }
func (o workerOption) env() string  { return "SHOAL_" + strings.ToUpper(o.key) }

func workerOptions() []workerOption {
	str := func(key, usage string, field func(*workerSettings) *string, check func(string) error) workerOption {
		return workerOption{key: key, usage: usage, kind: "string",
			set: func(s *workerSettings, raw string) error {
				if err := check(raw); err != nil {
					return err
				}
				*field(s) = raw
				return nil
			},
			get: func(s *workerSettings) string { return *field(s) }}
	}
	integer := func(key, usage string, field func(*workerSettings) *int, least int) workerOption {
		return workerOption{key: key, usage: usage, numeric: true, kind: "int",
			set: func(s *workerSettings, raw string) error {
				n, err := strconv.Atoi(raw)
				if err != nil || n < least {
					return fmt.Errorf("must be an integer of at least %d", least)
				}
				*field(s) = n
				return nil
			},
			get: func(s *workerSettings) string { return strconv.Itoa(*field(s)) }}
	}
	float := func(key, usage string, field func(*workerSettings) *float64, check func(float64) error) workerOption {
		return workerOption{key: key, usage: usage, numeric: true, kind: "float",
			set: func(s *workerSettings, raw string) error {
				f, err := strconv.ParseFloat(raw, 64)
				if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
					return errors.New("must be a number")
				}
				if err := check(f); err != nil {
					return err
				}
				*field(s) = f
				return nil
			},
			get: func(s *workerSettings) string { return strconv.FormatFloat(*field(s), 'g', -1, 64) }}
	}
	anything := func(string) error { return nil }
	anyNumber := func(float64) error { return nil }
	return []workerOption{
		str("server", "the Shoal (or fishtest) server's URL", func(s *workerSettings) *string { return &s.Server }, checkServerURL),
		str("username", "the account the worker logs in with", func(s *workerSettings) *string { return &s.Username }, anything),
		func() workerOption {
			o := str("password", "the account's password (prefer the environment: it keeps it out of ps)",
				func(s *workerSettings) *string { return &s.Password }, anything)
			o.secret = true
			return o
		}(),
		integer("concurrency", "cores to play with", func(s *workerSettings) *int { return &s.Concurrency }, 1),
		integer("max_memory", "memory the worker may use, in MiB; 0 = what its concurrency needs", func(s *workerSettings) *int { return &s.MaxMemory }, 0),
		str("uuid_prefix", "first segment of the worker's unique key (2 to 8 letters or digits); empty = random",
			func(s *workerSettings) *string { return &s.UUIDPrefix }, checkUUIDPrefix),
		float("time_scale", "divide the protocol's periods (heartbeat 120 s, backoff 15 s to 900 s) by this",
			func(s *workerSettings) *float64 { return &s.TimeScale }, func(f float64) error {
				if f <= 0 {
					return errors.New("must be positive")
				}
				return nil
			}),
		str("stop_file", "when this file exists, finish the current batch and exit (fishtest's fish.exit); it is removed then",
			func(s *workerSettings) *string { return &s.StopFile }, anything),
		integer("max_tasks", "exit after this many tasks; 0 = never", func(s *workerSettings) *int { return &s.MaxTasks }, 0),
		float("sim_elo", "true Elo difference of the simulated new engine", func(s *workerSettings) *float64 { return &s.SimElo }, anyNumber),
		float("sim_draw_ratio", "draw probability of the simulated games (0 to 1)", func(s *workerSettings) *float64 { return &s.SimDrawRatio },
			func(f float64) error {
				if f < 0 || f > 1 {
					return errors.New("must be between 0 and 1")
				}
				return nil
			}),
		{key: "sim_pair_time", usage: "how long a simulated game pair takes; 0 (default): a real 10+0.1 pair's time (61.8 s) shared by the concurrency and divided by the time scale", numeric: true, kind: "duration",
			set: func(s *workerSettings, raw string) error {
				d, err := parseDuration(raw)
				if err != nil {
					return err
				}
				if d < 0 {
					return errors.New("must not be negative")
				}
				s.SimPairTime = d
				return nil
			},
			get: func(s *workerSettings) string { return s.SimPairTime.String() }},
		str("engine", "play real games with this UCI engine binary (both sides, unless engines has one for a run's tag or commit); empty: simulated games",
			func(s *workerSettings) *string { return &s.Engine }, anything),
		str("engines", "a directory of UCI engine binaries named by a run's tag or commit (real games)",
			func(s *workerSettings) *string { return &s.Engines }, anything),
		str("books", "a directory of opening books (EPD) beside the ones the worker ships (real games)",
			func(s *workerSettings) *string { return &s.Books }, anything),
		float("speed_factor", "real games: multiply the runs' time controls by this; 0 (default): by fishtest's reference speed over this machine's, from the engine's bench",
			func(s *workerSettings) *float64 { return &s.SpeedFactor }, func(f float64) error {
				if f < 0 {
					return errors.New("must not be negative")
				}
				return nil
			}),
		str("log_level", "debug, info, warn or error", func(s *workerSettings) *string { return &s.LogLevel }, checkLogLevel),
	}
}

func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want http://HOST[:PORT] or https://...")
	}
	return nil
}

func checkUUIDPrefix(s string) error {
	if s == "" {
		return nil
	}
	if len(s) < 2 || len(s) > 8 {
		return errors.New("must be 2 to 8 letters or digits")
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return errors.New("must be 2 to 8 letters or digits")
		}
	}
	return nil
}

// loadWorkerSettings registers the worker's flags on fs, parses args and applies the layers.
func loadWorkerSettings(fs *flag.FlagSet, args []string, getenv func(string) string) (workerSettings, error) {
	opts := workerOptions()
	defaults := defaultWorkerSettings()
	defineText(fs, "config", "", "path", "TOML configuration file (env "+workerConfigEnv+"); configs/worker.example.toml lists the keys")
	for _, o := range opts {
		def := o.get(&defaults)
		if o.secret {
			def = ""
		}
		defineText(fs, o.flag(), def, o.kind, o.usage+" (env "+o.env()+")")
	}
	useTypedHelp(fs)
	if err := fs.Parse(args); err != nil {
		return workerSettings{}, fmt.Errorf("worker: %w", err)
	}
	if fs.NArg() > 0 {
		return workerSettings{}, fmt.Errorf("worker: unexpected argument %q", fs.Arg(0))
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })

	s := defaults
	apply := func(o workerOption, raw, source string) error {
		if err := o.set(&s, raw); err != nil {
			shown := raw
			if o.secret {
				shown = "***"
			}
			return fmt.Errorf("worker: invalid %s %q (from %s): %w", o.key, shown, source, err)
		}
		return nil
	}
	path := getenv(workerConfigEnv)
	if p, ok := set["config"]; ok {
		path = p
	}
	if path != "" {
		if err := applyWorkerFile(opts, path, apply); err != nil {
			return workerSettings{}, err
		}
	}
	for _, o := range opts {
		if raw := getenv(o.env()); raw != "" {
			if err := apply(o, raw, o.env()); err != nil {
				return workerSettings{}, err
			}
		}
	}
	for _, o := range opts {
		if raw, ok := set[o.flag()]; ok {
			if err := apply(o, raw, "--"+o.flag()); err != nil {
				return workerSettings{}, err
			}
		}
	}
	switch {
	case s.Username == "":
		return workerSettings{}, errors.New("worker: --username (or SHOAL_USERNAME) is required")
	case s.Password == "":
		return workerSettings{}, errors.New("worker: --password (or SHOAL_PASSWORD) is required")
	}
	return s, nil
}

// applyWorkerFile applies the keys of a TOML file in file order; an unknown key is an error.
func applyWorkerFile(opts []workerOption, path string, apply func(workerOption, string, string) error) error {
	keys, values, err := tomlFile(path)
	if err != nil {
		return fmt.Errorf("worker: config file %s: %w", path, err)
	}
	byKey := map[string]workerOption{}
	for _, o := range opts {
		byKey[o.key] = o
	}
	source := "config file " + path
	for _, key := range keys {
		o, ok := byKey[key]
		if !ok {
			return fmt.Errorf("worker: config file %s: unknown key %q", path, key)
		}
		raw, err := tomlValueText(values[key], o.numeric, false)
		if err != nil {
			return fmt.Errorf("worker: invalid %s %v (from %s): %w", o.key, values[key], source, err)
		}
		if err := apply(o, raw, source); err != nil {
			return err
		}
	}
	return nil
}

// stcGameSeconds is fishtest's estimate of one game at 10+0.1 ((10 + 68*0.1) * 2 * 0.92 s), the
// simulated games' default length.
const stcGameSeconds = 30.912

// workerCmd is `shoal worker`: one worker playing simulated games, or real ones between local
// UCI engines (--engine, --engines), for a server. An interrupt (ctx ending) finishes and reports the current batch, gives the task
// back and exits cleanly; a second interrupt quits at once.
func workerCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", stderr)
	s, err := loadWorkerSettings(fs, args, getenv)
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(s.LogLevel)) // checked by checkLogLevel
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
	var src worker.GameSource = &worker.SimSource{Elo: s.SimElo, DrawRatio: s.SimDrawRatio, GameTime: pairTime}
	games := "simulated"
	if s.Engine != "" || s.Engines != "" {
		src = &worker.EngineSource{Engine: s.Engine, Engines: s.Engines, Books: s.Books,
			Factor: s.SpeedFactor, Concurrency: s.Concurrency}
		games = "real"
	}
	w, err := worker.New(worker.Config{
		ServerURL: s.Server, Username: s.Username, Password: s.Password,
		Concurrency: s.Concurrency, MaxMemory: s.MaxMemory,
		UniqueKey: worker.NewUniqueKey(s.UUIDPrefix), TimeScale: s.TimeScale,
		Logger: logger, StopFile: s.StopFile, MaxTasks: s.MaxTasks,
	}, src)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	attrs := []any{"server", s.Server, "worker", w.Info().LongName(), "unique_key", w.Info().UniqueKey, "games", games}
	if games == "real" {
		attrs = append(attrs, "engine", s.Engine, "engines", s.Engines, "speed_factor", s.SpeedFactor)
	} else {
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
