package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// configEnv is the environment variable naming the configuration file. It is
// only consulted when no --config flag is given, so that a flag can always
// point a single run at a different file.
const configEnv = "SHOAL_CONFIG"

// Config is the configuration of a Shoal server (`shoal serve`); `shoal db` and `shoal user`
// read the part they need.
//
// A Config is built in layers: defaults, then a TOML file, then SHOAL_*
// environment variables, then command-line flags. Every option is described
// once, in the table returned by options, and that table drives all layers,
// the validation messages and the flag help.
type Config struct {
	// Addr is the HOST:PORT the HTTP server listens on.
	Addr string
	// DataDir is the directory holding persistent state, including the
	// embedded database's files.
	DataDir string
	// MongoURI points at an external MongoDB server. When it is empty shoal
	// starts its own embedded database instead.
	MongoURI string
	// Database is the name of the MongoDB database holding shoal's
	// collections.
	Database string
	// EmbeddedDBAddr is a loopback HOST:PORT on which the embedded database also listens, for
	// other processes of the same operating-system user (secondaries); empty: only its Unix
	// socket in the data directory. Port 0 picks any free port.
	EmbeddedDBAddr string
	// EmbeddedDBProcess runs the embedded database as a child process (`shoal db`) instead of
	// inside the server, so that its long writes do not hold up the server's handlers.
	EmbeddedDBProcess bool
	// LogLevel is one of debug, info, warn or error.
	LogLevel string
	// BooksURL is where the opening books' metadata (fishtest's books.json, with each book's
	// checksum that workers verify) is refreshed from; empty means only what the database holds.
	BooksURL string
	// NNURL is where GET /api/nn/{name} sends a client for a network known here without a
	// file in the data directory (a mirror or CDN of the networks); empty means this server's
	// own /nn/.
	NNURL string
	// TrustedProxies are the reverse proxies whose forwarding headers (the client's address,
	// scheme and country) the server believes: addresses or CIDR prefixes, checked by
	// ParseTrustedProxies. Connections from them are not limited per address.
	TrustedProxies []string
	// ReposAllowed are the engine repositories runs may name (tests_repo), which the server
	// mirrors: https:// URL prefixes, each admitting the repositories under it, and absolute
	// paths of local repositories, each admitting itself.
	ReposAllowed []string
	// ReposFetchTimeout bounds one fetch of a repository's mirror.
	ReposFetchTimeout time.Duration
	// ReposMaxMB bounds one repository's mirror on disk, in MiB.
	ReposMaxMB int
	// ReposCAFile is a PEM file of certificate authorities that fetches over https trust besides
	// the system's (a forge with a private CA); empty: the system's only.
	ReposCAFile string
	// SourceCacheMB bounds the source archives kept for workers, in MiB.
	SourceCacheMB int
	// ThreadpoolTokens bounds how many blocking database operations this
	// instance runs at once; further callers wait for a token.
	ThreadpoolTokens int
	// TaskSemaphoreSize is how many request_task callers are let in at once
	// (one schedules, the others wait); further callers are told at once
	// that the server is busy.
	TaskSemaphoreSize int
	// HeartbeatPeriod is how often a worker reports that it is alive.
	HeartbeatPeriod time.Duration
	// DeadTaskTimeout is how long a task may go without a heartbeat before
	// it is reclaimed.
	DeadTaskTimeout time.Duration
	// ScavengePeriod is how often dead tasks are looked for.
	ScavengePeriod time.Duration
	// FlushPeriod is how often the run cache writes one changed run to the
	// database.
	FlushPeriod time.Duration
	// Journal makes the primary store every change it acknowledges to a worker before the
	// reply leaves (see package journal). Off only to measure what it costs.
	Journal bool
	// JournalFsync is how often a journal kept in files (on the embedded database) is fsynced:
	// 0, each batch before it is acknowledged (see journal.Options.SyncEvery). The default,
	// 100 ms, is MongoDB's own journal commit interval.
	JournalFsync time.Duration
	// JournalGroupWait is how long a journal batch gathers changes before it is written (see
	// journal.Options.GroupWait).
	JournalGroupWait time.Duration
	// DuplicateWorkerWindow is how long a worker name stays reserved, so
	// that two workers claiming the same name are detected.
	DuplicateWorkerWindow time.Duration
	// TaskDuration is the amount of work handed out in one task.
	TaskDuration time.Duration
	// Quarantine turns on the rule that quarantines a worker machine whose time losses and
	// crashes (per game) or failed tasks (per task) stand far outside the rest of the fleet's on
	// the same runs; the Quarantine* fields are its thresholds (docs/QUARANTINE.md).
	Quarantine bool
	// QuarantineP is the one-sided Poisson tail probability below which a count is too many.
	QuarantineP float64
	// QuarantineMinGames, QuarantineMinTasks and QuarantineMinRuns are the least games, tasks
	// and runs in a machine's window before it is judged.
	QuarantineMinGames, QuarantineMinTasks, QuarantineMinRuns int
	// QuarantineMinRatio is how many times the fleet's predicted count a machine's must be.
	QuarantineMinRatio float64
	// QuarantineRateFloor and QuarantineFailureFloor are the least rates (per game, per task)
	// a prediction uses.
	QuarantineRateFloor, QuarantineFailureFloor float64
	// SessionSecret signs and encrypts the web UI's session cookies. Empty: a random secret
	// kept in DataDir/session_secret (created on first start), or with InsecureDev a fixed,
	// public one.
	SessionSecret string
	// Role is "primary" (schedules tasks, owns the run cache), "secondary" (serves pages, the
	// read API and PGN uploads from the shared database), "standby" (a secondary that takes
	// over when the primary's lease lapses) or "auto": primary when the listen port is
	// PrimaryPort, as fishtest decides.
	Role string
	// LeaseTTL is how long the primary's lease lasts unrenewed: a standby takes over that long
	// after the primary's last renewal (it renews every fifth of it).
	LeaseTTL time.Duration
	// PrimaryPort is the primary's port, for Role "auto".
	PrimaryPort int
	// InsecureDev allows development shortcuts that must never reach production: today, the
	// fixed session secret when none is configured.
	InsecureDev bool
	// ReadTimeout bounds the time to read a whole request, headers and body; uploads of PGNs and
	// networks get TransferTimeout instead.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of a request's headers to the end of its reply;
	// live streams and downloads extend their own.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its next request.
	IdleTimeout time.Duration
	// TransferTimeout is how long a PGN or network upload, or a download, may take.
	TransferTimeout time.Duration
	// MaxConnsPerAddress is how many connections one client address (an IPv6 /64) may hold
	// open; the local proxy's address is exempt, as it carries every client.
	MaxConnsPerAddress int
	// MaxConns is how many client connections may be open at once; 0 means the process's
	// open-file limit less a reserve for the database and files.
	MaxConns int
	// MetricsToken lets a scraper elsewhere read /metrics with "Authorization: Bearer <token>";
	// without it only direct clients on this machine may.
	MetricsToken string
	// PprofAddr is a loopback HOST:PORT serving Go's profiles (/debug/pprof/) on a listener of
	// its own, apart from the public one; empty: no profiles are served.
	PprofAddr string
	// Notify holds the notifications' settings (config/notify.go).
	Notify Notify

	// sources records, per option key, where the current value came from
	// ("config file x.toml", "SHOAL_ADDR", "--addr"), so that Validate can
	// tell the user which layer to fix. A key missing from the map holds its
	// default.
	sources Sources
}

