package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
)

// configEnv is the environment variable naming the configuration file. It is
// only consulted when no --config flag is given, so that a flag can always
// point a single run at a different file.
const configEnv = "SHOAL_CONFIG"

// Config is the whole configuration of the shoal binary.
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
	// reply leaves (see rundb.Journal). Off only to measure what it costs.
	Journal bool
	// JournalFsync is how often a journal kept in files (on the embedded database) is fsynced:
	// 0, each batch before it is acknowledged (see rundb.JournalOptions.SyncEvery).
	JournalFsync time.Duration
	// JournalGroupWait is how long a journal batch gathers changes before it is written (see
	// rundb.JournalOptions.GroupWait).
	JournalGroupWait time.Duration
	// DuplicateWorkerWindow is how long a worker name stays reserved, so
	// that two workers claiming the same name are detected.
	DuplicateWorkerWindow time.Duration
	// TaskDuration is the amount of work handed out in one task.
	TaskDuration time.Duration
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

	// sources records, per option key, where the current value came from
	// ("config file x.toml", "SHOAL_ADDR", "--addr"), so that Validate can
	// tell the user which layer to fix. A key missing from the map holds its
	// default.
	sources map[string]string
}

// DefaultConfig returns the configuration before any file, environment or flag is applied.
func DefaultConfig() Config {
	return Config{
		Addr:                  "127.0.0.1:8000",
		Role:                  "primary",
		PrimaryPort:           8000,
		DataDir:               "./data",
		MongoURI:              "",
		Database:              rundb.DefaultDatabase,
		EmbeddedDBAddr:        "",
		EmbeddedDBProcess:     true,
		LogLevel:              "info",
		ThreadpoolTokens:      200,
		TaskSemaphoreSize:     scheduler.DefaultTaskSemaphoreSize,
		HeartbeatPeriod:       120 * time.Second,
		DeadTaskTimeout:       360 * time.Second,
		ScavengePeriod:        60 * time.Second,
		FlushPeriod:           1 * time.Second,
		Journal:               true,
		JournalGroupWait:      2 * time.Millisecond,
		LeaseTTL:              rundb.DefaultLeaseTTL,
		DuplicateWorkerWindow: 120 * time.Second,
		TaskDuration:          1800 * time.Second,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           90 * time.Second,
		TransferTimeout:       10 * time.Minute,
		MaxConnsPerAddress:    128,
		MaxConns:              0,
	}
}

// LoadConfig builds a Config for a subcommand: defaults, then the TOML file named by --config
// (or SHOAL_CONFIG if no --config flag), then SHOAL_* environment variables, then flags.
// fs is the subcommand's FlagSet; LoadConfig registers the config flags on it (plus --config),
// parses args, and returns the positional arguments left over.
// keys selects which options this subcommand accepts as flags (nil = all); the file and env
// still accept every key.
//
// Flags are parsed first because the file name itself may come from a flag,
// but their values are applied last so that they win over every other
// layer. An empty environment variable counts as unset, since getenv cannot
// tell the two apart. A nil getenv reads the process environment. A
// malformed value is an error even when a higher layer overrides it, so a
// broken file never goes unnoticed. The returned Config has been validated.
func LoadConfig(fs *flag.FlagSet, args []string, getenv func(string) string, keys []string) (Config, []string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	opts := options()
	flagOpts, err := selectOptions(opts, keys)
	if err != nil {
		return Config{}, nil, err
	}

	defaults := DefaultConfig()
	defineText(fs, "config", "", "path", "TOML configuration file (env "+configEnv+")")
	for _, opt := range flagOpts {
		if opt.boolean {
			fs.Bool(opt.flag, false, opt.usage+" (env "+opt.env+")")
			continue
		}
		defineText(fs, opt.flag, opt.get(&defaults), opt.kind(), opt.usage+" (env "+opt.env+")")
	}
	useTypedHelp(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, fmt.Errorf("parse flags: %w", err)
	}
	setFlags := make(map[string]string)
	fs.Visit(func(f *flag.Flag) { setFlags[f.Name] = f.Value.String() })

	c := defaults
	c.sources = make(map[string]string)

	path := getenv(configEnv)
	if p, ok := setFlags["config"]; ok {
		path = p
	}
	if path != "" {
		if err := c.applyFile(opts, path); err != nil {
			return Config{}, nil, err
		}
	}
	for _, opt := range opts {
		if raw := getenv(opt.env); raw != "" {
			if err := c.apply(opt, raw, opt.env); err != nil {
				return Config{}, nil, err
			}
		}
	}
	for _, opt := range flagOpts {
		if raw, ok := setFlags[opt.flag]; ok {
			if err := c.apply(opt, raw, "--"+opt.flag); err != nil {
				return Config{}, nil, err
			}
		}
	}

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
	for _, opt := range options() {
		if err := opt.check(&c); err != nil {
			return invalid(opt, opt.get(&c), c.source(opt.key), err)
		}
	}
	// A worker only proves it is alive once per heartbeat period, so a
	// timeout no longer than that period would reclaim every live worker's
	// task.
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
	if c.DeadTaskTimeout <= c.HeartbeatPeriod {
		return fmt.Errorf("invalid dead_task_timeout %q (from %s): must be greater than heartbeat_period %q (from %s)",
			c.DeadTaskTimeout, c.source("dead_task_timeout"), c.HeartbeatPeriod, c.source("heartbeat_period"))
	}
	return nil
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
	if s, ok := c.sources[key]; ok {
		return s
	}
	return "default"
}

