package config

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"time"
)

// DefaultServer is where the client commands (`shoal worker`, `shoal run`, `shoal-bench fleet`)
// send their requests without --server: a local `shoal serve` with its default address.
const DefaultServer = "http://127.0.0.1:8000"

// workerConfigEnv names the worker's configuration file when no --config flag is given. It is
// not SHOAL_CONFIG, which names the server's file: one machine may run both.
const workerConfigEnv = "SHOAL_WORKER_CONFIG"

// Worker is the configuration of `shoal worker`, built like the server's: defaults, then
// a TOML file, then SHOAL_<KEY> environment variables, then flags.
type Worker struct {
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
	// Build makes the worker build the runs' engines from the server's sources, with
	// BuildCommand (BuildJobs jobs, 0 meaning Concurrency; g++ unless it says COMP=clang) and
	// the ARCH Arch (empty: the best this machine runs), within BuildTimeout; the engine is
	// src/EngineBinary, cached in Dir (at most EngineCache of them and EngineCacheMB MiB).
	Build         bool
	Dir           string
	BuildCommand  string
	BuildJobs     int
	BuildTimeout  time.Duration
	EngineCache   int
	EngineCacheMB int
	EngineBinary  string
	Arch          string
	LogLevel      string
}

// DefaultBuildCommand is the build command a building worker runs unless told otherwise:
// {jobs} and {arch} are replaced.
const DefaultBuildCommand = "make -j{jobs} build ARCH={arch}"

// DefaultWorker has fishtest's default concurrency, max(1, min(3, cores-1)).
func DefaultWorker() Worker {
	return Worker{
		Server:        DefaultServer,
		Concurrency:   max(1, min(3, runtime.NumCPU()-1)),
		TimeScale:     1,
		SimDrawRatio:  0.5,
		Dir:           "shoal-worker",
		BuildCommand:  DefaultBuildCommand,
		BuildTimeout:  15 * time.Minute,
		EngineCache:   16,
		EngineCacheMB: 2048,
		EngineBinary:  "stockfish",
		LogLevel:      "info",
	}
}

