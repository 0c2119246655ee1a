// Package node runs one Shoal instance: a primary, a standby or a secondary, with its database,
// its HTTP server and, while it is the primary, the scheduler and its jobs. Start brings an
// instance up, Reload applies a re-read configuration, Shutdown stops it in order; in between
// its role can change (failover.go): a standby takes over when the primary's lease lapses, and
// a primary that loses its lease steps down.
package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/tokenpool"
)

// shutdownGrace is how long in-flight requests get to finish once shutdown begins;
// closeGrace is how long writing the dirty runs and closing the database may then take.
// shutdownNotice is how long the server answers 503 before it stops listening;
// reloadShrinkLimit how long a reload waits for the tokens a smaller pool takes back.
const (
	reloadShrinkLimit = 30 * time.Second
	shutdownNotice    = 500 * time.Millisecond
	shutdownGrace     = 10 * time.Second
	closeGrace        = 60 * time.Second
)

// Reload applies a re-read configuration to a running instance: threadpool_tokens and
// task_semaphore_size take effect at once (shrinking the token pool waits for tokens in use to
// come back, up to reloadShrinkLimit or until ctx ends); any other change from the
// configuration the instance started with is logged as needing a restart. It is safe to call
// from any goroutine, and concurrently with another Reload (the pool's Resize is serialised).
func (inst *Instance) Reload(ctx context.Context, next config.Config) {
	inst.logger.Info("reload: applying", "threadpool_tokens", next.ThreadpoolTokens, "task_semaphore_size", next.TaskSemaphoreSize)
	// The size is kept for a primary this instance becomes later (a standby's takeover), and
	// applied to the one it is now.
	inst.roleMu.Lock()
	inst.semaphoreSize = next.TaskSemaphoreSize
	p := inst.primary
	inst.roleMu.Unlock()
	if p != nil {
		p.Scheduler().SetTaskSemaphoreSize(next.TaskSemaphoreSize)
	}
	// A shrink waits for tokens in use to come back, and holds up new callers meanwhile: give
	// up (keeping the old size) rather than wait on a stuck request for long.
	rctx, cancel := context.WithTimeout(ctx, reloadShrinkLimit)
	defer cancel()
	if err := inst.tokens.Resize(rctx, next.ThreadpoolTokens); err != nil {
		inst.logger.Error("reload: threadpool_tokens not changed", "want", next.ThreadpoolTokens, "err", err)
	} else {
		inst.logger.Info("reload: threadpool_tokens in force", "size", inst.tokens.Size())
	}
	for _, key := range config.Changed(inst.cfg, next) {
		if key == "threadpool_tokens" || key == "task_semaphore_size" {
			continue
		}
		inst.logger.Warn("reload: this setting changes only at a restart", "key", key)
	}
}

// Instance is a running server and everything it owns. Its role can change at run time: a
// standby becomes the primary when the primary's lease lapses, and a primary that loses its
// lease steps down (failover.go).
type Instance struct {
	logger *slog.Logger
	cfg    config.Config
	// leaseHolder names this instance in the primary's lease (see holder).
	leaseHolder string
	getenv      func(string) string
	metrics     *metrics.Metrics
	addr        string
	db          *rundb.DB
	srv         *server.Server
	httpSrv     *http.Server
	served      chan error // receives Serve's error if it stops by itself
	tokens      *tokenpool.Pool
	// mirrors are the engines' repository mirrors, books the opening books this instance
	// holds (both under the data directory).
	mirrors *gitmirror.Mirrors
	books   *books.Store
	// pprofSrv serves Go's profiles on cfg.PprofAddr, or is nil.
	pprofSrv *http.Server
	// serving are the Serve loops of httpSrv and pprofSrv, joined by Shutdown.
	serving  sync.WaitGroup
	roleMu   sync.Mutex
	primary  *primaryRole       // while this instance is the primary
	watching context.CancelFunc // stops the standby's lease watch, while it runs
	watchers sync.WaitGroup
	steps    sync.WaitGroup // step-downs in progress (see fenced), joined by Shutdown
	stopping bool           // shutdown has begun: no more role changes
	// semaphoreSize is task_semaphore_size in force: the configuration's, or the last reload's.
	semaphoreSize int
}

