// Package server is Shoal's HTTP side: one Gin engine serving the worker API, the read API and
// the web UI on one port. The handlers are methods of its parts, server/api (the worker and
// JSON API) and the web UI's areas (server/ui/runs, server/ui/people, server/ui/networks, on
// what server/ui gives every page), which share server/guard; New wires the database and
// the scheduler into them, routes.go lists every route of them all, and the middleware, health
// checks, metrics and the instance's role are here.
package server

import (
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/server/ui/networks"
	"github.com/shoal-chess/shoal/server/ui/people"
	"github.com/shoal-chess/shoal/server/ui/runs"
	"github.com/shoal-chess/shoal/tokenpool"
)

// RunSource gives the current state of a run: from the primary's run cache, or from the
// database on a secondary (api.RunSource, which the UI's is too).
type RunSource = api.RunSource

// Deps are the server's dependencies, built by the caller.
type Deps struct {
	Logger   *slog.Logger
	Tokens   *tokenpool.Pool // bounds blocking database work
	Version  string
	Database string // a few words on the database in use, for people

	// DB is the database, for the read API's queries (runs, actions, PGNs, networks).
	DB *rundb.DB
	// Runs serves runs as the scheduler sees them.
	Runs RunSource
	// Scheduler owns the primary's scheduling state; nil on a secondary.
	Scheduler *scheduler.Scheduler
	// Lease reads who holds the primary's lease, for /healthz and the admin page; nil: not
	// shown.
	Lease LeaseReader
	// NNURL is where /api/nn/{name} redirects ("" means the request's own scheme and host).
	NNURL string
	// Mirrors are the engines' repository mirrors: run pages show their diffs and warnings,
	// workers get their sources. Nil: neither.
	Mirrors *gitmirror.Mirrors
	// Books are the opening books this server holds and serves; nil: none.
	Books *books.Store

	// SessionSecret signs and encrypts the web UI's session cookies (at least 32 bytes; empty
	// picks a random one, so sessions end with the process).
	SessionSecret []byte
	// DataDir is the instance's data directory; uploaded networks live under DataDir/nn.
	DataDir string
	// Instance names this instance ("primary@127.0.0.1:8000") in the X-Shoal-Instance header
	// of every reply, so that operators (and tests) see which instance behind a proxy
	// answered.
	Instance string
	// Changed returns a channel closed at the next change of any run (runcache.Cache.Changed), for
	// live pages; nil (a secondary) makes them poll.
	Changed func() <-chan struct{}

	// HeartbeatPeriod is how often workers beat (0: 120 s); the request_task limits scale with
	// it, as a server with compressed time sees its workers that much more often.
	HeartbeatPeriod time.Duration
	// ReadTimeout is the HTTP server's read timeout: the grace a large upload gets before it
	// must keep up a minimum rate; zero means 30 s.
	ReadTimeout time.Duration
	// TransferTimeout is how long an upload or download of a PGN or a network may take, past the
	// HTTP server's read and write timeouts; zero means guard.DefaultTransferTimeout.
	TransferTimeout time.Duration
	// MaxPGNText is the most PGN text one worker's upload may inflate to; zero means
	// api.DefaultMaxPGNText.
	MaxPGNText int64
	// MaxNetworkSize is the size an uploaded network must stay below; zero means
	// ui.DefaultMaxNetworkSize.
	MaxNetworkSize int64

	// Metrics counts and times every request; nil records nothing.
	Metrics *metrics.Metrics
	// TrustedProxies are the peers whose forwarding headers are believed (trusted_proxies);
	// the zero value trusts loopback, a proxy on this machine.
	TrustedProxies guard.Proxies
	// MetricsToken, if set, lets a client with "Authorization: Bearer <token>" read /metrics
	// from anywhere; without it only direct clients on this machine may.
	MetricsToken string
	// NotifyEmail says whether the operator configured a mail server for notifications.
	NotifyEmail bool
	// Gatherer is what /metrics serves (the registry Metrics was registered on); nil makes
	// /metrics answer 404.
	Gatherer prometheus.Gatherer
}

// ginReleaseMode switches Gin, whose mode is process-wide, out of debug mode (route dumps on
// stdout) once.
var ginReleaseMode sync.Once

// Server handles HTTP requests. Safe for concurrent use.
type Server struct {
	deps         Deps
	logger       *slog.Logger
	logins       *guard.Logins     // login and signup rate limits, and the log of failed logins
	heavy        *guard.HeavyReads // slots for reads that scan (event log searches), apart from the worker path
	transfers    guard.Transfers   // the time limits of large uploads and downloads
	api          *api.Server       // the worker API, the read API and run submission
	ui           *ui.Server        // what the web UI's pages share: sessions, CSRF, templates
	runs         *runs.Server      // the web UI's pages of runs
	people       *people.Server    // the web UI's pages of accounts, people and operations
	networks     *networks.Server  // the web UI's pages of networks, books and the SPRT calculator
	engine       *gin.Engine
	shuttingDown atomic.Bool
	current      atomic.Pointer[role] // see role.go
}