// apply parses raw into the option and records where it came from. The raw
// text, not the parsed value, goes into the error so that the user sees
// exactly what they wrote.
func (c *Config) apply(opt option, raw, source string) error {
	if err := opt.set(c, raw); err != nil {
		return invalid(opt, raw, source, err)
	}
	c.sources[opt.key] = source
	return nil
}

// applyFile reads the TOML file at path and applies each of its keys. Keys
// are applied in file order so that the first problem reported is the first
// one in the file.
func (c *Config) applyFile(opts []option, path string) error {
	keys, values, err := tomlFile(path)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	byKey := make(map[string]option, len(opts))
	for _, opt := range opts {
		byKey[opt.key] = opt
	}
	source := "config file " + path
	for _, key := range keys {
		opt, ok := byKey[key]
		if !ok {
			return fmt.Errorf("config file %s: unknown key %q", path, key)
		}
		raw, err := tomlValueText(values[key], opt.numeric, opt.boolean)
		if err != nil {
			return invalid(opt, raw, source, err)
		}
		if err := c.apply(opt, raw, source); err != nil {
			return err
		}
	}
	return nil
}

// tomlFile reads a TOML file: its top-level keys in file order, and their values. Keys nested
// inside tables are left out: they are reported through their table, itself an unknown key.
func tomlFile(path string) ([]string, map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var values map[string]any
	md, err := toml.Decode(string(data), &values)
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	for _, k := range md.Keys() {
		if len(k) == 1 {
			keys = append(keys, k[0])
		}
	}
	return keys, values, nil
}

// tomlValueText turns a decoded TOML value into the text an option's setter
// parses, so that the file goes through the same parsing as env and flags.
// Numbers are only accepted by a numeric key and true/false by a boolean one:
// a number for addr or database is more likely a mistake than an intent.
func tomlValueText(v any, numeric, boolean bool) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		if numeric {
			return strconv.FormatInt(v, 10), nil
		}
	case float64:
		if numeric {
			return strconv.FormatFloat(v, 'g', -1, 64), nil
		}
	case bool:
		if boolean {
			return strconv.FormatBool(v), nil
		}
	}
	switch {
	case boolean:
		return fmt.Sprint(v), errors.New("must be true or false")
	case numeric:
		return fmt.Sprint(v), errors.New("must be a number or a string")
	}
	return fmt.Sprint(v), errors.New("must be a string")
}