// Env is what an instance takes from the program that runs it.
type Env struct {
	// Logger receives the instance's log.
	Logger *slog.Logger
	// Getenv reads the environment: SHOAL_ADMIN_PASSWORD, and in a build with the faultinject
	// tag the crash tests' fault injection (CrashInWriteEnv).
	Getenv func(string) string
	// Stdout is where the first admin's password is printed, once.
	Stdout io.Writer
	// Version is the program's version, shown by the web UI and the API.
	Version string
	// beforeLoad, for tests, is called with the address once a primary serves as "starting",
	// before it loads its runs.
	beforeLoad func(addr string)
}

// Addr is the address the instance listens on, with the port it got.
func (inst *Instance) Addr() string { return inst.addr }

// DB is the instance's database.
func (inst *Instance) DB() *rundb.DB { return inst.db }

// Served receives the HTTP server's error if it stops by itself, before Shutdown.
func (inst *Instance) Served() <-chan error { return inst.served }

// Primary is the running scheduler.Primary while the instance is the primary, else nil.
func (inst *Instance) Primary() *scheduler.Primary {
	if p := inst.currentPrimary(); p != nil {
		return p.Primary
	}
	return nil
}

// currentPrimary is the running primary role, or nil.
func (inst *Instance) currentPrimary() *primaryRole {
	inst.roleMu.Lock()
	defer inst.roleMu.Unlock()
	return inst.primary
}

// stopRoles ends role changes and stops the standby's lease watch, and returns the primary
// role, if any, for the caller to stop.
func (inst *Instance) stopRoles() *primaryRole {
	inst.roleMu.Lock()
	inst.stopping = true
	p := inst.primary
	inst.primary = nil
	if inst.watching != nil {
		inst.watching()
		inst.watching = nil
	}
	inst.roleMu.Unlock()
	inst.watchers.Wait()
	return p
}

// dbRuns serves a secondary's runs from the database.
type dbRuns struct{ db *rundb.DB }

func (d dbRuns) Snapshot(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error) {
	return d.db.Runs.Get(ctx, id)
}