// DefaultConfig returns the configuration before any file, environment or flag is applied.
//
// Three defaults are those of the packages that use them, written here so that this package
// imports none of Shoal's (a test in node holds them equal): the database name
// (rundb.DefaultDatabase, fishtest's), task_semaphore_size
// (scheduler.DefaultTaskSemaphoreSize) and lease_ttl (journal.DefaultLeaseTTL).
func DefaultConfig() Config {
	return Config{
		Addr:                  "127.0.0.1:8000",
		Role:                  "primary",
		PrimaryPort:           8000,
		DataDir:               "./data",
		MongoURI:              "",
		Database:              "fishtest_new",
		EmbeddedDBAddr:        "",
		EmbeddedDBProcess:     true,
		LogLevel:              "info",
		ReposAllowed:          []string{"https://github.com/"},
		TrustedProxies:        []string{"127.0.0.1", "::1"},
		ReposFetchTimeout:     10 * time.Minute,
		ReposMaxMB:            2048,
		SourceCacheMB:         1024,
		ThreadpoolTokens:      200,
		TaskSemaphoreSize:     5,
		HeartbeatPeriod:       120 * time.Second,
		DeadTaskTimeout:       360 * time.Second,
		ScavengePeriod:        60 * time.Second,
		FlushPeriod:           1 * time.Second,
		Journal:               true,
		JournalFsync:          100 * time.Millisecond,
		JournalGroupWait:      2 * time.Millisecond,
		LeaseTTL:              10 * time.Second,
		DuplicateWorkerWindow: 120 * time.Second,
		TaskDuration:          1800 * time.Second,
		// The quarantine's defaults are the quarantine package's (a test in node holds them
		// equal), measured with the fleet simulator (docs/QUARANTINE.md).
		Quarantine:             true,
		QuarantineP:            1e-9,
		QuarantineMinGames:     200,
		QuarantineMinTasks:     10,
		QuarantineMinRuns:      2,
		QuarantineMinRatio:     3,
		QuarantineRateFloor:    1e-3,
		QuarantineFailureFloor: 0.05,
		ReadTimeout:            30 * time.Second,
		WriteTimeout:           60 * time.Second,
		IdleTimeout:            90 * time.Second,
		TransferTimeout:        10 * time.Minute,
		MaxConnsPerAddress:     128,
		MaxConns:               0,
		Notify:                 defaultNotify(),
	}
}

