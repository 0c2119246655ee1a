package server

import (
	"net/http"

	"github.com/gin-contrib/sessions"
	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
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
	// No route parses a multipart form (checkCSRF refuses one outside the upload, which
	// streams its body), so Gin's in-memory allowance for one stays small: a parse that some
	// future handler starts must not hold tens of megabytes.
	r.MaxMultipartMemory = 64 << 10
	// Only a proxy on this machine (nginx) may say who the client is: a worker must not pick
	// its own address and so escape the per-IP machine limit.
	trusted := make([]string, len(TrustedProxies))
	for i, a := range TrustedProxies {
		trusted[i] = a.String()
	}
	if err := r.SetTrustedProxies(trusted); err != nil {
		panic(err) // constant input
	}
	r.Use(s.stamp, s.instrument, s.accessLog, gin.CustomRecovery(s.recovery), s.shutdownGuard)

	// Health and operations.
	getAndHead(r, "/healthz", s.healthz)
	getAndHead(r, "/readyz", s.readyz)
	r.GET("/metrics", s.metricsHandler())

	// Worker API (protocol version 325, server/api): the nine endpoints of workerPaths. Every
	// one but upload_pgn needs the primary's scheduler; a secondary turns them away before
	// reading anything, as fishtest's RejectNonPrimaryWorkerApiMiddleware.
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

	// Test submission without the UI: creating a run and approving one.
	r.POST("/api/create_run", a.CreateRun)
	r.POST("/api/approve_run", a.ApproveRun)

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
	getAndHead(r, "/api/pgn/:name", s.transfers.SlowReply(a.DownloadPGN))
	getAndHead(r, "/api/run_pgns/:name", s.transfers.SlowReply(a.DownloadRunPGNs))

	// UI pages: sessions, the logged-in user and CSRF checks on every one of them.
	s.uiRoutes(r.Group("", uiHeaders, sessions.Sessions(sessionCookie, s.sessions), cookieOptions, s.loadUser, s.checkCSRF))

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
	"/api/upload_pgn": true, "/api/worker_log": true}

// primaryRoute wraps a handler of a path that nginx sends to the primary's upstream, which
// holds the primary and the standby (configs/nginx.conf, shoal_primary): a standby answers it,
// when it comes through the proxy, with the retry 503, as it does the worker API, so that nginx
// passes the request on to the primary instead of serving it from a standby's view of the
// database (a run page a flush behind, a form the primary would refuse). Asked on its own port,
// a standby serves these pages as a secondary does (its tuning page, say), and so do the
// secondaries always.
func (s *Server) primaryRoute(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.Role() == "standby" && guard.IsLoopback(c.RemoteIP()) && guard.ProxyHeaders(c) {
			api.RetryLater(c, "a standby; the primary answers this")
			return
		}
		h(c)
	}
}

// uiRoutes registers the web UI. Every POST changes state, so every POST needs the session's
// CSRF token (checkCSRF); handlers check who may do what.
func (s *Server) uiRoutes(ui gin.IRoutes) {
	getAndHead(ui, "/", func(c *gin.Context) { c.Redirect(http.StatusFound, "/tests") })

	// Runs: lists, one run, live updates (ui_runs.go, ui_view.go, ui_live.go).
	getAndHead(ui, "/tests", s.testsPage)
	getAndHead(ui, "/tests/finished", s.finishedPage)
	getAndHead(ui, "/tests/user/:username", s.userTestsPage)
	getAndHead(ui, "/tests/machines", s.machinesPage)
	getAndHead(ui, "/tests/view/:id", s.primaryRoute(s.viewPage))
	getAndHead(ui, "/tests/tasks/:id", s.primaryRoute(s.tasksPage))
	getAndHead(ui, "/tests/live_elo/:id", s.primaryRoute(s.liveEloPage))
	getAndHead(ui, "/tests/stats/:id", s.primaryRoute(s.statsPage))
	ui.GET("/tests/events", s.homeEvents)
	ui.GET("/tests/view/:id/events", s.primaryRoute(s.runEvents))

	// Submitting and acting on runs (ui_runform.go).
	getAndHead(ui, "/tests/run", s.primaryRoute(s.newRunPage))
	ui.POST("/tests/run", s.primaryRoute(s.newRunSubmit))
	ui.POST("/tests/modify", s.primaryRoute(s.modifyRunSubmit))
	ui.POST("/tests/stop", s.primaryRoute(s.stopRunSubmit))
	ui.POST("/tests/approve", s.primaryRoute(s.approveRunSubmit))
	ui.POST("/tests/purge", s.primaryRoute(s.purgeRunSubmit))
	ui.POST("/tests/delete", s.primaryRoute(s.deleteRunSubmit))

	// Accounts, people and the event log (ui_accounts.go, ui_people.go).
	getAndHead(ui, "/login", s.loginPage)
	ui.POST("/login", s.loginSubmit)
	ui.POST("/logout", s.logoutSubmit)
	getAndHead(ui, "/signup", s.primaryRoute(s.signupPage))
	ui.POST("/signup", s.primaryRoute(s.signupSubmit))
	getAndHead(ui, "/user", s.primaryRoute(s.profilePage))
	ui.POST("/user", s.primaryRoute(s.profileSubmit))
	getAndHead(ui, "/user/:username", s.primaryRoute(s.profilePage))
	ui.POST("/user/:username", s.primaryRoute(s.profileSubmit))
	getAndHead(ui, "/user_management", s.userManagementPage)
	getAndHead(ui, "/workers/:name", s.primaryRoute(s.workerPage))
	ui.POST("/workers/:name", s.primaryRoute(s.workerSubmit))
	getAndHead(ui, "/actions", s.actionsPage)
	getAndHead(ui, "/contributors", s.contributorsPage)
	getAndHead(ui, "/contributors/monthly", s.contributorsPage)

	// Networks and tools (ui_nns.go).
	getAndHead(ui, "/nns", s.nnsPage)
	getAndHead(ui, "/upload", s.primaryRoute(s.uploadPage))
	ui.POST(uploadPath, s.primaryRoute(s.uploadSubmit))
	getAndHead(ui, "/sprt_calc", s.sprtCalcPage)

	// Operations: live tuning for approvers (ui_admin.go).
	getAndHead(ui, "/admin/tuning", s.primaryRoute(s.tuningPage))
}