// Start listens, opens the database and serves; a primary creates the first admin if needed,
// then serves as "starting" (its worker API answers the retry 503) while it loads the run cache,
// and starts the periodic jobs. It returns once requests are being answered, by the primary once
// its runs are loaded. On error everything started so far is closed. cfg must be valid
// (config.Load validates it).
//
// A primary serves while it loads so that a fleet that comes back to a restarted server is
// answered at once: connections made while nothing answered would wait in the listen backlog
// for the whole load, past its places the kernel drops them, and the load's end would release
// them all at once (docs/benchmarks/README.md, "The reconnection storm at 500,000").
func Start(ctx context.Context, cfg config.Config, env Env) (_ *Instance, err error) {
	logger, getenv, stdout := env.Logger, env.Getenv, env.Stdout
	// Listen first, the profiles' address too: a taken port should fail before the database
	// starts.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	var (
		pprofLn net.Listener
		db      *rundb.DB
		inst    *Instance
	)
	defer func() {
		if err == nil {
			return
		}
		if inst != nil {
			if inst.httpSrv != nil {
				_ = inst.httpSrv.Close() // its listener too
				if inst.pprofSrv != nil {
					_ = inst.pprofSrv.Close()
				}
				inst.serving.Wait()
			}
			if p := inst.stopRoles(); p != nil {
				p.finish(context.Background(), inst, false)
			}
		}
		ln.Close()
		if pprofLn != nil {
			pprofLn.Close()
		}
		if db != nil {
			_ = db.Close(context.Background())
		}
	}()
	if cfg.PprofAddr != "" {
		if pprofLn, err = net.Listen("tcp", cfg.PprofAddr); err != nil {
			return nil, fmt.Errorf("pprof: listen on %s: %w", cfg.PprofAddr, err)
		}
	}
	reg := newMetricsRegistry()
	m := metrics.New(reg)
	if db, err = openDatabase(ctx, cfg, logger, m); err != nil {
		return nil, err
	}
	role := cfg.StartRole()
	var lease journal.Lease
	deps, err := serverDeps(cfg, env, role == "primary", db, m, reg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && deps.Mirrors != nil {
			_ = deps.Mirrors.Close()
		}
	}()
	inst = &Instance{logger: logger, cfg: cfg, getenv: getenv, metrics: m, addr: ln.Addr().String(), db: db,
		served: make(chan error, 1), tokens: deps.Tokens, leaseHolder: leaseHolder(ln.Addr().String()),
		semaphoreSize: cfg.TaskSemaphoreSize, mirrors: deps.Mirrors, books: deps.Books}
	if role == "primary" {
		if err := ensureAdmin(ctx, db, getenv, stdout); err != nil {
			return nil, err
		}
		if role, lease, err = inst.claimLease(ctx); err != nil {
			return nil, err
		}
	}
	initialRole := role
	if role == "primary" {
		initialRole = "starting" // promoted once its runs are loaded, below
	}
	deps.Instance = initialRole + "@" + ln.Addr().String()
	deps.Lease = func(ctx context.Context) (server.LeaseInfo, error) {
		l, err := journal.ReadLease(ctx, db)
		if err != nil {
			return server.LeaseInfo{}, err
		}
		return server.LeaseInfo{Holder: l.Holder, Epoch: l.Epoch, AgeS: time.Since(l.Renewed).Seconds()}, nil
	}
	// A secondary or a standby schedules nothing and caches nothing: runs come from the
	// database, where the primary writes them behind its cache. So does a primary until it has
	// loaded them.
	deps.Runs = dbRuns{db}
	if role != "primary" {
		logger.Info(role+": serving pages, the read API and PGN uploads; the primary schedules", "role", role)
	}
	srv, err := server.New(deps)
	if err != nil {
		return nil, err
	}
	inst.srv = srv
	if role == "standby" {
		inst.watchLease()
	}
	inst.serve(ln, pprofLn, deps.TrustedProxies)
	if role == "primary" {
		if env.beforeLoad != nil {
			env.beforeLoad(inst.addr)
		}
		p, err := inst.becomePrimary(ctx, lease)
		if err != nil {
			return nil, err
		}
		inst.roleMu.Lock()
		inst.primary = p
		inst.roleMu.Unlock()
		srv.Promote(p.Scheduler(), p.Scheduler(), p.RunCache().Changed)
	}

	writeSystemEvent(ctx, db, "start shoal@"+inst.addr, logger)
	logger.Info("serving", "addr", inst.addr)
	return inst, nil
}

// openDatabase opens the database Start serves from, embedded unless cfg names one.
func openDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, m *metrics.Metrics) (*rundb.DB, error) {
	db, err := OpenDB(ctx, cfg, logger, m)
	if err != nil {
		if errors.Is(err, embedded.ErrDatabaseInUse) {
			return nil, fmt.Errorf("%w; if that is shoal db, give this server --mongo-uri with the address it printed", err)
		}
		return nil, err
	}
	logger.Info("database ready", "database", db.Describe())
	if db.Embedded() {
		// Only processes of this operating-system user can use it: the socket is in a private
		// directory, and the TCP front (embedded_db_addr) checks who connects.
		logger.Info("instances of this user on this machine can share the embedded database", "mongo_uri", db.SharedURI())
	}
	return db, nil
}

// serverDeps gathers what the server is built with: the session secret, the token pool, the
// books and the repository mirrors (which the caller closes if Start fails), the trusted
// proxies. The role's parts (Instance, Lease, Runs) are Start's to fill.
func serverDeps(cfg config.Config, env Env, primary bool, db *rundb.DB, m *metrics.Metrics, reg *prometheus.Registry) (server.Deps, error) {
	logger := env.Logger
	secret, err := sessionSecret(cfg, primary, logger)
	if err != nil {
		return server.Deps{}, err
	}
	tokens := tokenpool.New(cfg.ThreadpoolTokens)
	watchTokenPool(m, tokens)
	held, err := books.Open(filepath.Join(cfg.DataDir, "books"), logger.With("component", "books"))
	if err != nil {
		return server.Deps{}, err
	}
	prefixes, err := config.ParseTrustedProxies(cfg.TrustedProxies) // Load checked them
	if err != nil {
		return server.Deps{}, fmt.Errorf("trusted_proxies: %w", err)
	}
	mirrors, err := openMirrors(cfg, logger)
	if err != nil {
		return server.Deps{}, err
	}
	return server.Deps{
		Metrics: m, Gatherer: reg, TrustedProxies: guard.NewProxies(prefixes),
		Logger: logger, Tokens: tokens,
		Version: env.Version, Database: db.Describe(), DB: db,
		SessionSecret: secret, DataDir: cfg.DataDir, NNURL: cfg.NNURL, TransferTimeout: cfg.TransferTimeout,
		ReadTimeout: cfg.ReadTimeout, MetricsToken: cfg.MetricsToken, HeartbeatPeriod: cfg.HeartbeatPeriod,
		Mirrors: mirrors, Books: held, NotifyEmail: smtpOf(cfg.Notify).Enabled(),
	}, nil
}

