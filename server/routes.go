package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/static"
)

// getAndHead registers a GET route that also answers HEAD, as every read route does.
func getAndHead(r gin.IRoutes, path string, h gin.HandlerFunc) {
	r.GET(path, h)
	r.HEAD(path, h)
}

// routes builds the engine with every route Shoal serves.
func (s *Server) routes() *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// No route parses a multipart form (ui.Server.CheckCSRF refuses one outside the upload, which
	// streams its body), so Gin's in-memory allowance for one stays small: a parse that some
	// future handler starts must not hold tens of megabytes.
	r.MaxMultipartMemory = 64 << 10
	// Only a trusted proxy (nginx) may say who the client is: a worker must not pick its own
	// address and so escape the per-IP machine limit.
	if err := r.SetTrustedProxies(s.deps.TrustedProxies.Strings()); err != nil {
		panic(err) // prefixes guard.ParseProxies checked
	}
	r.Use(s.stamp, s.instrument, s.accessLog, gin.CustomRecovery(s.recovery), s.shutdownGuard)

	// Health and operations.
	getAndHead(r, "/healthz", s.healthz)
	getAndHead(r, "/readyz", s.readyz)
	r.GET("/metrics", s.metricsHandler())

	// Worker API (protocol version 325, server/api): the nine endpoints of fishtest's protocol
	// and /api/source, workerPaths. Every one but upload_pgn needs the primary's scheduler; a
	// secondary turns them away before reading anything, as fishtest's
	// RejectNonPrimaryWorkerApiMiddleware.
	a := s.api
	r.POST("/api/request_version", a.PrimaryOnly, a.RequestVersion)
	r.POST("/api/request_task", a.PrimaryOnly, a.RequestTask)
	r.POST("/api/update_task", a.PrimaryOnly, a.UpdateTask)
	r.POST("/api/beat", a.PrimaryOnly, a.Beat)
	r.POST("/api/request_spsa", a.PrimaryOnly, a.RequestSPSA)
	r.POST("/api/failed_task", a.PrimaryOnly, a.FailedTask)
	r.POST("/api/stop_run", a.PrimaryOnly, a.StopRun)
	r.POST("/api/upload_pgn", s.transfers.AllowSlowBody, a.UploadPGN)
	r.POST("/api/worker_log", a.PrimaryOnly, a.WorkerLog)
	// Beyond fishtest's protocol: the sources of a run's commits for workers that build their
	// engines (books are below, with the networks).
	r.POST(protocol.SourcePath, a.PrimaryOnly, s.transfers.SlowReply(a.Source))

	// Test submission without the UI: creating a run, approving one, and stopping or modifying
	// one's own (user_stop_run is not the worker's stop_run above).
	r.POST("/api/create_run", a.CreateRun)
	r.POST("/api/approve_run", a.ApproveRun)
	r.POST("/api/user_stop_run", a.UserStopRun)
	r.POST("/api/modify_run", a.ModifyRun)

	// Read API: fishtest's, unauthenticated, JSON (or files), same URLs, statuses and shapes
	// as fishtest. GET routes also answer HEAD.
	getAndHead(r, "/api/calc_elo", a.CalcElo)
	getAndHead(r, "/api/active_runs", a.ActiveRuns)
	getAndHead(r, "/api/finished_runs", a.FinishedRuns)
	r.POST("/api/actions", a.Actions)
	getAndHead(r, "/api/get_run/:id", s.primaryRoute(a.GetRun))
	getAndHead(r, "/api/get_task/:id/:task_id", s.primaryRoute(a.GetTask))
	getAndHead(r, "/api/get_elo/:id", s.primaryRoute(a.GetElo))
	getAndHead(r, "/api/rate_limit", s.primaryRoute(a.RateLimit))
	getAndHead(r, "/api/nn/:name", s.transfers.SlowReply(a.DownloadNN))
	getAndHead(r, protocol.BooksPath+":name", s.transfers.SlowReply(a.Book))
	getAndHead(r, "/api/pgn/:name", s.transfers.SlowReply(a.DownloadPGN))
	getAndHead(r, "/api/run_pgns/:name", s.transfers.SlowReply(a.DownloadRunPGNs))

	// UI pages: sessions, the logged-in user and CSRF checks on every one of them.
	s.uiRoutes(r.Group("", ui.Headers, s.ui.Sessions(), ui.CookieOptions, s.ui.LoadUser, s.ui.CheckCSRF))

	// Assets.
	r.StaticFS("/static", http.FS(static.FS))

	r.NoRoute(func(c *gin.Context) { s.fail(c, http.StatusNotFound, "no such page") })
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, "method not allowed") })
	return r
}

// workerPaths are the worker protocol's endpoints, which routes registers: shutdownGuard answers
// them the way workers retry.
var workerPaths = map[string]bool{"/api/request_version": true, "/api/request_task": true, "/api/update_task": true,
	"/api/beat": true, "/api/request_spsa": true, "/api/failed_task": true, "/api/stop_run": true,
	"/api/upload_pgn": true, "/api/worker_log": true, protocol.SourcePath: true}