// invalid formats a bad value the same way for every layer and for
// Validate, wrapping reason so callers can still inspect it.
func invalid(opt option, value, source string, reason error) error {
	if opt.redact != nil {
		value = opt.redact(value)
	}
	return fmt.Errorf("invalid %s %q (from %s): %w", opt.key, value, source, reason)
}

// option describes one configuration key. The table of options is the only
// place a key is listed; the file, the environment, the flags, Validate and
// the help text are all driven by it.
type option struct {
	key   string // name in the TOML file, e.g. "dead_task_timeout"
	env   string // environment variable, e.g. "SHOAL_DEAD_TASK_TIMEOUT"
	flag  string // flag name without dashes, e.g. "dead-task-timeout"
	usage string // one-line help text for the flag

	// numeric is true when the TOML file may give the value as a number.
	numeric bool
	// duration is true for a duration ("30s", or seconds as a number); numeric without it is
	// an integer. The help names the value by it.
	duration bool
	// boolean is true for a switch: a flag without a value, true or false in the file.
	boolean bool
	// set parses raw, checks it and stores it in c; it returns only the
	// reason when raw is bad, the caller adds key, value and source.
	set func(c *Config, raw string) error
	// get formats the current value so that set would accept it again.
	get func(c *Config) string
	// check tests the current value, returning only the reason.
	check func(c *Config) error
	// redact, if set, hides secrets in a value before it is printed.
	redact func(string) string
}

// kind names the option's value in the flags' help.
func (o option) kind() string {
	switch {
	case o.duration:
		return "duration"
	case o.numeric:
		return "int"
	}
	return "string"
}

// withFlag overrides the flag name derived from the key, for the few flags
// that are shorter than their key.
func (o option) withFlag(name string) option {
	o.flag = name
	return o
}

// withRedact installs a function that hides secrets in printed values.
func (o option) withRedact(redact func(string) string) option {
	o.redact = redact
	return o
}