// claimLease takes the primary's lease for a starting primary, which stays one if it gets it
// (or if the journal is off: no lease then) and becomes a standby if another primary holds it.
func (inst *Instance) claimLease(ctx context.Context) (role string, lease journal.Lease, err error) {
	if !inst.cfg.Journal {
		return "primary", lease, nil
	}
	lease, err = journal.AcquireLease(ctx, inst.db, inst.holder(), inst.cfg.LeaseTTL, time.Now())
	switch {
	case errors.Is(err, journal.ErrLeaseHeld):
		// Another primary is alive: this one waits to take over from it.
		inst.logger.Warn("another instance holds the primary's lease: serving as a standby", "err", err)
		return "standby", journal.Lease{}, nil
	case err != nil:
		return "", journal.Lease{}, err
	}
	return "primary", lease, nil
}

// serve starts answering on ln, within the connection limits (the trusted proxies exempt from
// the per-address one), and the profiles on pprofLn if not nil.
func (inst *Instance) serve(ln, pprofLn net.Listener, proxies guard.Proxies) {
	cfg, logger := inst.cfg, inst.logger
	inst.httpSrv = &http.Server{Handler: inst.srv.Handler(),
		ReadHeaderTimeout: min(headerTimeout, cfg.ReadTimeout), ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	limits := server.ConnLimits{PerAddress: cfg.MaxConnsPerAddress, Total: maxConns(cfg.MaxConns, logger),
		Exempt: proxies, Metrics: inst.metrics}
	logger.Info("connection limits", "per_address", limits.PerAddress, "total", limits.Total,
		"read_timeout", cfg.ReadTimeout, "write_timeout", cfg.WriteTimeout, "idle_timeout", cfg.IdleTimeout)
	limited := server.LimitListener(ln, limits)
	inst.serving.Go(func() { inst.served <- inst.httpSrv.Serve(limited) })
	if pprofLn != nil {
		inst.pprofSrv = servePprof(&inst.serving, pprofLn, logger)
	}
}

// Shutdown stops the instance in order: refuse new requests, let in-flight ones finish (up to
// shutdownGrace), stop the periodic jobs, write every dirty run, log the stop, close the
// database. The writes get a fresh deadline of their own, so requests that hang to the end of
// their grace cannot cost the runs. Call it once, after any Reload has returned.
func (inst *Instance) Shutdown() error {
	inst.logger.Info("shutting down")
	inst.srv.BeginShutdown()
	// Keep answering for a moment, with 503s, before the listener closes: clients (and load
	// balancers polling /readyz) hear that the server is going away and back off, instead of
	// meeting refused connections. fishtest waits the same half second.
	time.Sleep(shutdownNotice)
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), shutdownGrace)
	if err := inst.httpSrv.Shutdown(drainCtx); err != nil {
		inst.logger.Warn("requests still running at the shutdown deadline", "err", err)
	}
	cancelDrain()
	if inst.pprofSrv != nil {
		_ = inst.pprofSrv.Close()
	}
	inst.serving.Wait()
	p := inst.stopRoles()
	// A step-down under way finishes its role before the database closes under it.
	inst.steps.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	var errs []error
	// With the database's process gone, as after a crash: nothing is written, and the next
	// start replays the journal.
	dbGone := inst.db.Gone()
	if p != nil {
		errs = append(errs, p.finish(ctx, inst, !dbGone)...)
	}
	if !dbGone {
		writeSystemEvent(ctx, inst.db, "stop shoal@"+inst.addr, inst.logger)
	}
	if err := inst.db.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if inst.mirrors != nil {
		if err := inst.mirrors.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	inst.logger.Info("stopped")
	return errors.Join(errs...)
}

