package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/scheduler/quarantine"
)

// testConfig is a configuration for an instance in a test: the defaults, any free port, and
// the embedded database in dataDir run inside the test (the database's own process is this
// program's db command, which a test binary is not; cmd/shoal's tests run it).
func testConfig(dataDir string) config.Config {
	cfg := config.DefaultConfig()
	cfg.DataDir, cfg.Addr, cfg.LogLevel = dataDir, "127.0.0.1:0", "warn"
	cfg.EmbeddedDBProcess = false
	return cfg
}

// startTestInstance starts an instance on cfg, shut down when the test ends.
func startTestInstance(t *testing.T, cfg config.Config) *Instance {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	inst, err := Start(context.Background(), cfg, Env{Logger: quietLogger(), Getenv: envOf(nil), Stdout: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", inst.Addr(), err)
		}
	})
	return inst
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openStopped opens the embedded database a stopped instance left in data, closed when the
// test ends.
func openStopped(t *testing.T, data string) *rundb.DB {
	t.Helper()
	db, err := rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	return db
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Runs changed in memory but not yet written (the flusher writes one per flush_period) are all
// written when the server shuts down.
func TestShutdownWritesEveryDirtyRun(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	cfg := testConfig(data)
	cfg.FlushPeriod = time.Hour
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	inst, err := Start(ctx, cfg, Env{Logger: logger, Getenv: envOf(map[string]string{"SHOAL_ADMIN_PASSWORD": "x"}), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	var ids []rundb.ObjectID
	for i := range 3 {
		r := &rundb.Run{ID: rundb.NewObjectID()}
		if err := inst.primary.RunCache().Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := inst.primary.RunCache().Change(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) {
			r.CommittedGames = 100 + i
			return runcache.Prio(i), nil
		}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if got := inst.primary.RunCache().Dirty(); got != 3 {
		t.Fatalf("Dirty() = %d before shutdown, want 3", got)
	}
	if err := inst.Shutdown(); err != nil {
		t.Fatal(err)
	}
	db := openStopped(t, data)
	for i, id := range ids {
		r, err := db.Runs.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.CommittedGames != 100+i {
			t.Errorf("run %d: committed_games %d after restart, want %d", i, r.CommittedGames, 100+i)
		}
	}
}

// The configuration's defaults that belong to other packages are theirs: config writes them
// out, since it imports none of Shoal's packages.
func TestConfigDefaultsAreThePackagesDefaults(t *testing.T) {
	c := config.DefaultConfig()
	if c.Database != rundb.DefaultDatabase {
		t.Errorf("database %q, rundb's default %q", c.Database, rundb.DefaultDatabase)
	}
	if c.LeaseTTL != journal.DefaultLeaseTTL {
		t.Errorf("lease_ttl %v, rundb's default %v", c.LeaseTTL, journal.DefaultLeaseTTL)
	}
	if c.TaskSemaphoreSize != scheduler.DefaultTaskSemaphoreSize {
		t.Errorf("task_semaphore_size %d, the scheduler's default %d", c.TaskSemaphoreSize, scheduler.DefaultTaskSemaphoreSize)
	}
	if got, want := quarantineSettings(c), quarantine.DefaultSettings(); got != want {
		t.Errorf("quarantine settings %+v, the quarantine package's defaults %+v", got, want)
	}
}

// With no configured secret, the first start generates one into the data directory (owner
// only) and later starts reuse it, so sessions survive restarts.
func TestSessionSecretIsGeneratedOnceAndKept(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.DefaultConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	first, err := sessionSecret(cfg, true, logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) < config.MinSessionSecret || string(first) == insecureDevSecret {
		t.Fatalf("generated secret %q is too short or the public one", first)
	}
	info, err := os.Stat(filepath.Join(cfg.DataDir, "session_secret"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("session_secret has mode %v, want 0600", info.Mode().Perm())
	}
	again, err := sessionSecret(cfg, true, logger)
	if err != nil || string(again) != string(first) {
		t.Errorf("second start: %q, %v; want the first secret back", again, err)
	}

	cfg.SessionSecret = strings.Repeat("k", 40)
	if got, _ := sessionSecret(cfg, true, logger); string(got) != cfg.SessionSecret {
		t.Errorf("a configured secret is not used: %q", got)
	}
	cfg.SessionSecret, cfg.InsecureDev = "", true
	cfg.DataDir = filepath.Join(t.TempDir(), "other")
	if got, _ := sessionSecret(cfg, true, logger); string(got) != insecureDevSecret {
		t.Errorf("insecure_dev without a secret: %q, want the public development secret", got)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "session_secret")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("insecure_dev wrote a secret file: %v", err)
	}

	// A secondary never makes its own: it must share the primary's.
	cfg.InsecureDev = false
	if _, err := sessionSecret(cfg, false, logger); err == nil || !strings.Contains(err.Error(), "secondary") {
		t.Errorf("a secondary without the primary's secret: %v, want a refusal", err)
	}

	// A truncated secret file is refused, not silently used.
	cfg.InsecureDev = false
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "session_secret"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionSecret(cfg, true, logger); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a 5-character secret file: %v, want a refusal", err)
	}
}

// SHOAL_ADMIN_PASSWORD only matters in an empty database; when it is set for one that has
// users, the start says it is ignored instead of leaving the operator to guess why admin fails.
func TestAdminPasswordIgnoredWithUsers(t *testing.T) {
	db := openStopped(t, filepath.Join(t.TempDir(), "data"))
	env := envOf(map[string]string{adminPasswordEnv: "chosen-password-123"})
	var first, second bytes.Buffer
	if err := ensureAdmin(context.Background(), db, env, &first); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.String(), "Created the first user: admin") {
		t.Fatalf("empty database: %q", first.String())
	}
	if err := ensureAdmin(context.Background(), db, env, &second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(second.String(), adminPasswordEnv+" is ignored") {
		t.Errorf("with users already there: %q, want a word that the password is ignored", second.String())
	}
}

// A primary answers while it loads its runs, as "starting": workers are told to retry (503,
// Retry-After) at once instead of waiting in the listen backlog, /readyz keeps load balancers
// away, /healthz says what it is doing; once the runs are loaded it is the primary.
func TestPrimaryAnswersWhileItLoadsItsRuns(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "data"))
	cfg.Journal = true
	loading, release := make(chan string, 1), make(chan struct{})
	env := Env{Logger: quietLogger(), Getenv: envOf(map[string]string{"SHOAL_ADMIN_PASSWORD": "x"}), Stdout: io.Discard,
		beforeLoad: func(addr string) { loading <- addr; <-release }}
	type started struct {
		inst *Instance
		err  error
	}
	done := make(chan started, 1)
	go func() {
		inst, err := Start(context.Background(), cfg, env)
		done <- started{inst, err}
	}()
	var base string
	select {
	case addr := <-loading:
		base = "http://" + addr
	case s := <-done:
		t.Fatalf("Start returned before the runs were loaded: %v", s.err)
	}

	if h := healthOf(t, base); h.Role != "starting" {
		t.Errorf("/healthz while loading: role %q, want starting", h.Role)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "starting") {
		t.Errorf("/readyz while loading: %d, Retry-After %q, %s; want 503 saying it is starting", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, err = http.Post(base+"/api/request_version", "application/json", strings.NewReader(`{"password": "x", "worker_info": {"username": "admin"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "starting") {
		t.Errorf("worker call while loading: %d, Retry-After %q, %s; want the retry 503 saying the primary is starting", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	close(release)
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() {
		if err := s.inst.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	if s.inst.Primary() == nil {
		t.Fatal("no scheduler once Start returned")
	}
	if h := healthOf(t, base); h.Role != "primary" {
		t.Errorf("/healthz once loaded: role %q, want primary", h.Role)
	}
	if !workerAPIAnswers(base, account{name: "admin", password: "x"}) {
		t.Error("the worker API does not answer as the primary once the runs are loaded")
	}
}