// New builds the server, parsing every template so that a broken one fails here.
func New(deps Deps) (*Server, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	ginReleaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	s := &Server{deps: deps, logger: deps.Logger.With("component", "http")}
	s.setRole(initialRole(deps))
	s.logins = guard.NewLogins(s.logger)
	s.heavy = guard.NewHeavyReads()
	s.transfers = guard.Transfers{Read: deps.ReadTimeout, Transfer: deps.TransferTimeout}
	uiDeps := ui.Deps{Logger: s.logger, Tokens: deps.Tokens, Version: deps.Version,
		Role: func() ui.Role { return s.role().ui }, SessionSecret: deps.SessionSecret, Heavy: s.heavy}
	runsDeps := runs.Deps{Logger: s.logger, Tokens: deps.Tokens, Version: deps.Version,
		ShuttingDown: s.shuttingDown.Load}
	peopleDeps := people.Deps{Logger: s.logger, Tokens: deps.Tokens, Lease: s.lease, Logins: s.logins,
		EmailEnabled: deps.NotifyEmail}
	netsDeps := networks.Deps{Logger: s.logger, Tokens: deps.Tokens, DataDir: deps.DataDir,
		MaxNetworkSize: deps.MaxNetworkSize, Transfers: s.transfers}
	if deps.Mirrors != nil {
		runsDeps.Sources = deps.Mirrors
	}
	if deps.Books != nil {
		runsDeps.Books, netsDeps.Books = deps.Books, deps.Books
	}
	apiDeps := api.Deps{Logger: s.logger, Tokens: deps.Tokens,
		Role: func() api.Role { return s.role().api }, NNURL: deps.NNURL,
		HeartbeatPeriod: deps.HeartbeatPeriod, MaxPGNText: deps.MaxPGNText, Logins: s.logins, Heavy: s.heavy}
	if db := deps.DB; db != nil {
		uiDeps.Users, runsDeps.Runs, runsDeps.Users = db.Users, db.Runs, db.Users
		peopleDeps.Users, peopleDeps.People, peopleDeps.Actions, peopleDeps.Workers = db.Users, db, db.Actions, db.Workers
		peopleDeps.UserStats, peopleDeps.MonthlyContributors = db.UserCache, db.MonthlyContributors()
		peopleDeps.NotifySettings, peopleDeps.Outbox = db.NotifySettings, db.Outbox
		netsDeps.Networks, netsDeps.Actions = db.NNs, db.Actions
		apiDeps.Users, apiDeps.UserStats, apiDeps.Runs = db.Users, db.UserCache, db.Runs
		apiDeps.Actions, apiDeps.PGNs, apiDeps.Networks = db.Actions, db.PGNs, db.NNs
	}
	var err error
	if s.ui, err = ui.New(uiDeps, runs.TemplateFuncs(), people.TemplateFuncs()); err != nil {
		return nil, err
	}
	s.runs = runs.New(s.ui, runsDeps)
	s.people = people.New(s.ui, peopleDeps)
	s.networks = networks.New(s.ui, netsDeps)
	apiDeps.NetworkFile = s.networks.NetworkFile
	if deps.Mirrors != nil {
		apiDeps.Sources = deps.Mirrors
	}
	if deps.Books != nil {
		apiDeps.Books = deps.Books
	}
	s.api = api.New(apiDeps)
	s.engine = s.routes()
	return s, nil
}

// The database's stores and the scheduler give the API and the web UI what they ask of them.
var (
	_ api.Users             = (*rundb.UserStore)(nil)
	_ people.NotifySettings = (*rundb.NotifySettingsStore)(nil)
	_ people.Outbox         = (*rundb.OutboxStore)(nil)
	_ api.UserStats         = (*rundb.UserCacheStore)(nil)
	_ api.Runs              = (*rundb.RunStore)(nil)
	_ api.Actions           = (*rundb.ActionStore)(nil)
	_ api.PGNs              = (*rundb.PGNStore)(nil)
	_ api.Networks          = (*rundb.NNStore)(nil)
	_ api.Scheduler         = (*scheduler.Scheduler)(nil)
	_ api.Sources           = (*gitmirror.Mirrors)(nil)
	_ api.Books             = (*books.Store)(nil)

	_ ui.Users            = (*rundb.UserStore)(nil)
	_ ui.Scheduler        = (*scheduler.Scheduler)(nil)
	_ runs.Runs           = (*rundb.RunStore)(nil)
	_ runs.Users          = (*rundb.UserStore)(nil)
	_ runs.Sources        = (*gitmirror.Mirrors)(nil)
	_ runs.Books          = (*books.Store)(nil)
	_ people.Users        = (*rundb.UserStore)(nil)
	_ people.People       = (*rundb.DB)(nil)
	_ people.UserStats    = (*rundb.UserCacheStore)(nil)
	_ people.Contributors = (*rundb.UserCacheStore)(nil)
	_ people.Actions      = (*rundb.ActionStore)(nil)
	_ people.Workers      = (*rundb.WorkerStore)(nil)
	_ networks.Networks   = (*rundb.NNStore)(nil)
	_ networks.Actions    = (*rundb.ActionStore)(nil)
	_ networks.Books      = (*books.Store)(nil)
)

// API is the handler of the worker API, the read API and run submission, and UI the web UI's:
// routes.go names their methods; tests reach their limits through them.
func (s *Server) API() *api.Server { return s.api }

// UI is what the web UI's pages share; see API.
func (s *Server) UI() *ui.Server { return s.ui }

// RunPages is the handler of the web UI's pages of runs; see API.
func (s *Server) RunPages() *runs.Server { return s.runs }

// Handler returns the http.Handler serving every route.
func (s *Server) Handler() http.Handler { return s.engine }

// BeginShutdown makes the server refuse new work: /healthz and every other route answer 503 in
// their error shape, so load balancers and workers back off while in-flight requests finish.
func (s *Server) BeginShutdown() { s.shuttingDown.Store(true) }