// openMirrors opens the repository mirrors under the data directory, with the operator's
// settings.
//
// Without git on this machine there are none, and the server says so: runs must then give their
// commits and signatures, and workers cannot build from source.
func openMirrors(cfg config.Config, logger *slog.Logger) (*gitmirror.Mirrors, error) {
	if _, err := exec.LookPath("git"); err != nil {
		logger.Warn("git is not installed: no repository mirrors, so runs cannot be submitted by branch nor built by workers from source; install git (Debian: apt-get install git)")
		return nil, nil
	}
	m, err := gitmirror.New(gitmirror.Config{
		Dir: filepath.Join(cfg.DataDir, "repos"), Allowed: cfg.ReposAllowed,
		FetchTimeout: cfg.ReposFetchTimeout, MaxBytes: int64(cfg.ReposMaxMB) << 20,
		ArchiveCacheBytes: int64(cfg.SourceCacheMB) << 20, CAFile: cfg.ReposCAFile,
		Logger: logger.With("component", "mirrors"),
	})
	if err != nil {
		return nil, fmt.Errorf("repository mirrors: %w", err)
	}
	return m, nil
}

// OpenDB opens the configured database and creates its indexes. With embedded_db_process, the
// database's process is this program's `db` command. m may be nil.
func OpenDB(ctx context.Context, cfg config.Config, logger *slog.Logger, m *metrics.Metrics) (*rundb.DB, error) {
	opts := rundb.Options{
		URI: cfg.MongoURI, DataDir: cfg.DataDir, EmbeddedAddr: cfg.EmbeddedDBAddr,
		Database: cfg.Database, Logger: logger, Metrics: m,
	}
	if cfg.MongoURI == "" && cfg.EmbeddedDBProcess {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this program to run the embedded database: %w", err)
		}
		opts.EmbeddedCommand = []string{exe, "db", "--log-level", cfg.LogLevel}
	}
	db, err := rundb.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	rep, err := db.EnsureIndexes(ctx)
	if err != nil {
		_ = db.Close(context.Background())
		return nil, err
	}
	if len(rep.NotOnEmbedded) > 0 {
		logger.Debug("non-unique indexes left out: the embedded database's queries use none, and each costs every write a parse of the document", "indexes", rep.NotOnEmbedded)
	}
	if len(rep.WithoutFilter) > 0 {
		logger.Debug("indexes created without their partial filter (not supported by this database)", "indexes", rep.WithoutFilter)
	}
	if len(rep.Skipped) > 0 {
		// Expected on the embedded database, which has no text indexes; worth a look on MongoDB.
		level := slog.LevelWarn
		if db.Embedded() {
			level = slog.LevelDebug
		}
		logger.Log(ctx, level, "indexes not created; queries that use them fall back to a scan", "indexes", rep.Skipped)
	}
	return db, nil
}

// adminPasswordEnv names the first admin's password instead of a random one.
const adminPasswordEnv = "SHOAL_ADMIN_PASSWORD"

// ensureAdmin creates the approver "admin" when the database has no user at all, so a fresh
// install can be used at once. A random password is printed once.
func ensureAdmin(ctx context.Context, db *rundb.DB, getenv func(string) string, stdout io.Writer) error {
	n, err := db.Users.Count(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		if getenv(adminPasswordEnv) != "" {
			fmt.Fprintf(stdout, "%s is ignored: the database already has users, and admin is only created in an empty one\n", adminPasswordEnv)
		}
		return nil
	}
	password, generated := getenv(adminPasswordEnv), false
	if password == "" {
		password, generated = rand.Text(), true
	}
	_, err = db.Users.Create(ctx, rundb.NewUser{Username: "admin", Password: password, Approver: true, Accepted: true})
	if errors.Is(err, rundb.ErrConflict) {
		return nil // another instance created it first
	}
	if err != nil {
		return fmt.Errorf("create the first user: %w", err)
	}
	if generated {
		fmt.Fprintf(stdout, "Created the first user: admin, password %s (shown only this once; set %s to choose it)\n", password, adminPasswordEnv)
	} else {
		fmt.Fprintf(stdout, "Created the first user: admin, with the password from %s\n", adminPasswordEnv)
	}
	return nil
}