// primaryRoute wraps a handler of a path that nginx sends to the primary's upstream, which
// holds the primary and the standby (configs/nginx.conf, shoal_primary): a standby, or a primary
// still loading its runs, answers it, when it comes through the proxy, with the retry 503, as
// it does the worker API, so that nginx passes the request on to the primary instead of serving
// it from a standby's view of the database (a run page a flush behind, a form the primary would
// refuse). Asked on its own port, a standby serves these pages as a secondary does (its tuning
// page, say), and so do the secondaries always.
func (s *Server) primaryRoute(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if why := s.notPrimaryYet(); why != "" && guard.FromProxy(c) && guard.ProxyHeaders(c) {
			api.RetryLater(c, why)
			return
		}
		h(c)
	}
}

// uiRoutes registers the web UI (server/ui and its areas) on g. Every POST changes state, so
// every POST needs the session's CSRF token (ui.Server.CheckCSRF); handlers check who may do
// what.
func (s *Server) uiRoutes(g gin.IRoutes) {
	getAndHead(g, "/", func(c *gin.Context) { c.Redirect(http.StatusFound, "/tests") })

	// Runs: lists, one run, live updates (server/ui/runs: runs.go, view.go, runstats.go,
	// live.go).
	r := s.runs
	getAndHead(g, "/tests", r.TestsPage)
	getAndHead(g, "/tests/finished", r.FinishedPage)
	getAndHead(g, "/tests/user/:username", r.UserTestsPage)
	getAndHead(g, "/tests/machines", r.MachinesPage)
	getAndHead(g, "/tests/view/:id", s.primaryRoute(r.ViewPage))
	getAndHead(g, "/tests/tasks/:id", s.primaryRoute(r.TasksPage))
	getAndHead(g, "/tests/live_elo/:id", s.primaryRoute(r.LiveEloPage))
	getAndHead(g, "/tests/stats/:id", s.primaryRoute(r.StatsPage))
	g.GET("/tests/events", r.HomeEvents)
	g.GET("/tests/view/:id/events", s.primaryRoute(r.RunEvents))

	// Submitting and acting on runs (server/ui/runs: runform.go, runactions.go).
	getAndHead(g, "/tests/run", s.primaryRoute(r.NewRunPage))
	g.POST("/tests/run", s.primaryRoute(r.NewRunSubmit))
	g.POST("/tests/modify", s.primaryRoute(r.ModifyRunSubmit))
	g.POST("/tests/stop", s.primaryRoute(r.StopRunSubmit))
	g.POST("/tests/approve", s.primaryRoute(r.ApproveRunSubmit))
	g.POST("/tests/purge", s.primaryRoute(r.PurgeRunSubmit))
	g.POST("/tests/delete", s.primaryRoute(r.DeleteRunSubmit))

	// Accounts, people and the event log (server/ui/people: accounts.go, people.go).
	p := s.people
	getAndHead(g, "/login", p.LoginPage)
	g.POST("/login", p.LoginSubmit)
	g.POST("/logout", p.LogoutSubmit)
	getAndHead(g, "/signup", s.primaryRoute(p.SignupPage))
	g.POST("/signup", s.primaryRoute(p.SignupSubmit))
	getAndHead(g, "/notifications", s.primaryRoute(p.NotificationsPage))
	g.POST("/notifications", s.primaryRoute(p.NotificationsSubmit))
	getAndHead(g, "/user", s.primaryRoute(p.ProfilePage))
	g.POST("/user", s.primaryRoute(p.ProfileSubmit))
	getAndHead(g, "/user/:username", s.primaryRoute(p.ProfilePage))
	g.POST("/user/:username", s.primaryRoute(p.ProfileSubmit))
	g.POST("/tokens", s.primaryRoute(p.TokenAdd))
	g.POST("/tokens/revoke", s.primaryRoute(p.TokenRevoke))
	getAndHead(g, "/user_management", p.UserManagementPage)
	getAndHead(g, "/workers/:name", s.primaryRoute(p.WorkerPage))
	g.POST("/workers/:name", s.primaryRoute(p.WorkerSubmit))
	getAndHead(g, "/actions", p.ActionsPage)
	getAndHead(g, "/contributors", p.ContributorsPage)
	getAndHead(g, "/contributors/monthly", p.ContributorsPage)

	// Operations: live tuning for approvers (server/ui/people: admin.go).
	getAndHead(g, "/admin/tuning", s.primaryRoute(p.TuningPage))
	getAndHead(g, "/admin/notifications", p.OutboxPage)

	// Networks, opening books and tools (server/ui/networks: nns.go, books.go, sprtcalc.go).
	n := s.networks
	getAndHead(g, "/nns", n.NNsPage)
	getAndHead(g, "/upload", s.primaryRoute(n.UploadPage))
	g.POST(ui.UploadPath, s.primaryRoute(n.UploadSubmit))
	getAndHead(g, ui.BooksPath, n.BooksPage)
	g.POST(ui.BooksPath, s.primaryRoute(n.BooksSubmit))
	getAndHead(g, "/sprt_calc", n.SPRTCalcPage)
}