// Compressed is c with its time knobs divided by scale, for a simulation whose workers' clocks
// run scale times faster (the demo, the bench): the heartbeat period and the duplicate-worker
// window divided by scale, the dead-task timeout too but at least 5 s and the scavenge period at
// least half a second, so that a busy machine's pause does not reclaim live tasks.
//
// task_duration is left as it is: the server sizes a task as task_duration divided by the
// estimated length of one game at the run's TC, and that estimate is not compressed (the
// simulated games are). Left at 1800 s, tasks keep fishtest's size in games and last
// 1800/scale seconds of wall time; divided by scale they would shrink to one SPRT batch or two
// games.
func (c Config) Compressed(scale float64) Config {
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	c.HeartbeatPeriod = div(c.HeartbeatPeriod)
	c.DeadTaskTimeout = max(div(c.DeadTaskTimeout), 5*time.Second)
	c.ScavengePeriod = max(div(c.ScavengePeriod), 500*time.Millisecond)
	c.DuplicateWorkerWindow = div(c.DuplicateWorkerWindow)
	return c
}

// Load builds a Config for a subcommand: defaults, then the TOML file named by --config (or
// SHOAL_CONFIG if no --config flag), then SHOAL_* environment variables, then flags (see
// Table.Load). fs is the subcommand's FlagSet; Load registers the config flags on it (plus
// --config), parses args, and returns the positional arguments left over. keys selects which
// options this subcommand accepts as flags (nil = all); the file and env still accept every
// key. The returned Config has been validated.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string, keys []string) (Config, []string, error) {
	t := Table[Config]{Options: options(), ConfigEnv: configEnv, Flags: keys}
	c, sources, err := t.Load(fs, args, getenv, DefaultConfig())
	if err != nil {
		return Config{}, nil, err
	}
	c.sources = sources
	if err := c.Validate(); err != nil {
		return Config{}, nil, err
	}
	return c, fs.Args(), nil
}