// workerOptions is the table of the worker's keys: each has a TOML key, a flag (the key with
// dashes) and an environment variable (SHOAL_ and the key in capitals).
func workerOptions() []Option[Worker] {
	atLeast := func(n int) string { return fmt.Sprintf("must be an integer of at least %d", n) }
	return []Option[Worker]{
		String("server", "the Shoal (or fishtest) server's URL", func(s *Worker) *string { return &s.Server }, checkServerURL),
		String("username", "the account the worker logs in with", func(s *Worker) *string { return &s.Username }, nil),
		String("password", "the account's password (prefer the environment: it keeps it out of ps)",
			func(s *Worker) *string { return &s.Password }, nil).WithRedact(Redacted),
		Int("concurrency", "cores to play with", func(s *Worker) *int { return &s.Concurrency }, 1, atLeast(1)),
		Int("max_memory", "memory the worker may use, in MiB; 0 = what its concurrency needs", func(s *Worker) *int { return &s.MaxMemory }, 0, atLeast(0)),
		String("uuid_prefix", "first segment of the worker's unique key (2 to 8 letters or digits); empty = random",
			func(s *Worker) *string { return &s.UUIDPrefix }, checkUUIDPrefix),
		Float("time_scale", "divide the protocol's periods (heartbeat 120 s, backoff 15 s to 900 s) by this",
			func(s *Worker) *float64 { return &s.TimeScale }, func(f float64) error {
				if f <= 0 {
					return errors.New("must be positive")
				}
				return nil
			}),
		String("stop_file", "when this file exists, finish the current batch and exit (fishtest's fish.exit); it is removed then",
			func(s *Worker) *string { return &s.StopFile }, nil),
		Int("max_tasks", "exit after this many tasks; 0 = never", func(s *Worker) *int { return &s.MaxTasks }, 0, atLeast(0)),
		Float("sim_elo", "true Elo difference of the simulated new engine", func(s *Worker) *float64 { return &s.SimElo }, nil),
		Float("sim_draw_ratio", "draw probability of the simulated games (0 to 1)", func(s *Worker) *float64 { return &s.SimDrawRatio },
			func(f float64) error {
				if f < 0 || f > 1 {
					return errors.New("must be between 0 and 1")
				}
				return nil
			}),
		Duration("sim_pair_time", "how long a simulated game pair takes; 0 (default): a real 10+0.1 pair's time (61.8 s) shared by the concurrency and divided by the time scale",
			func(s *Worker) *time.Duration { return &s.SimPairTime }, func(d time.Duration) error {
				if d < 0 {
					return errors.New("must not be negative")
				}
				return nil
			}),
		String("engine", "play real games with this UCI engine binary (both sides, unless engines has one for a run's tag or commit); empty: simulated games (or build)",
			func(s *Worker) *string { return &s.Engine }, nil),
		String("engines", "a directory of UCI engine binaries named by a run's tag or commit (real games)",
			func(s *Worker) *string { return &s.Engines }, nil),
		String("books", "a directory of the operator's opening books (EPD), used first, unchecked (real games); others come from dir/books, the worker, the server",
			func(s *Worker) *string { return &s.Books }, nil),
		Float("speed_factor", "real games: multiply the runs' time controls by this; 0 (default): by fishtest's reference speed over this machine's, from the engine's bench",
			func(s *Worker) *float64 { return &s.SpeedFactor }, func(f float64) error {
				if f < 0 {
					return errors.New("must not be negative")
				}
				return nil
			}),
		Bool("build", "build the runs' engines from their commits, the sources from the server (real games; not with engine or engines)",
			func(s *Worker) *bool { return &s.Build }),
		String("dir", "the worker's own directory: built engines, networks and books from the server, build sources while they build",
			func(s *Worker) *string { return &s.Dir }, func(v string) error {
				if v == "" {
					return errors.New("must not be empty")
				}
				return nil
			}),
		String("build_command", "the build command, run in the sources' src/ without a shell: split on spaces, {jobs} and {arch} replaced; it builds with g++ unless it says COMP=clang (needed on a machine with clang++ and no g++)",
			func(s *Worker) *string { return &s.BuildCommand }, func(v string) error {
				if strings.TrimSpace(v) == "" {
					return errors.New("must not be empty")
				}
				return nil
			}),
		Int("build_jobs", "{jobs} of the build command; 0 = the concurrency", func(s *Worker) *int { return &s.BuildJobs }, 0, atLeast(0)),
		Duration("build_timeout", "a build taking longer is killed and its task fails, as this machine's failure, not the commit's", func(s *Worker) *time.Duration { return &s.BuildTimeout },
			func(d time.Duration) error {
				if d <= 0 {
					return errors.New("must be positive")
				}
				return nil
			}),
		Int("engine_cache", "built engines kept (least recently used out)", func(s *Worker) *int { return &s.EngineCache }, 1, atLeast(1)),
		Int("engine_cache_mb", "MiB of built engines kept (least recently used out)", func(s *Worker) *int { return &s.EngineCacheMB }, 1, atLeast(1)),
		String("engine_binary", "the file the build command makes in src/", func(s *Worker) *string { return &s.EngineBinary },
			func(v string) error {
				if v == "" || strings.ContainsAny(v, `/\`) || strings.HasPrefix(v, ".") {
					return errors.New("must be a file name")
				}
				return nil
			}),
		String("arch", "the ARCH of every build (e.g. x86-64-avx2); empty: the best of the Makefile's that this machine runs",
			func(s *Worker) *string { return &s.Arch }, func(v string) error {
				if v != "" && (strings.HasPrefix(v, "-") || strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "") {
					return errors.New("must be letters, digits, '-', '_' or '.'")
				}
				return nil
			}),
		String("log_level", "debug, info, warn or error", func(s *Worker) *string { return &s.LogLevel }, checkLogLevel),
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

// LoadWorker registers the worker's flags on fs, parses args and applies the layers. A
// username and a password are required; no positional argument is taken.
func LoadWorker(fs *flag.FlagSet, args []string, getenv func(string) string) (Worker, error) {
	t := Table[Worker]{Options: workerOptions(), ConfigEnv: workerConfigEnv,
		ConfigUsage: "TOML configuration file (env " + workerConfigEnv + "); configs/worker.example.toml lists the keys"}
	s, _, err := t.Load(fs, args, getenv, DefaultWorker())
	if err != nil {
		return Worker{}, fmt.Errorf("worker: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return Worker{}, fmt.Errorf("worker: unexpected argument %q", fs.Arg(0))
	case s.Username == "":
		return Worker{}, errors.New("worker: --username (or SHOAL_USERNAME) is required")
	case s.Password == "":
		return Worker{}, errors.New("worker: --password (or SHOAL_PASSWORD) is required")
	case s.Build && (s.Engine != "" || s.Engines != ""):
		return Worker{}, errors.New("worker: build builds the runs' engines: it takes no engine or engines (--engine, --engines)")
	}
	return s, nil
}