// writeSystemEvent logs a start or stop in the actions collection, as fishtest does; a failure
// is only logged.
func writeSystemEvent(ctx context.Context, db *rundb.DB, msg string, logger *slog.Logger) {
	err := db.Actions.Insert(ctx, &rundb.Action{Action: "system_event", Username: "fishtest.system", Message: msg})
	if err != nil {
		logger.Warn("write system event", "message", msg, "err", err)
	}
}

// insecureDevSecret is the session secret of --insecure-dev: public, so anyone can forge a
// session with it.
const insecureDevSecret = "shoal insecure development secret: anyone can forge sessions"

// sessionSecret returns the web UI's session secret: the configured one; with --insecure-dev
// the public development one; otherwise the one in DATA_DIR/session_secret, created (random,
// mode 0600) on first start so that sessions survive restarts. Instances sharing a database
// must be given the same session_secret.
//
// Only a primary creates the file: a secondary must share the primary's secret (its sessions
// are the same sessions), so without session_secret it needs the primary's data directory.
func sessionSecret(cfg config.Config, primary bool, logger *slog.Logger) ([]byte, error) {
	switch {
	case cfg.SessionSecret != "":
		return []byte(cfg.SessionSecret), nil
	case cfg.InsecureDev:
		logger.Warn("insecure_dev: using the public development session secret; anyone can forge a login")
		return []byte(insecureDevSecret), nil
	}
	path := filepath.Join(cfg.DataDir, "session_secret")
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		secret := bytes.TrimSpace(data)
		if len(secret) < config.MinSessionSecret {
			return nil, fmt.Errorf("session secret in %s: %d characters, need at least %d; delete the file to make a new one",
				path, len(secret), config.MinSessionSecret)
		}
		return secret, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read session secret: %w", err)
	case !primary:
		return nil, fmt.Errorf("session secret: %s does not exist; a secondary shares the primary's sessions: give it the primary's session_secret (or data_dir)", path)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret := []byte(hex.EncodeToString(b))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return sessionSecret(cfg, primary, logger) // another instance made it first
	}
	if err != nil {
		return nil, fmt.Errorf("create session secret: %w", err)
	}
	if _, err := f.Write(append(secret, '\n')); err != nil {
		f.Close()
		return nil, fmt.Errorf("write session secret: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write session secret: %w", err)
	}
	logger.Info("generated the web UI's session secret", "path", path)
	return secret, nil
}

// servePprof serves Go's profiles (net/http/pprof) on ln, a loopback listener of their own:
// they reveal the program's internals and a CPU profile costs a core while it runs, so they
// are never on the public listener. Serving them also samples contention, so that the block
// and mutex profiles say what requests wait for: one in mutexFraction contended lock
// releases, and blocking events in proportion to their length (every one of blockRate or more).
func servePprof(serving *sync.WaitGroup, ln net.Listener, logger *slog.Logger) *http.Server {
	runtime.SetMutexProfileFraction(mutexFraction)
	runtime.SetBlockProfileRate(int(blockRate))
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serving.Go(func() { _ = srv.Serve(ln) })
	logger.Info("serving Go profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return srv
}

// The contention sampling servePprof turns on: cheap enough for a server under load (a few
// percent of its CPU at most), fine enough to see a lock that costs requests milliseconds.
const (
	mutexFraction = 10
	blockRate     = 100 * time.Microsecond
)

// headerTimeout bounds the time to read a request's headers: a client slower than that is
// holding a connection, not sending a request.
const headerTimeout = 10 * time.Second

// fileReserve is how many of the process's file descriptors the connection limit leaves for the
// database, the log and uploaded files.
const fileReserve = 1000

// maxConns is the total connection limit: configured, or the open-file limit less fileReserve
// (Go raises the soft limit to the hard one at start), so that a flood of connections meets the
// limit before the process runs out of descriptors.
func maxConns(configured int, logger *slog.Logger) int {
	if configured > 0 {
		return configured
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		logger.Warn("open-file limit unknown: no total connection limit", "err", err)
		return 0
	}
	return max(64, int(min(rl.Cur, 1<<30))-fileReserve)
}