// Validate checks every value, returning the first problem found.
//
// Values are checked in the order of the option table, then the rules that
// relate two options. Each message names the key, the value and the layer
// it came from.
func (c Config) Validate() error {
	if err := (Table[Config]{Options: options()}).Check(&c, c.sources); err != nil {
		return err
	}
	// A secondary shares the primary's database; an embedded database of its own would hold
	// none of the runs.
	if !c.IsPrimary() && c.MongoURI == "" {
		return fmt.Errorf("invalid mongo_uri \"\" (from %s) for role %q (from %s): a secondary uses the primary's database: give --mongo-uri (the primary logs its embedded database's mongodb:// address)",
			c.source("mongo_uri"), c.Role, c.source("role"))
	}
	if c.Role == "standby" && !c.Journal {
		return fmt.Errorf("invalid journal false (from %s) for role standby (from %s): a standby takes over from the journal",
			c.source("journal"), c.source("role"))
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("invalid lease_ttl %q (from %s): at least 1s", c.LeaseTTL, c.source("lease_ttl"))
	}
	// A worker only proves it is alive once per heartbeat period, so a
	// timeout no longer than that period would reclaim every live worker's
	// task.
	if c.DeadTaskTimeout <= c.HeartbeatPeriod {
		return fmt.Errorf("invalid dead_task_timeout %q (from %s): must be greater than heartbeat_period %q (from %s)",
			c.DeadTaskTimeout, c.source("dead_task_timeout"), c.HeartbeatPeriod, c.source("heartbeat_period"))
	}
	return c.validateNotify()
}