// options returns the table of every configuration key, in the order they
// are validated and shown in help. It builds the table on each call rather
// than keeping it in a package variable, so there is no shared state.
func options() []option {
	opts := []option{
		stringOption("addr", "HOST:PORT the HTTP server listens on",
			func(c *Config) *string { return &c.Addr }, checkAddr),
		stringOption("data_dir", "directory for persistent data",
			func(c *Config) *string { return &c.DataDir }, checkNonEmpty).withFlag("data"),
		stringOption("mongo_uri", "MongoDB URI; empty starts the embedded database",
			func(c *Config) *string { return &c.MongoURI }, checkMongoURI).withRedact(rundb.RedactURI),
		stringOption("database", "MongoDB database name",
			func(c *Config) *string { return &c.Database }, checkDatabase),
		stringOption("embedded_db_addr", "loopback HOST:PORT where the embedded database also listens, for this OS user's other processes only; empty: its Unix socket alone",
			func(c *Config) *string { return &c.EmbeddedDBAddr }, optional(checkEmbeddedDBAddr)),
		boolOption("embedded_db_process", "run the embedded database as a process of its own (shoal db) that the server starts and stops, so its long run writes do not hold up the server's handlers; false: inside the server",
			func(c *Config) *bool { return &c.EmbeddedDBProcess }),
		stringOption("log_level", "log level: debug, info, warn or error",
			func(c *Config) *string { return &c.LogLevel }, checkLogLevel),
		stringOption("books_url", "URL of the books.json metadata refreshed every 15 scavenge periods (15 minutes by default); empty: only the database's",
			func(c *Config) *string { return &c.BooksURL }, checkOptionalURL),
		stringOption("nn_url", "base URL of the networks' files (BASE/nn/NAME) for networks known without a file here; empty: this server's own /nn/",
			func(c *Config) *string { return &c.NNURL }, checkOptionalURL),
		intOption("threadpool_tokens", "maximum number of blocking database operations at once",
			func(c *Config) *int { return &c.ThreadpoolTokens }),
		intOption("task_semaphore_size", "request_task callers let in at once; the rest are told the server is busy",
			func(c *Config) *int { return &c.TaskSemaphoreSize }),
		durationOption("heartbeat_period", "how often workers report that they are alive (fishtest's worker: 120 s); the per-user and per-address request_task limits scale with it, and dead_task_timeout must exceed it",
			func(c *Config) *time.Duration { return &c.HeartbeatPeriod }),
		durationOption("dead_task_timeout", "time without a heartbeat after which a task is reclaimed",
			func(c *Config) *time.Duration { return &c.DeadTaskTimeout }),
		durationOption("scavenge_period", "how often dead tasks are looked for",
			func(c *Config) *time.Duration { return &c.ScavengePeriod }),
		durationOption("flush_period", "how often the run cache writes one changed run to the database",
			func(c *Config) *time.Duration { return &c.FlushPeriod }),
		boolOption("journal", "store each change acknowledged to a worker before answering (false: acknowledged results can be lost in a crash; for measuring the cost only)",
			func(c *Config) *bool { return &c.Journal }),
		checkedDurationOption("journal_fsync", "on the embedded database, how often the journal's files are fsynced: 0 fsyncs each batch before it is acknowledged (a power cut loses nothing acknowledged); e.g. 100ms acknowledges once written (a server crash loses nothing, a machine crash up to that long)",
			func(c *Config) *time.Duration { return &c.JournalFsync }, func(d time.Duration) error {
				if d < 0 || d > time.Minute {
					return errors.New("from 0 (fsync each batch) to 1m")
				}
				return nil
			}),
		checkedDurationOption("journal_group_wait", "how long a journal batch gathers changes before it is written: changes arriving meanwhile share one write and one fsync, for at most this much longer before each is acknowledged; 0 writes at once",
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
		stringOption("role", "primary, secondary, standby (takes over when the primary's lease lapses), or auto (primary when the listen port is primary_port)",
			func(c *Config) *string { return &c.Role }, checkRole),
		durationOption("lease_ttl", "how long the primary's lease lasts unrenewed before a standby takes over",
			func(c *Config) *time.Duration { return &c.LeaseTTL }),
		intOption("primary_port", "the primary's port, for role auto",
			func(c *Config) *int { return &c.PrimaryPort }),
		stringOption("session_secret", "secret (32+ characters) for the web UI's session cookies; empty: generated into the data directory",
			func(c *Config) *string { return &c.SessionSecret }, checkSessionSecret).withRedact(func(string) string { return "(redacted)" }),
		boolOption("insecure_dev", "development mode: a fixed, public session secret when none is set; never in production",
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
		stringOption("metrics_token", "bearer token that lets a scraper elsewhere read /metrics; empty: only direct clients on this machine",
			func(c *Config) *string { return &c.MetricsToken }, checkMetricsToken).withRedact(func(string) string { return "(redacted)" }),
		stringOption("pprof_addr", "loopback HOST:PORT serving Go's pprof profiles at /debug/pprof/; empty: off",
			func(c *Config) *string { return &c.PprofAddr }, optional(checkLoopbackAddr)),
	}
	for i := range opts {
		opts[i].env = "SHOAL_" + strings.ToUpper(opts[i].key)
		if opts[i].flag == "" {
			opts[i].flag = strings.ReplaceAll(opts[i].key, "_", "-")
		}
	}
	return opts
}

// selectOptions returns the options named by keys, in table order, or all
// of them when keys is nil. An unknown key is a programming error in the
// caller, reported rather than silently ignored.
func selectOptions(opts []option, keys []string) ([]option, error) {
	if keys == nil {
		return opts, nil
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	var selected []option
	for _, opt := range opts {
		if want[opt.key] {
			selected = append(selected, opt)
			delete(want, opt.key)
		}
	}
	for _, k := range keys {
		if want[k] {
			return nil, fmt.Errorf("select config flags: unknown key %q", k)
		}
	}
	return selected, nil
}

// stringOption describes a string-valued key whose values must pass check.
func stringOption(key, usage string, field func(*Config) *string, check func(string) error) option {
	return option{
		key:   key,
		usage: usage,
		set: func(c *Config, raw string) error {
			if err := check(raw); err != nil {
				return err
			}
			*field(c) = raw
			return nil
		},
		get:   func(c *Config) string { return *field(c) },
		check: func(c *Config) error { return check(*field(c)) },
	}
}

// intOption describes a count that must be at least one; a zero-sized pool
// or semaphore would deadlock the server rather than fail loudly.
func intOption(key, usage string, field func(*Config) *int) option {
	return boundedIntOption(key, usage, 1, positiveIntReason, field)
}

// countOption describes a count where zero has a meaning of its own (say "derived").
func countOption(key, usage string, field func(*Config) *int) option {
	return boundedIntOption(key, usage, 0, "must be zero or a positive integer", field)
}

// boundedIntOption describes an integer of at least least; reason is the message for any
// other value, whether it is no integer or too small, since both have the same fix.
func boundedIntOption(key, usage string, least int, reason string, field func(*Config) *int) option {
	check := func(n int) error {
		if n < least {
			return errors.New(reason)
		}
		return nil
	}
	return option{
		key:     key,
		usage:   usage,
		numeric: true,
		set: func(c *Config, raw string) error {
			n, err := strconv.Atoi(raw)
			if err != nil {
				return errors.New(reason)
			}
			if err := check(n); err != nil {
				return err
			}
			*field(c) = n
			return nil
		},
		get:   func(c *Config) string { return strconv.Itoa(*field(c)) },
		check: func(c *Config) error { return check(*field(c)) },
	}
}

// boolOption describes a switch, off by default.
func boolOption(key, usage string, field func(*Config) *bool) option {
	return option{
		key:     key,
		usage:   usage,
		boolean: true,
		set: func(c *Config, raw string) error {
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return errors.New("must be true or false")
			}
			*field(c) = b
			return nil
		},
		get:   func(c *Config) string { return strconv.FormatBool(*field(c)) },
		check: func(*Config) error { return nil },
	}
}

// durationOption describes a period or timeout that must be positive; a
// zero period would make a ticker panic or spin.
func durationOption(key, usage string, field func(*Config) *time.Duration) option {
	return checkedDurationOption(key, usage, field, func(d time.Duration) error {
		if d <= 0 {
			return errors.New("must be a positive duration")
		}
		return nil
	})
}

// checkedDurationOption describes a duration whose values check accepts.
func checkedDurationOption(key, usage string, field func(*Config) *time.Duration, check func(time.Duration) error) option {
	return option{
		key:      key,
		usage:    usage,
		numeric:  true,
		duration: true,
		set: func(c *Config, raw string) error {
			d, err := parseDuration(raw)
			if err != nil {
				return err
			}
			if err := check(d); err != nil {
				return err
			}
			*field(c) = d
			return nil
		},
		get:   func(c *Config) string { return field(c).String() },
		check: func(c *Config) error { return check(*field(c)) },
	}
}

// positiveIntReason is given both for counts that are not integers and for
// counts below one, since both mistakes have the same fix.
const positiveIntReason = "must be a positive integer"

// parseDuration accepts a Go duration ("2m", "500ms") or a bare number of
// seconds ("120", "0.5"), since operators coming from the Python server
// write plain seconds.
func parseDuration(s string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, errors.New("not a duration")
		}
		ns := math.Round(secs * float64(time.Second))
		if ns >= math.MaxInt64 || ns <= math.MinInt64 {
			return 0, errors.New("duration out of range")
		}
		return time.Duration(ns), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration")
	}
	return d, nil
}

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

// minSessionSecret is the shortest session secret accepted: 32 characters of a random
// string is more than the 128 bits a signing key needs.
const minSessionSecret = 32

// checkSessionSecret accepts no secret (one is generated) or one long enough to be safe.
func checkSessionSecret(s string) error {
	if s != "" && len(s) < minSessionSecret {
		return fmt.Errorf("must be at least %d characters (try: openssl rand -hex 32)", minSessionSecret)
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
