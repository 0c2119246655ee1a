package config

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// loadInput is everything Load reads, so that each test case can
// describe a whole run without touching the real environment.
type loadInput struct {
	file string            // contents of a config file; "" means no file
	env  map[string]string // environment; SHOAL_CONFIG is added when file is set and no --config is given
	args []string          // command-line arguments
	keys []string          // keys accepted as flags; nil means all
}

// load writes in.file to a temporary file and runs Load on it. When
// the file is used, it is passed through SHOAL_CONFIG unless the case already
// names a config file itself.
func load(t *testing.T, in loadInput) (Config, []string, error) {
	t.Helper()
	env := make(map[string]string, len(in.env)+1)
	for k, v := range in.env {
		env[k] = v
	}
	if in.file != "" {
		path := writeFile(t, "shoal.toml", in.file)
		if _, ok := env[configEnv]; !ok {
			env[configEnv] = path
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Load(fs, in.args, mapEnv(env), in.keys)
}

// mapEnv returns a getenv function reading from m instead of the process.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile creates a file in a fresh temporary directory and returns its
// path.
func writeFile(t *testing.T, name, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutSources drops the source bookkeeping so that configs can be
// compared by value.
func withoutSources(c Config) Config {
	c.sources = nil
	return c
}

// defaultsWith returns the defaults changed by edit, for expected values.
func defaultsWith(edit func(c *Config)) Config {
	c := DefaultConfig()
	edit(&c)
	return c
}

// wantErrorParts fails the test unless err mentions every part.
func wantErrorParts(t *testing.T, err error, parts []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	want := Config{
		Addr:                  "127.0.0.1:8000",
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
		FlushPeriod:           time.Second,
		Journal:               true,
		JournalFsync:          100 * time.Millisecond,
		JournalGroupWait:      2 * time.Millisecond,
		LeaseTTL:              10 * time.Second,
		DuplicateWorkerWindow: 120 * time.Second,
		TaskDuration:          1800 * time.Second,
		Quarantine:            true, QuarantineP: 1e-9, QuarantineMinGames: 200, QuarantineMinTasks: 10,
		QuarantineMinRuns: 2, QuarantineMinRatio: 3, QuarantineRateFloor: 1e-3, QuarantineFailureFloor: 0.05,
		Role:               "primary",
		PrimaryPort:        8000,
		ReadTimeout:        30 * time.Second,
		WriteTimeout:       time.Minute,
		IdleTimeout:        90 * time.Second,
		TransferTimeout:    10 * time.Minute,
		MaxConnsPerAddress: 128,
		Notify: Notify{SMTPPort: 587, SMTPStartTLS: true, Timeout: 10 * time.Second, MaxAttempts: 8,
			Retention: 7 * 24 * time.Hour},
	}
	if got := DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig() = %+v, want %+v", got, want)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v, want nil", err)
	}

	got, rest, err := load(t, loadInput{})
	if err != nil {
		t.Fatalf("Load with nothing set: %v", err)
	}
	if !reflect.DeepEqual(withoutSources(got), want) {
		t.Errorf("Load with nothing set = %+v, want the defaults %+v", got, want)
	}
	if len(rest) != 0 {
		t.Errorf("Load with no arguments left %q over", rest)
	}
}

// Compressed divides the time knobs by the scale, with floors on the dead-task timeout and the
// scavenge period, and leaves the rest (task_duration among them) alone.
func TestCompressed(t *testing.T) {
	tests := []struct {
		scale                        float64
		beat, dead, scavenge, window time.Duration
	}{
		{1, 120 * time.Second, 360 * time.Second, 60 * time.Second, 120 * time.Second},
		{10, 12 * time.Second, 36 * time.Second, 6 * time.Second, 12 * time.Second},
		{50, 2400 * time.Millisecond, 7200 * time.Millisecond, 1200 * time.Millisecond, 2400 * time.Millisecond},
		// The floors: a dead task after 5 s, a scavenge every half second.
		{240, 500 * time.Millisecond, 5 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, tc := range tests {
		c := DefaultConfig().Compressed(tc.scale)
		if c.HeartbeatPeriod != tc.beat || c.DeadTaskTimeout != tc.dead || c.ScavengePeriod != tc.scavenge || c.DuplicateWorkerWindow != tc.window {
			t.Errorf("scale %g: heartbeat %v, dead task %v, scavenge %v, duplicate window %v; want %v, %v, %v, %v", tc.scale,
				c.HeartbeatPeriod, c.DeadTaskTimeout, c.ScavengePeriod, c.DuplicateWorkerWindow, tc.beat, tc.dead, tc.scavenge, tc.window)
		}
		want := DefaultConfig()
		want.HeartbeatPeriod, want.DeadTaskTimeout, want.ScavengePeriod, want.DuplicateWorkerWindow = c.HeartbeatPeriod, c.DeadTaskTimeout, c.ScavengePeriod, c.DuplicateWorkerWindow
		if !reflect.DeepEqual(c, want) {
			t.Errorf("scale %g changed more than the four knobs: %+v", tc.scale, c)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("scale %g: %v", tc.scale, err)
		}
	}
}

func TestOptionTable(t *testing.T) {
	opts := options()

	// Every exported field of Config must be reachable through the table, Notify's each;
	// the unexported source map is the only other field.
	if got, want := len(opts), reflect.TypeFor[Config]().NumField()-2+reflect.TypeFor[Notify]().NumField(); got != want {
		t.Errorf("options() has %d entries, Config has %d settable fields", got, want)
	}

	wantFlags := map[string]string{
		"addr":                        "addr",
		"data_dir":                    "data",
		"mongo_uri":                   "mongo-uri",
		"database":                    "database",
		"embedded_db_addr":            "embedded-db-addr",
		"embedded_db_process":         "embedded-db-process",
		"log_level":                   "log-level",
		"books_url":                   "books-url",
		"nn_url":                      "nn-url",
		"threadpool_tokens":           "threadpool-tokens",
		"task_semaphore_size":         "task-semaphore-size",
		"heartbeat_period":            "heartbeat-period",
		"dead_task_timeout":           "dead-task-timeout",
		"scavenge_period":             "scavenge-period",
		"flush_period":                "flush-period",
		"journal":                     "journal",
		"journal_fsync":               "journal-fsync",
		"journal_group_wait":          "journal-group-wait",
		"duplicate_worker_window":     "duplicate-worker-window",
		"task_duration":               "task-duration",
		"quarantine":                  "quarantine",
		"quarantine_p":                "quarantine-p",
		"quarantine_min_games":        "quarantine-min-games",
		"quarantine_min_tasks":        "quarantine-min-tasks",
		"quarantine_min_runs":         "quarantine-min-runs",
		"quarantine_min_ratio":        "quarantine-min-ratio",
		"quarantine_rate_floor":       "quarantine-rate-floor",
		"quarantine_failure_floor":    "quarantine-failure-floor",
		"session_secret":              "session-secret",
		"role":                        "role",
		"lease_ttl":                   "lease-ttl",
		"primary_port":                "primary-port",
		"insecure_dev":                "insecure-dev",
		"pprof_addr":                  "pprof-addr",
		"metrics_token":               "metrics-token",
		"read_timeout":                "read-timeout",
		"write_timeout":               "write-timeout",
		"idle_timeout":                "idle-timeout",
		"transfer_timeout":            "transfer-timeout",
		"max_connections_per_address": "max-connections-per-address",
		"max_connections":             "max-connections",
		"repos_allowed":               "repos-allowed",
		"trusted_proxies":             "trusted-proxies",
		"repos_fetch_timeout":         "repos-fetch-timeout",
		"repos_max_mb":                "repos-max-mb",
		"repos_ca_file":               "repos-ca-file",
		"source_cache_mb":             "source-cache-mb",
		"smtp_host":                   "smtp-host",
		"smtp_port":                   "smtp-port",
		"smtp_from":                   "smtp-from",
		"smtp_username":               "smtp-username",
		"smtp_password":               "smtp-password",
		"smtp_starttls":               "smtp-starttls",
		"webhook_allow_networks":      "webhook-allow-networks",
		"notify_timeout":              "notify-timeout",
		"notify_max_attempts":         "notify-max-attempts",
		"notify_retention":            "notify-retention",
	}
	seen := make(map[string]bool)
	defaults := DefaultConfig()
	for _, opt := range opts {
		if seen[opt.key] {
			t.Errorf("key %q is listed twice", opt.key)
		}
		seen[opt.key] = true
		if want, ok := wantFlags[opt.key]; !ok {
			t.Errorf("unexpected key %q", opt.key)
		} else if opt.flag != want {
			t.Errorf("key %q has flag --%s, want --%s", opt.key, opt.flag, want)
		}
		if want := "SHOAL_" + strings.ToUpper(opt.key); opt.env != want {
			t.Errorf("key %q has env %s, want %s", opt.key, opt.env, want)
		}

		// Setting a value to what get prints must change nothing, or
		// the flag help would advertise defaults that do not parse.
		c := DefaultConfig()
		if err := opt.set(&c, opt.get(&defaults)); err != nil {
			t.Errorf("key %q does not accept its own default %q: %v", opt.key, opt.get(&defaults), err)
		} else if !reflect.DeepEqual(c, defaults) {
			t.Errorf("key %q changes the config when given its own default %q", opt.key, opt.get(&defaults))
		}
	}
	for key := range wantFlags {
		if !seen[key] {
			t.Errorf("key %q is missing from options()", key)
		}
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	tests := []struct {
		name string
		in   loadInput
		want Config
	}{
		{
			name: "the file overrides the defaults",
			in:   loadInput{file: "addr = \"0.0.0.0:9000\"\nthreadpool_tokens = 7\nlog_level = \"debug\"\n"},
			want: defaultsWith(func(c *Config) { c.Addr = "0.0.0.0:9000"; c.ThreadpoolTokens = 7; c.LogLevel = "debug" }),
		},
		{
			name: "the environment overrides the defaults",
			in:   loadInput{env: map[string]string{"SHOAL_DATABASE": "other", "SHOAL_DATA_DIR": "/var/shoal"}},
			want: defaultsWith(func(c *Config) { c.Database = "other"; c.DataDir = "/var/shoal" }),
		},
		{
			name: "flags override the defaults",
			in:   loadInput{args: []string{"--data", "/srv/shoal", "-task-semaphore-size=9", "--mongo-uri", "mongodb://db:27017"}},
			want: defaultsWith(func(c *Config) { c.DataDir = "/srv/shoal"; c.TaskSemaphoreSize = 9; c.MongoURI = "mongodb://db:27017" }),
		},
		{
			name: "a list from a TOML array",
			in:   loadInput{file: "repos_allowed = [\"https://github.com/\", \"/srv/git/stockfish.git\"]\n"},
			want: defaultsWith(func(c *Config) { c.ReposAllowed = []string{"https://github.com/", "/srv/git/stockfish.git"} }),
		},
		{
			name: "trusted proxies on another host, by address and by prefix",
			in:   loadInput{file: "trusted_proxies = [\"10.0.0.5\", \"fd00:1::/64\", \"192.168.7.0/24\"]\n"},
			want: defaultsWith(func(c *Config) { c.TrustedProxies = []string{"10.0.0.5", "fd00:1::/64", "192.168.7.0/24"} }),
		},
		{
			name: "no trusted proxy at all",
			in:   loadInput{file: "trusted_proxies = []\n"},
			want: defaultsWith(func(c *Config) { c.TrustedProxies = nil }),
		},
		{
			name: "a list from the environment, comma-separated",
			in:   loadInput{env: map[string]string{"SHOAL_REPOS_ALLOWED": " https://git.example.org/chess/ , /srv/sf.git,"}},
			want: defaultsWith(func(c *Config) { c.ReposAllowed = []string{"https://git.example.org/chess/", "/srv/sf.git"} }),
		},
		{
			name: "the environment overrides the file",
			in: loadInput{
				file: "addr = \"0.0.0.0:9000\"\ndatabase = \"from_file\"\n",
				env:  map[string]string{"SHOAL_ADDR": "127.0.0.1:9001"},
			},
			want: defaultsWith(func(c *Config) { c.Addr = "127.0.0.1:9001"; c.Database = "from_file" }),
		},
		{
			name: "flags override the file",
			in: loadInput{
				file: "threadpool_tokens = 7\nscavenge_period = \"30s\"\n",
				args: []string{"--threadpool-tokens", "8"},
			},
			want: defaultsWith(func(c *Config) { c.ThreadpoolTokens = 8; c.ScavengePeriod = 30 * time.Second }),
		},
		{
			name: "flags override the environment",
			in: loadInput{
				env:  map[string]string{"SHOAL_LOG_LEVEL": "warn", "SHOAL_FLUSH_PERIOD": "2s"},
				args: []string{"--log-level=error"},
			},
			want: defaultsWith(func(c *Config) { c.LogLevel = "error"; c.FlushPeriod = 2 * time.Second }),
		},
		{
			name: "a key set in the file, the environment and a flag takes the flag",
			in: loadInput{
				file: "heartbeat_period = 10\nembedded_db_addr = \"127.0.0.1:1111\"\n",
				env:  map[string]string{"SHOAL_HEARTBEAT_PERIOD": "20", "SHOAL_EMBEDDED_DB_ADDR": "127.0.0.1:2222"},
				args: []string{"--heartbeat-period", "30s", "--embedded-db-addr", "localhost:3333"},
			},
			want: defaultsWith(func(c *Config) { c.HeartbeatPeriod = 30 * time.Second; c.EmbeddedDBAddr = "localhost:3333" }),
		},
		{
			name: "a key set in the file and the environment takes the environment",
			in: loadInput{
				file: "heartbeat_period = 10\n",
				env:  map[string]string{"SHOAL_HEARTBEAT_PERIOD": "20"},
			},
			want: defaultsWith(func(c *Config) { c.HeartbeatPeriod = 20 * time.Second }),
		},
		{
			name: "an empty environment variable leaves the file's value",
			in: loadInput{
				file: "database = \"from_file\"\n",
				env:  map[string]string{"SHOAL_DATABASE": ""},
			},
			want: defaultsWith(func(c *Config) { c.Database = "from_file" }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := load(t, tt.in)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(withoutSources(got), tt.want) {
				t.Errorf("Load = %+v\nwant %+v", withoutSources(got), tt.want)
			}
		})
	}
}

func TestLoadConfigFileLocation(t *testing.T) {
	fromFlag := writeFile(t, "flag.toml", "database = \"from_flag_file\"\n")
	fromEnv := writeFile(t, "env.toml", "database = \"from_env_file\"\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{
			name: "no --config and no SHOAL_CONFIG reads no file",
			want: "fishtest_new",
		},
		{
			name: "--config names the file",
			args: []string{"--config", fromFlag},
			want: "from_flag_file",
		},
		{
			name: "SHOAL_CONFIG names the file when there is no --config",
			env:  map[string]string{"SHOAL_CONFIG": fromEnv},
			want: "from_env_file",
		},
		{
			name: "--config wins over SHOAL_CONFIG",
			env:  map[string]string{"SHOAL_CONFIG": fromEnv},
			args: []string{"-config=" + fromFlag},
			want: "from_flag_file",
		},
		{
			name: "an explicitly empty --config reads no file even with SHOAL_CONFIG",
			env:  map[string]string{"SHOAL_CONFIG": fromEnv},
			args: []string{"--config="},
			want: "fishtest_new",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := load(t, loadInput{env: tt.env, args: tt.args})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.Database != tt.want {
				t.Errorf("Database = %q, want %q", got.Database, tt.want)
			}
		})
	}
}

func TestLoadConfigDurations(t *testing.T) {
	tests := []struct {
		name string
		in   loadInput
		want time.Duration
	}{
		{name: "a whole number in the file is seconds", in: loadInput{file: "flush_period = 3\n"}, want: 3 * time.Second},
		{name: "a fractional number in the file is seconds", in: loadInput{file: "flush_period = 0.25\n"}, want: 250 * time.Millisecond},
		{name: "a Go duration string in the file", in: loadInput{file: "flush_period = \"2m\"\n"}, want: 2 * time.Minute},
		{name: "a quoted bare number in the file is seconds", in: loadInput{file: "flush_period = \"45\"\n"}, want: 45 * time.Second},
		{name: "a bare number in the environment is seconds", in: loadInput{env: map[string]string{"SHOAL_FLUSH_PERIOD": "120"}}, want: 120 * time.Second},
		{name: "a fractional bare number in the environment is seconds", in: loadInput{env: map[string]string{"SHOAL_FLUSH_PERIOD": "0.5"}}, want: 500 * time.Millisecond},
		{name: "a Go duration string in the environment", in: loadInput{env: map[string]string{"SHOAL_FLUSH_PERIOD": "500ms"}}, want: 500 * time.Millisecond},
		{name: "a bare number in a flag is seconds", in: loadInput{args: []string{"--flush-period", "7"}}, want: 7 * time.Second},
		{name: "a compound Go duration in a flag", in: loadInput{args: []string{"--flush-period", "1h30m"}}, want: 90 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := load(t, tt.in)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.FlushPeriod != tt.want {
				t.Errorf("FlushPeriod = %v, want %v", got.FlushPeriod, tt.want)
			}
		})
	}
}

func TestLoadConfigInvalidValues(t *testing.T) {
	tests := []struct {
		name string
		in   loadInput
		want []string // parts the error must contain: key, value, source and reason
	}{
		{
			name: "a negative count from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_THREADPOOL_TOKENS": "-3"}},
			want: []string{`invalid threadpool_tokens "-3" (from SHOAL_THREADPOOL_TOKENS): must be a positive integer`},
		},
		{
			name: "a repository prefix that is not https",
			in:   loadInput{args: []string{"--repos-allowed", "https://github.com/,git://example.org/"}},
			want: []string{`invalid repos_allowed "https://github.com/,git://example.org/" (from --repos-allowed)`, `"git://example.org/" is neither an https:// URL prefix`},
		},
		{
			name: "a trusted proxy that is no address",
			in:   loadInput{args: []string{"--trusted-proxies", "127.0.0.1,proxy.example.org"}},
			want: []string{`invalid trusted_proxies "127.0.0.1,proxy.example.org" (from --trusted-proxies)`, `"proxy.example.org" is neither an address nor a CIDR prefix`},
		},
		{
			name: "every IPv4 address as a trusted proxy",
			in:   loadInput{env: map[string]string{"SHOAL_TRUSTED_PROXIES": "0.0.0.0/0"}},
			want: []string{"trusted_proxies", "SHOAL_TRUSTED_PROXIES", `"0.0.0.0/0" holds every address`},
		},
		{
			name: "every IPv6 address as a trusted proxy",
			in:   loadInput{file: "trusted_proxies = [\"::1\", \"::/0\"]\n"},
			want: []string{"trusted_proxies", "config file", `"::/0" holds every address`},
		},
		{
			name: "every IPv4 address, written mapped into IPv6",
			in:   loadInput{file: "trusted_proxies = [\"::ffff:0.0.0.0/96\"]\n"},
			want: []string{"trusted_proxies", `holds every address`},
		},
		{
			name: "a repository path that is relative",
			in:   loadInput{file: "repos_allowed = [\"stockfish.git\"]\n"},
			want: []string{"repos_allowed", "config file", `"stockfish.git" is neither`},
		},
		{
			name: "a list given a number in the file",
			in:   loadInput{file: "repos_allowed = 3\n"},
			want: []string{"repos_allowed", "must be an array of strings or a string"},
		},
		{
			name: "a zero count from a flag",
			in:   loadInput{args: []string{"--task-semaphore-size", "0"}},
			want: []string{`invalid task_semaphore_size "0" (from --task-semaphore-size): must be a positive integer`},
		},
		{
			name: "a count that is not a number from the file",
			in:   loadInput{file: "threadpool_tokens = \"lots\"\n"},
			want: []string{"threadpool_tokens", `"lots"`, "(from config file ", "shoal.toml)", "must be a positive integer"},
		},
		{
			name: "a fractional count from the file",
			in:   loadInput{file: "threadpool_tokens = 2.5\n"},
			want: []string{"threadpool_tokens", `"2.5"`, "config file", "must be a positive integer"},
		},
		{
			name: "a count given as a boolean in the file",
			in:   loadInput{file: "threadpool_tokens = true\n"},
			want: []string{"threadpool_tokens", `"true"`, "config file", "must be a number or a string"},
		},
		{
			name: "an address without a port from a flag",
			in:   loadInput{args: []string{"--addr", "localhost"}},
			want: []string{`invalid addr "localhost" (from --addr): must be HOST:PORT`},
		},
		{
			name: "an address with a port above 65535 from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_ADDR": "127.0.0.1:70000"}},
			want: []string{"addr", `"127.0.0.1:70000"`, "SHOAL_ADDR", "port from 0 to 65535"},
		},
		{
			name: "an address with a named port from a flag",
			in:   loadInput{args: []string{"--addr", ":http"}},
			want: []string{"addr", `":http"`, "--addr", "port from 0 to 65535"},
		},
		{
			name: "an address given as a number in the file",
			in:   loadInput{file: "addr = 8000\n"},
			want: []string{"addr", `"8000"`, "config file", "must be a string"},
		},
		{
			name: "an embedded database on every interface from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_EMBEDDED_DB_ADDR": "0.0.0.0:27017"}},
			want: []string{"embedded_db_addr", `"0.0.0.0:27017"`, "SHOAL_EMBEDDED_DB_ADDR", "loopback"},
		},
		{
			name: "an embedded database with an empty host from the file",
			in:   loadInput{file: "embedded_db_addr = \":27017\"\n"},
			want: []string{"embedded_db_addr", `":27017"`, "config file", "loopback"},
		},
		{
			name: "an embedded database on a public host name from a flag",
			in:   loadInput{args: []string{"--embedded-db-addr", "db.example.com:0"}},
			want: []string{"embedded_db_addr", `"db.example.com:0"`, "--embedded-db-addr", "loopback"},
		},
		{
			name: "an embedded database address without a port",
			in:   loadInput{args: []string{"--embedded-db-addr", "127.0.0.1"}},
			want: []string{"embedded_db_addr", `"127.0.0.1"`, "--embedded-db-addr", "must be HOST:PORT"},
		},
		{
			name: "a MongoDB URI with the wrong scheme from a flag",
			in:   loadInput{args: []string{"--mongo-uri", "http://db:27017"}},
			want: []string{"mongo_uri", `"http://db:27017"`, "--mongo-uri", "mongodb://"},
		},
		{
			name: "an empty database name from a flag",
			in:   loadInput{args: []string{"--database="}},
			want: []string{`invalid database "" (from --database): must not be empty`},
		},
		{
			name: "a database name with a dot from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_DATABASE": "fish.test"}},
			want: []string{"database", `"fish.test"`, "SHOAL_DATABASE", "must not contain"},
		},
		{
			name: "a database name with a slash from the file",
			in:   loadInput{file: "database = \"fish/test\"\n"},
			want: []string{"database", `"fish/test"`, "config file", "must not contain"},
		},
		{
			name: "a database name with a space",
			in:   loadInput{args: []string{"--database", "fish test"}},
			want: []string{"database", `"fish test"`, "--database", "must not contain"},
		},
		{
			name: "a database name with a dollar sign",
			in:   loadInput{args: []string{"--database", "fish$"}},
			want: []string{"database", `"fish$"`, "--database", "must not contain"},
		},
		{
			name: "a database name of 64 bytes",
			in:   loadInput{args: []string{"--database", strings.Repeat("d", 64)}},
			want: []string{"database", strings.Repeat("d", 64), "--database", "shorter than 64 bytes"},
		},
		{
			name: "an empty data directory from a flag",
			in:   loadInput{args: []string{"--data="}},
			want: []string{`invalid data_dir "" (from --data): must not be empty`},
		},
		{
			name: "an unknown log level from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_LOG_LEVEL": "verbose"}},
			want: []string{`invalid log_level "verbose" (from SHOAL_LOG_LEVEL): must be one of debug, info, warn, error`},
		},
		{
			name: "a duration that does not parse from the file",
			in:   loadInput{file: "heartbeat_period = \"abc\"\n"},
			want: []string{`invalid heartbeat_period "abc" (from config file `, "shoal.toml): not a duration"},
		},
		{
			name: "a zero duration from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_SCAVENGE_PERIOD": "0"}},
			want: []string{`invalid scavenge_period "0" (from SHOAL_SCAVENGE_PERIOD): must be a positive duration`},
		},
		{
			name: "a journal fsync interval over a minute from a flag",
			in:   loadInput{args: []string{"--journal-fsync", "2m"}},
			want: []string{`invalid journal_fsync "2m" (from --journal-fsync): from 0 (fsync each batch) to 1m`},
		},
		{
			name: "a journal group wait over 100ms from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_JOURNAL_GROUP_WAIT": "1s"}},
			want: []string{`invalid journal_group_wait "1s" (from SHOAL_JOURNAL_GROUP_WAIT): from 0 (write at once) to 100ms`},
		},
		{
			name: "a negative duration from a flag",
			in:   loadInput{args: []string{"--task-duration", "-5m"}},
			want: []string{`invalid task_duration "-5m" (from --task-duration): must be a positive duration`},
		},
		{
			name: "a negative number of seconds in the file",
			in:   loadInput{file: "duplicate_worker_window = -1\n"},
			want: []string{"duplicate_worker_window", `"-1"`, "config file", "must be a positive duration"},
		},
		{
			name: "an infinite duration from the environment",
			in:   loadInput{env: map[string]string{"SHOAL_FLUSH_PERIOD": "Inf"}},
			want: []string{"flush_period", `"Inf"`, "SHOAL_FLUSH_PERIOD", "not a duration"},
		},
		{
			name: "a number of seconds too large for a duration",
			in:   loadInput{args: []string{"--flush-period", "1e12"}},
			want: []string{"flush_period", `"1e12"`, "--flush-period", "out of range"},
		},
		{
			name: "a dead task timeout equal to the heartbeat period",
			in: loadInput{
				file: "heartbeat_period = \"5m\"\n",
				args: []string{"--dead-task-timeout", "300"},
			},
			want: []string{"dead_task_timeout", `"5m0s"`, "(from --dead-task-timeout)", "heartbeat_period", "(from config file "},
		},
		{
			name: "a heartbeat period longer than the default dead task timeout",
			in:   loadInput{env: map[string]string{"SHOAL_HEARTBEAT_PERIOD": "10m"}},
			want: []string{"dead_task_timeout", `"6m0s"`, "(from default)", "heartbeat_period", `"10m0s"`, "(from SHOAL_HEARTBEAT_PERIOD)"},
		},
		{
			name: "a bad value in the file is reported even when the environment overrides it",
			in: loadInput{
				file: "log_level = \"loud\"\n",
				env:  map[string]string{"SHOAL_LOG_LEVEL": "info"},
			},
			want: []string{"log_level", `"loud"`, "config file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, tt.in)
			wantErrorParts(t, err, tt.want)
		})
	}
}

func TestLoadConfigFileErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	tests := []struct {
		name     string
		contents string // written to a temporary file unless path is set
		path     string // a file to name instead of writing one
		want     []string
	}{
		{
			name:     "an unknown key",
			contents: "addr = \"127.0.0.1:8000\"\nthreadpool_token = 3\n",
			want:     []string{"config file ", "shoal.toml: unknown key \"threadpool_token\""},
		},
		{
			name:     "a table, which no key is",
			contents: "[server]\naddr = \"127.0.0.1:8000\"\n",
			want:     []string{"shoal.toml: unknown key \"server\""},
		},
		{
			name:     "a file that is not TOML",
			contents: "addr = \n",
			want:     []string{"config file ", "shoal.toml: ", "toml:"},
		},
		{
			name:     "a key given twice",
			contents: "addr = \":1\"\naddr = \":2\"\n",
			want:     []string{"config file ", "shoal.toml: ", "toml:", "addr"},
		},
		{
			name: "a file that does not exist",
			path: missing,
			want: []string{"config file " + missing + ": ", "no such file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = writeFile(t, "shoal.toml", tt.contents)
			}
			_, _, err := load(t, loadInput{args: []string{"--config", path}})
			wantErrorParts(t, err, tt.want)
		})
	}
}

func TestLoadConfigKeys(t *testing.T) {
	tests := []struct {
		name     string
		in       loadInput
		wantErr  string // "" for success
		wantRest []string
		check    func(c Config) bool // whether the loaded config is right
	}{
		{
			name:  "a flag among the selected keys is accepted",
			in:    loadInput{keys: []string{"addr", "data_dir"}, args: []string{"--data", "/tmp/d", "--addr", ":9"}},
			check: func(c Config) bool { return c.DataDir == "/tmp/d" && c.Addr == ":9" },
		},
		{
			name:    "a flag outside the selected keys is rejected as unknown",
			in:      loadInput{keys: []string{"addr"}, args: []string{"--log-level", "debug"}},
			wantErr: "flag provided but not defined: -log-level",
		},
		{
			name:    "an empty key list accepts no config flags",
			in:      loadInput{keys: []string{}, args: []string{"--addr", ":9"}},
			wantErr: "flag provided but not defined: -addr",
		},
		{
			name:  "an empty key list still reads the config file",
			in:    loadInput{keys: []string{}, file: "addr = \":9\"\n", env: map[string]string{}},
			check: func(c Config) bool { return c.Addr == ":9" },
		},
		{
			name: "the file and the environment still accept every key",
			in: loadInput{
				keys: []string{"addr"},
				file: "log_level = \"debug\"\n",
				env:  map[string]string{"SHOAL_TASK_DURATION": "60"},
			},
			check: func(c Config) bool { return c.LogLevel == "debug" && c.TaskDuration == time.Minute },
		},
		{
			name:    "an unknown key in the selection is reported",
			in:      loadInput{keys: []string{"addr", "adress"}},
			wantErr: `unknown key "adress"`,
		},
		{
			name:     "positional arguments are returned",
			in:       loadInput{args: []string{"--addr", ":9", "run", "--not-a-flag"}},
			wantRest: []string{"run", "--not-a-flag"},
			check:    func(c Config) bool { return c.Addr == ":9" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rest, err := load(t, tt.in)
			if tt.wantErr != "" {
				wantErrorParts(t, err, []string{tt.wantErr})
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tt.check != nil && !tt.check(got) {
				t.Errorf("Load = %+v, not what the case expects", withoutSources(got))
			}
			if !slices.Equal(rest, tt.wantRest) {
				t.Errorf("positional arguments = %q, want %q", rest, tt.wantRest)
			}
		})
	}
}

func TestLoadConfigHelp(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var help strings.Builder
	fs.SetOutput(&help)
	_, _, err := Load(fs, []string{"--help"}, mapEnv(nil), []string{"addr", "heartbeat_period"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load --help = %v, want an error wrapping flag.ErrHelp", err)
	}
	for _, want := range []string{"-addr", "SHOAL_ADDR", `"127.0.0.1:8000"`, "-heartbeat-period", "2m0s", "-config", "SHOAL_CONFIG"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help does not mention %q:\n%s", want, help.String())
		}
	}
	if strings.Contains(help.String(), "-log-level") {
		t.Errorf("help lists -log-level, which is not among the selected keys:\n%s", help.String())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want []string // nil when the config is valid
	}{
		{name: "the defaults", edit: func(c *Config) {}},
		{name: "an address with an empty host", edit: func(c *Config) { c.Addr = ":8000" }},
		{name: "an IPv6 address", edit: func(c *Config) { c.Addr = "[::]:8000" }},
		{name: "an embedded database on IPv6 loopback", edit: func(c *Config) { c.EmbeddedDBAddr = "[::1]:0" }},
		{name: "an embedded database on localhost", edit: func(c *Config) { c.EmbeddedDBAddr = "localhost:27017" }},
		{name: "an embedded database elsewhere in 127.0.0.0/8", edit: func(c *Config) { c.EmbeddedDBAddr = "127.0.0.2:65535" }},
		{name: "a mongodb URI", edit: func(c *Config) { c.MongoURI = "mongodb://localhost:27017" }},
		{name: "a mongodb+srv URI", edit: func(c *Config) { c.MongoURI = "mongodb+srv://cluster.example.com" }},
		{name: "a 63-byte database name", edit: func(c *Config) { c.Database = strings.Repeat("d", 63) }},
		{name: "the warn log level", edit: func(c *Config) { c.LogLevel = "warn" }},
		{
			name: "a changed field is reported as coming from the default",
			edit: func(c *Config) { c.ThreadpoolTokens = 0 },
			want: []string{`invalid threadpool_tokens "0" (from default): must be a positive integer`},
		},
		{
			name: "a zero duration",
			edit: func(c *Config) { c.FlushPeriod = 0 },
			want: []string{`invalid flush_period "0s" (from default): must be a positive duration`},
		},
		{
			name: "a public embedded database",
			edit: func(c *Config) { c.EmbeddedDBAddr = "10.0.0.1:27017" },
			want: []string{"embedded_db_addr", `"10.0.0.1:27017"`, "loopback"},
		},
		{
			name: "a dead task timeout shorter than the heartbeat",
			edit: func(c *Config) { c.DeadTaskTimeout = time.Minute },
			want: []string{`dead_task_timeout "1m0s"`, `heartbeat_period "2m0s"`},
		},
		{
			name: "the first problem in table order is reported",
			edit: func(c *Config) { c.LogLevel = "loud"; c.Addr = "nope" },
			want: []string{"invalid addr"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErrorParts(t, err, tt.want)
		})
	}
}

func TestValidateKeepsSources(t *testing.T) {
	c, _, err := load(t, loadInput{env: map[string]string{"SHOAL_TASK_SEMAPHORE_SIZE": "4"}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	c.TaskSemaphoreSize = -1
	wantErrorParts(t, c.Validate(), []string{`invalid task_semaphore_size "-1" (from SHOAL_TASK_SEMAPHORE_SIZE)`})
}

func TestMongoURIPasswordIsNotPrinted(t *testing.T) {
	tests := []struct {
		name string
		uri  string
		want string
	}{
		{name: "a URI with a scheme", uri: "mongo://admin:hunter2@db:27017", want: `"mongo://REDACTED@db:27017"`},
		{name: "a URI without a scheme", uri: "admin:hunter2@db:27017", want: `"REDACTED@db:27017"`},
		{name: "a password containing an at sign", uri: "http://admin:hun@ter2@db", want: `"http://REDACTED@db"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, loadInput{env: map[string]string{"SHOAL_MONGO_URI": tt.uri}})
			wantErrorParts(t, err, []string{"mongo_uri", tt.want, "SHOAL_MONGO_URI"})
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q prints the password", err)
			}
		})
	}
}

func TestSlogLevel(t *testing.T) {
	tests := []struct {
		level string
		want  slog.Level
	}{
		{"debug", slog.LevelDebug},
		{"info", slog.LevelInfo},
		{"warn", slog.LevelWarn},
		{"error", slog.LevelError},
		{"nonsense", slog.LevelInfo},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			c := DefaultConfig()
			c.LogLevel = tt.level
			if got := c.SlogLevel(); got != tt.want {
				t.Errorf("SlogLevel() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRole(t *testing.T) {
	for _, c := range []struct {
		role, addr, mongo string
		primary           bool
		err               string
	}{
		{"primary", "127.0.0.1:8000", "", true, ""},
		{"secondary", "127.0.0.1:8001", "mongodb://127.0.0.1:40000/", false, ""},
		{"auto", "127.0.0.1:8000", "", true, ""},
		{"auto", "127.0.0.1:8001", "mongodb://127.0.0.1:40000/", false, ""},
		{"secondary", "127.0.0.1:8001", "", false, "a secondary uses the primary's database"},
		{"auto", "127.0.0.1:8001", "", false, "a secondary uses the primary's database"},
		{"standby", "127.0.0.1:8000", "mongodb://127.0.0.1:40000/", false, ""},
		{"standby", "127.0.0.1:8003", "", false, "a secondary uses the primary's database"},
		{"replica", "127.0.0.1:8001", "", false, "must be primary, secondary, standby or auto"},
	} {
		args := []string{"--role", c.role, "--addr", c.addr}
		if c.mongo != "" {
			args = append(args, "--mongo-uri", c.mongo)
		}
		cfg, _, err := Load(flag.NewFlagSet("serve", flag.ContinueOnError), args, mapEnv(nil), nil)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want %q", args, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", args, err)
		case c.err == "" && cfg.IsPrimary() != c.primary:
			t.Errorf("%v: IsPrimary %v, want %v", args, cfg.IsPrimary(), c.primary)
		}
	}
}

// The flags' help names each value by what it takes, not "string" for every one, for serve's
// flags and the worker's alike.
func TestFlagHelpNamesValueKinds(t *testing.T) {
	help := func(load func(fs *flag.FlagSet) error) string {
		var out strings.Builder
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(&out)
		if err := load(fs); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("-help: %v, want flag.ErrHelp", err)
		}
		return out.String()
	}
	serve := help(func(fs *flag.FlagSet) error {
		_, _, err := Load(fs, []string{"-help"}, mapEnv(nil), nil)
		return err
	})
	worker := help(func(fs *flag.FlagSet) error {
		_, err := LoadWorker(fs, []string{"-help"}, mapEnv(nil))
		return err
	})
	for _, tt := range []struct{ help, want string }{
		{serve, "  -task-semaphore-size int\n"},
		{serve, "  -dead-task-timeout duration\n"},
		{serve, "(default 6m0s)"},
		{serve, "  -addr string\n"},
		{serve, `(default "127.0.0.1:8000")`},
		{serve, "  -insecure-dev\n"},
		{serve, "  -config path\n"},
		{worker, "  -concurrency int\n"},
		{worker, "  -time-scale float\n"},
		{worker, "  -sim-pair-time duration\n"},
		{worker, "  -server string\n"},
	} {
		if !strings.Contains(tt.help, tt.want) {
			t.Errorf("help lacks %q:\n%s", tt.want, tt.help)
		}
	}
	if strings.Contains(serve, "(default false)") {
		t.Errorf("a switch shows its default:\n%s", serve)
	}
}

// The prefixes the server trusts are the setting's, masked, with an IPv4 address mapped into
// IPv6 read as the IPv4 one (Go reports an IPv4 peer so).
func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies([]string{"10.0.0.5", "10.1.2.3/8", "::1", "::ffff:192.0.2.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("192.0.2.0/24")}
	if !slices.Equal(got, want) {
		t.Errorf("ParseTrustedProxies = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "fe80::1%eth0", "10.0.0.0/33", "0.0.0.0/0", "::/0", "::ffff:0:0/90"} {
		if _, err := ParseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("ParseTrustedProxies(%q) accepted it", bad)
		}
	}
}

func TestNotifySettingsAreChecked(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"a mail server without a sender", func(c *Config) { c.Notify.SMTPHost = "mail.example.org" }, "smtp_from"},
		{"a sender that is not an address", func(c *Config) { c.Notify.SMTPFrom = "Shoal <s@example.org>" }, "smtp_from"},
		{"a mail host with a port", func(c *Config) { c.Notify.SMTPHost = "mail.example.org:25" }, "smtp_host"},
		{"a network that is every address", func(c *Config) { c.Notify.WebhookAllowNetworks = []string{"0.0.0.0/0"} }, "every address"},
		{"a network that does not parse", func(c *Config) { c.Notify.WebhookAllowNetworks = []string{"lan"} }, "neither"},
		{"no attempts", func(c *Config) { c.Notify.MaxAttempts = 0 }, "notify_max_attempts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.set(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, c.want)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Notify.SMTPHost, cfg.Notify.SMTPFrom = "mail.example.org", "shoal@example.org"
	cfg.Notify.WebhookAllowNetworks = []string{"10.0.0.0/8", "::1"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("good settings: %v", err)
	}
}