// SlogLevel returns the log level as a slog.Level. It falls back to info for
// a level Validate would reject, so a caller that skipped validation still
// gets a usable logger.
func (c Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// source names the layer the value of key came from, for error messages.
func (c Config) source(key string) string {
	return c.sources.Of(key)
}

// Set parses raw as the value of key, with the key's own parsing and checks, and records
// source as where it came from, for a value a command takes in a way of its own (`shoal db`'s
// --addr, say). The Config is not validated again.
func (c *Config) Set(key, raw, source string) error {
	if c.sources == nil {
		c.sources = make(Sources)
	}
	return (Table[Config]{Options: options()}).Set(c, c.sources, key, raw, source)
}

// Changed lists, in table order, the keys whose values differ between a and b: what a reload
// of the configuration would change.
func Changed(a, b Config) []string {
	return (Table[Config]{Options: options()}).Changed(&a, &b)
}

// options returns the table of every configuration key, in the order they
// are validated and shown in help. It builds the table on each call rather
// than keeping it in a package variable, so there is no shared state.
func options() []Option[Config] {
	return append([]Option[Config]{
		String("addr", "HOST:PORT the HTTP server listens on",
			func(c *Config) *string { return &c.Addr }, checkAddr),
		String("data_dir", "directory for persistent data",
			func(c *Config) *string { return &c.DataDir }, checkNonEmpty).WithFlag("data"),
		String("mongo_uri", "MongoDB URI; empty starts the embedded database",
			func(c *Config) *string { return &c.MongoURI }, checkMongoURI).WithRedact(RedactURI),
		String("database", "MongoDB database name",
			func(c *Config) *string { return &c.Database }, checkDatabase),
		String("embedded_db_addr", "loopback HOST:PORT where the embedded database also listens, for this OS user's other processes only; empty: its Unix socket alone",
			func(c *Config) *string { return &c.EmbeddedDBAddr }, optional(checkEmbeddedDBAddr)),
		Bool("embedded_db_process", "run the embedded database as a process of its own (shoal db) that the server starts and stops, so its long run writes do not hold up the server's handlers; false: inside the server",
			func(c *Config) *bool { return &c.EmbeddedDBProcess }),
		String("log_level", "log level: debug, info, warn or error",
			func(c *Config) *string { return &c.LogLevel }, checkLogLevel),
		String("books_url", "URL of the books.json metadata refreshed every 15 scavenge periods (15 minutes by default); empty: only the database's",
			func(c *Config) *string { return &c.BooksURL }, checkOptionalURL),
		List("trusted_proxies", "reverse proxies whose X-Forwarded-For, X-Forwarded-Proto and X-Country-Code are believed, and whose connections are not limited per address: addresses or CIDR prefixes, comma-separated; none as wide as 0.0.0.0/0 or ::/0",
			func(c *Config) *[]string { return &c.TrustedProxies }, checkTrustedProxies),
		List("repos_allowed", "engine repositories runs may name, mirrored by the server: https:// URL prefixes (each admits the repositories under it) and absolute paths of local repositories, comma-separated",
			func(c *Config) *[]string { return &c.ReposAllowed }, checkReposAllowed),
		durationOption("repos_fetch_timeout", "the longest one fetch of a repository's mirror may take",
			func(c *Config) *time.Duration { return &c.ReposFetchTimeout }),
		intOption("repos_max_mb", "the largest a repository's mirror may grow on disk, in MiB",
			func(c *Config) *int { return &c.ReposMaxMB }),
		String("repos_ca_file", "PEM file of certificate authorities that fetches over https trust besides the system's; empty: the system's only",
			func(c *Config) *string { return &c.ReposCAFile }, nil),
		intOption("source_cache_mb", "how much of the source archives served to workers is kept on disk, in MiB",
			func(c *Config) *int { return &c.SourceCacheMB }),
		String("nn_url", "base URL of the networks' files (BASE/nn/NAME) for networks known without a file here; empty: this server's own /nn/",
			func(c *Config) *string { return &c.NNURL }, checkOptionalURL),
		intOption("threadpool_tokens", "maximum number of blocking database operations at once",
			func(c *Config) *int { return &c.ThreadpoolTokens }),
		intOption("task_semaphore_size", "request_task callers let in at once; the rest are told the server is busy",
			func(c *Config) *int { return &c.TaskSemaphoreSize }),
		durationOption("heartbeat_period", "how often workers report that they are alive (fishtest's worker: 120 s); the per-user and per-address request_task limits scale with it, and dead_task_timeout must exceed it",
			func(c *Config) *time.Duration { return &c.HeartbeatPeriod }),
		durationOption("dead_task_timeout", "time without a heartbeat after which a task is reclaimed; only time the primary serves counts (a task last heard of before a start or takeover gets this long from it)",
			func(c *Config) *time.Duration { return &c.DeadTaskTimeout }),
		durationOption("scavenge_period", "how often dead tasks are looked for",
			func(c *Config) *time.Duration { return &c.ScavengePeriod }),
		durationOption("flush_period", "how often the run cache writes one changed run to the database",
			func(c *Config) *time.Duration { return &c.FlushPeriod }),
		Bool("journal", "store each change acknowledged to a worker before answering (false: acknowledged results can be lost in a crash; for measuring the cost only)",
			func(c *Config) *bool { return &c.Journal }),
		Duration("journal_fsync", "on the embedded database, how often the journal's files are fsynced: an interval such as 100ms acknowledges a batch once written (a crash of the server loses nothing acknowledged, a crash of the machine up to that long, as MongoDB's default journaling); 0 fsyncs each batch before it is acknowledged (not even a power cut loses an acknowledged change), for a few milliseconds more on each reply",
			func(c *Config) *time.Duration { return &c.JournalFsync }, func(d time.Duration) error {
				if d < 0 || d > time.Minute {
					return errors.New("from 0 (fsync each batch) to 1m")
				}
				return nil
			}),
		Duration("journal_group_wait", "how long a journal batch gathers changes before it is written, while they arrive fast enough for it to bring four or more: changes arriving meanwhile share one fsync (journal_fsync = 0) or one insert (a shared database), for at most this much longer before each is acknowledged; sparser changes, 0, and a journal in files synced at an interval are written at once",
			func(c *Config) *time.Duration { return &c.JournalGroupWait }, func(d time.Duration) error {
				if d < 0 || d > 100*time.Millisecond {
					return errors.New("from 0 (write at once) to 100ms")
				}
				return nil
			}),
		durationOption("duplicate_worker_window", "how long a worker name stays reserved against duplicates",
			func(c *Config) *time.Duration { return &c.DuplicateWorkerWindow }),
		durationOption("task_duration", "amount of work handed out in one task",
			func(c *Config) *time.Duration { return &c.TaskDuration }),
		Bool("quarantine", "quarantine worker machines whose time losses and crashes, or failed tasks, stand far outside the rest of the fleet's on the same runs (docs/QUARANTINE.md)",
			func(c *Config) *bool { return &c.Quarantine }),
		Float("quarantine_p", "quarantine: the one-sided Poisson tail probability below which a machine's count of bad events is too many",
			func(c *Config) *float64 { return &c.QuarantineP }, openRange(0, 0.01)),
		intOption("quarantine_min_games", "quarantine: the least games in a machine's window before its time losses and crashes are judged",
			func(c *Config) *int { return &c.QuarantineMinGames }),
		intOption("quarantine_min_tasks", "quarantine: the least tasks in a machine's window before its failed tasks are judged",
			func(c *Config) *int { return &c.QuarantineMinTasks }),
		Int("quarantine_min_runs", "quarantine: the least runs in a machine's window before it is judged (at least 2)",
			func(c *Config) *int { return &c.QuarantineMinRuns }, 2, "must be an integer of at least 2"),
		Float("quarantine_min_ratio", "quarantine: how many times the count the fleet's rates predict a machine's count must be, at least",
			func(c *Config) *float64 { return &c.QuarantineMinRatio }, func(f float64) error {
				if f < 1 {
					return errors.New("must be at least 1")
				}
				return nil
			}),
		Float("quarantine_rate_floor", "quarantine: the least rate of time losses and crashes per game a prediction uses",
			func(c *Config) *float64 { return &c.QuarantineRateFloor }, openRange(0, 1)),
		Float("quarantine_failure_floor", "quarantine: the least rate of failed tasks per task a prediction uses",
			func(c *Config) *float64 { return &c.QuarantineFailureFloor }, openRange(0, 1)),
		String("role", "primary, secondary, standby (takes over when the primary's lease lapses), or auto (primary when the listen port is primary_port)",
			func(c *Config) *string { return &c.Role }, checkRole),
		durationOption("lease_ttl", "how long the primary's lease lasts unrenewed before a standby takes over",
			func(c *Config) *time.Duration { return &c.LeaseTTL }),
		intOption("primary_port", "the primary's port, for role auto",
			func(c *Config) *int { return &c.PrimaryPort }),
		String("session_secret", "secret (32+ characters) for the web UI's session cookies; empty: generated into the data directory",
			func(c *Config) *string { return &c.SessionSecret }, checkSessionSecret).WithRedact(Redacted),
		Bool("insecure_dev", "development mode: a fixed, public session secret when none is set; never in production",
			func(c *Config) *bool { return &c.InsecureDev }),
		durationOption("read_timeout", "time to read a whole request, headers and body (uploads get transfer_timeout)",
			func(c *Config) *time.Duration { return &c.ReadTimeout }),
		durationOption("write_timeout", "time from a request's headers to the end of its reply (live streams and downloads extend theirs)",
			func(c *Config) *time.Duration { return &c.WriteTimeout }),
		durationOption("idle_timeout", "how long a kept-alive connection may wait for its next request",
			func(c *Config) *time.Duration { return &c.IdleTimeout }),
		durationOption("transfer_timeout", "time a PGN or network upload, or a download, may take",
			func(c *Config) *time.Duration { return &c.TransferTimeout }),
		intOption("max_connections_per_address", "connections one client address (an IPv6 /64) may hold open; the local proxy is exempt",
			func(c *Config) *int { return &c.MaxConnsPerAddress }),
		countOption("max_connections", "client connections open at once; 0: the open-file limit less a reserve of 1000",
			func(c *Config) *int { return &c.MaxConns }),
		String("metrics_token", "bearer token that lets a scraper elsewhere read /metrics; empty: only direct clients on this machine",
			func(c *Config) *string { return &c.MetricsToken }, checkMetricsToken).WithRedact(Redacted),
		String("pprof_addr", "loopback HOST:PORT serving Go's pprof profiles at /debug/pprof/; empty: off",
			func(c *Config) *string { return &c.PprofAddr }, optional(checkLoopbackAddr)),
	}, notifyOptions()...)
}

// intOption describes a count that must be at least one; a zero-sized pool
// or semaphore would deadlock the server rather than fail loudly.
func intOption(key, usage string, field func(*Config) *int) Option[Config] {
	return Int(key, usage, field, 1, positiveIntReason)
}

// countOption describes a count where zero has a meaning of its own (say "derived").
func countOption(key, usage string, field func(*Config) *int) Option[Config] {
	return Int(key, usage, field, 0, "must be zero or a positive integer")
}

// durationOption describes a period or timeout that must be positive; a
// zero period would make a ticker panic or spin.
func durationOption(key, usage string, field func(*Config) *time.Duration) Option[Config] {
	return Duration(key, usage, field, func(d time.Duration) error {
		if d <= 0 {
			return errors.New("must be a positive duration")
		}
		return nil
	})
}

// openRange checks that a number is strictly between lo and hi.
func openRange(lo, hi float64) func(float64) error {
	return func(f float64) error {
		if !(f > lo && f < hi) {
			return fmt.Errorf("must be above %g and below %g", lo, hi)
		}
		return nil
	}
}

// positiveIntReason is given both for counts that are not integers and for
// counts below one, since both mistakes have the same fix.
const positiveIntReason = "must be a positive integer"

// checkAddr accepts HOST:PORT with a numeric port; the host may be empty to
// listen on every interface.
func checkAddr(s string) error {
	_, err := splitAddr(s)
	return err
}

// optional accepts the empty string and checks any other value with check.
func optional(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

// checkLoopbackAddr is checkAddr restricted to loopback hosts: the embedded
// database has no authentication, so it must never listen on a public
// interface.
func checkLoopbackAddr(s string) error {
	host, err := splitAddr(s)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("host must be a loopback address such as 127.0.0.1, ::1 or localhost")
}

// checkEmbeddedDBAddr is checkLoopbackAddr for the embedded database's address; its refusal
// also says how to reach the database from another machine.
func checkEmbeddedDBAddr(s string) error {
	if _, err := splitAddr(s); err != nil {
		return err
	}
	if err := checkLoopbackAddr(s); err != nil {
		return fmt.Errorf("%w: the embedded database has no passwords; from another machine, reach it through SSH port forwarding as the user that runs it (docs/SECURITY.md)", err)
	}
	return nil
}

// splitAddr splits HOST:PORT and checks the port, returning the host.
func splitAddr(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", errors.New("must be HOST:PORT")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", errors.New("must be HOST:PORT with a port from 0 to 65535")
	}
	return host, nil
}

// checkNonEmpty rejects an empty value, which would silently mean "the
// current directory" for a path.
func checkNonEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// checkMongoURI accepts an empty URI, meaning the embedded database, or a
// MongoDB connection string. Checking the scheme here catches a pasted
// HTTP URL or a bare host before the driver fails with a vaguer message.
func checkMongoURI(s string) error {
	if s == "" || strings.HasPrefix(s, "mongodb://") || strings.HasPrefix(s, "mongodb+srv://") {
		return nil
	}
	return errors.New("must be empty or start with mongodb:// or mongodb+srv://")
}

// checkDatabase applies MongoDB's rules for database names, so that a bad
// name fails at startup rather than on the first write.
func checkDatabase(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) >= 64:
		return errors.New("must be shorter than 64 bytes")
	case strings.ContainsAny(s, "/\\. \"$\x00"):
		return errors.New(`must not contain / \ . " $, a space or a NUL byte`)
	}
	return nil
}

// checkReposAllowed accepts https:// URL prefixes with a host and nothing after the path, and
// absolute paths; the mirrors check each entry again when they start.
func checkReposAllowed(entries []string) error {
	for _, e := range entries {
		if strings.HasPrefix(e, "/") {
			continue
		}
		u, err := url.Parse(e)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q is neither an https:// URL prefix (https://HOST/PATH) nor an absolute path", e)
		}
	}
	return nil
}

// checkOptionalURL accepts an empty string or an absolute http(s) URL.
func checkOptionalURL(s string) error {
	if s == "" {
		return nil
	}
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return errors.New("must be an http:// or https:// URL")
	}
	return nil
}

// MinSessionSecret is the shortest session secret accepted: 32 characters of a random
// string is more than the 128 bits a signing key needs.
const MinSessionSecret = 32

// checkSessionSecret accepts no secret (one is generated) or one long enough to be safe.
func checkSessionSecret(s string) error {
	if s != "" && len(s) < MinSessionSecret {
		return fmt.Errorf("must be at least %d characters (try: openssl rand -hex 32)", MinSessionSecret)
	}
	return nil
}

// checkRole accepts the four roles.
func checkRole(s string) error {
	switch s {
	case "primary", "secondary", "standby", "auto":
		return nil
	}
	return errors.New("must be primary, secondary, standby or auto")
}

// StartRole is the role the instance starts in: "primary", "secondary" or "standby" (auto
// resolved).
func (c Config) StartRole() string {
	switch {
	case c.Role == "standby":
		return "standby"
	case c.IsPrimary():
		return "primary"
	}
	return "secondary"
}

// IsPrimary resolves the role: auto means primary exactly when the listen port is
// primary_port (fishtest's rule).
func (c Config) IsPrimary() bool {
	switch c.Role {
	case "primary":
		return true
	case "secondary", "standby":
		return false
	}
	_, port, err := net.SplitHostPort(c.Addr)
	return err == nil && port == strconv.Itoa(c.PrimaryPort)
}

// checkLogLevel accepts the four levels SlogLevel understands.
func checkLogLevel(s string) error {
	switch s {
	case "debug", "info", "warn", "error":
		return nil
	}
	return errors.New("must be one of debug, info, warn, error")
}

// checkMetricsToken accepts no token, or one long enough not to be guessed.
func checkMetricsToken(s string) error {
	if s != "" && len(s) < 16 {
		return errors.New("must be empty or at least 16 characters")
	}
	return nil
}

// mappedIPv4 is the first IPv4 address mapped into IPv6: a prefix of 96 bits or fewer that holds
// it holds every IPv4 address.
var mappedIPv4 = netip.MustParseAddr("::ffff:0.0.0.0")

func checkTrustedProxies(entries []string) error {
	_, err := ParseTrustedProxies(entries)
	return err
}

// ParseTrustedProxies reads trusted_proxies: addresses ("10.0.0.5", "::1") or CIDR prefixes
// ("10.0.0.0/8"). It refuses an entry that is neither, and a prefix that holds every IPv4 or
// every IPv6 address (0.0.0.0/0, ::/0, ::ffff:0:0/96 and wider): with it any client could choose
// its own address for the per-address limits. An IPv4 address mapped into IPv6 is read as the
// IPv4 one, as Go reports such a peer.
func ParseTrustedProxies(entries []string) ([]netip.Prefix, error) {
	prefixes := make([]netip.Prefix, 0, len(entries))
	for _, e := range entries {
		var p netip.Prefix
		if strings.Contains(e, "/") {
			pr, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", e)
			}
			p = pr.Masked()
		} else {
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", e)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Bits() == 0 || (p.Bits() <= 96 && p.Contains(mappedIPv4)) {
			return nil, fmt.Errorf("%q holds every address, so any client could choose its own; list the proxies' addresses", e)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		prefixes = append(prefixes, p)
	}
	return prefixes, nil
}
