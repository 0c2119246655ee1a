// Package api is Shoal's JSON side: the worker protocol (request_task, update_task and the rest,
// as fishtest's workers speak it), fishtest's read API, run submission without the UI, and the
// downloads of PGNs and networks. Handlers are methods on Server, which holds their
// dependencies; server/routes.go names them.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/tokenpool"
)

// RunSource gives the current state of a run: from the primary's run cache, or from the
// database on a secondary. The run returned is the caller's own copy.
type RunSource interface {
	Snapshot(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error)
}

// Role is the part this instance plays for one request. A standby becomes the primary at run
// time, and a primary that lost its lease steps down, so handlers read it once per request.
type Role struct {
	// Scheduler is the primary's scheduler, nil on any other instance.
	Scheduler Scheduler
	// Runs serves runs: the primary's run cache, or the database.
	Runs RunSource
	// Starting says that this instance is the primary, loading its runs: worker calls are
	// told to retry, as on a secondary, but not sent elsewhere for good.
	Starting bool
}

// What the API asks of the database and of the scheduler, method by method: *rundb.DB's stores
// and *scheduler.Scheduler satisfy these (the server checks it where it wires them).

// Users checks the credentials of API calls, passwords and tokens (rundb.UserStore). The user
// AuthenticateAccessIfCached returns is the cache's own, shared by every call: handlers read
// it and change nothing of it (TestWorkerCallsLeaveTheCachedUserAlone).
type Users interface {
	AuthenticateAccessIfCached(ctx context.Context, a rundb.Access) (u *rundb.User, cached bool, err error)
	AuthenticateAccessCached(ctx context.Context, a rundb.Access) (*rundb.User, error)
}

// UserStats are the users' contribution totals (rundb.UserCacheStore): stop_run asks how many
// CPU hours a worker's owner has given.
type UserStats interface {
	Get(ctx context.Context, username string) (*rundb.UserStats, error)
}

// Runs lists the runs of the read API (rundb.RunStore).
type Runs interface {
	Active(ctx context.Context) ([]*rundb.Run, error)
	Finished(ctx context.Context, f rundb.FinishedFilter, page, pageSize int) ([]*rundb.Run, error)
}

// Actions are the event log (rundb.ActionStore): worker_log writes to it, /api/actions reads
// it.
type Actions interface {
	Insert(ctx context.Context, a *rundb.Action) error
	Find(ctx context.Context, f rundb.ActionFilter, limit int) ([]*rundb.Action, error)
}

// PGNs are the tasks' games (rundb.PGNStore): upload_pgn stores them, /api/pgn and
// /api/run_pgns send them.
type PGNs interface {
	Put(ctx context.Context, p *rundb.PGN) error
	Get(ctx context.Context, runTask string) (*rundb.PGN, error)
	ListForRun(ctx context.Context, runID string) ([]rundb.PGNInfo, error)
}

// Networks are the known networks (rundb.NNStore): /api/nn checks one and counts its
// downloads.
type Networks interface {
	Get(ctx context.Context, name string) (*rundb.NN, error)
	CountDownload(ctx context.Context, name string) error
}

// Scheduler is what the worker protocol and run submission ask of the primary's scheduler
// (scheduler.Scheduler).
type Scheduler interface {
	LegacyUsername(name string) bool
	Cached(id rundb.ObjectID) bool
	TaskOwner(ctx context.Context, runID rundb.ObjectID, taskID int) (rundb.WorkerInfo, error)
	RunLabel(ctx context.Context, id rundb.ObjectID) (string, error)
	RequestTask(ctx context.Context, wi rundb.WorkerInfo, machineLimit int, hostURL string) (scheduler.TaskReply, error)
	UpdateTask(ctx context.Context, wi rundb.WorkerInfo, runID rundb.ObjectID, taskID int, st rundb.Results, spsa *scheduler.SPSAUpdate) (scheduler.Reply, error)
	Beat(ctx context.Context, runID rundb.ObjectID, taskID int) (scheduler.Reply, error)
	RequestSPSA(ctx context.Context, runID rundb.ObjectID, taskID int) (scheduler.Reply, error)
	FailedTask(ctx context.Context, runID rundb.ObjectID, taskID int, message string) (scheduler.Reply, error)
	StopRunByWorker(ctx context.Context, wi rundb.WorkerInfo, runID rundb.ObjectID, taskID int, message string, cpuHours float64) error
	PrepareRun(ctx context.Context, req protocol.RunRequest) (protocol.RunRequest, error)
	CreateRun(ctx context.Context, req protocol.RunRequest, username string) (*rundb.Run, error)
	ApproveRun(ctx context.Context, id rundb.ObjectID, approver string) error
	StopRunByUser(ctx context.Context, id rundb.ObjectID, username string) error
	ModifyRun(ctx context.Context, id rundb.ObjectID, username string, approver bool, m scheduler.RunModification) (scheduler.ModifyResult, error)
	RepoOfActiveCommit(ctx context.Context, sha string) (string, error)
}

// Deps are the API's dependencies, built by the server.
type Deps struct {
	Logger *slog.Logger
	Tokens *tokenpool.Pool // bounds blocking database work
	// The database's stores, nil on a server built without one.
	Users     Users
	UserStats UserStats
	Runs      Runs
	Actions   Actions
	PGNs      PGNs
	Networks  Networks
	// Role is this instance's role now.
	Role func() Role
	// NNURL is where /api/nn/{name} redirects ("" means the request's own scheme and host).
	NNURL string
	// NetworkFile is the stored file of the network called name, "" if there is none here.
	NetworkFile func(name string) string
	// Sources are the repository mirrors, which serve workers the sources of active runs; nil:
	// none are served.
	Sources Sources
	// Books are the opening books this server holds and serves; nil: none.
	Books Books
	// HeartbeatPeriod is how often workers beat (0: 120 s); the request_task limits scale with
	// it, as a server with compressed time sees its workers that much more often.
	HeartbeatPeriod time.Duration
	// MaxPGNText is the most PGN text one upload may inflate to; zero means DefaultMaxPGNText.
	MaxPGNText int64
	// Logins are the server's limits on password checks, which the web UI's count against too.
	Logins *guard.Logins
	// Heavy are the server's slots for reads that scan, shared with the web UI's searches.
	Heavy *guard.HeavyReads
}

// Server handles the API's requests. Safe for concurrent use.
type Server struct {
	deps       Deps
	logger     *slog.Logger
	logins     *guard.Logins
	apiGood    *knownGood        // API credentials that just succeeded skip the login limiter
	uploads    *tokenpool.Pool   // a slot per PGN upload being read, decoded and stored
	heavy      *guard.HeavyReads // slots for reads that scan (event log searches), apart from the worker path
	taskLimits *taskLimiter      // request_task calls per account and per address
	pacer      *requestPacer     // retry_after for the request_task calls turned away
}

// New builds the API's handlers.
func New(deps Deps) *Server {
	s := &Server{deps: deps, logger: deps.Logger, logins: deps.Logins, heavy: deps.Heavy,
		apiGood: newKnownGood(10*time.Minute, 200_000), uploads: tokenpool.New(maxConcurrentUploads)}
	s.taskLimits = newTaskLimiter(deps.HeartbeatPeriod)
	s.pacer = newRequestPacer(s.taskLimits.speed)
	return s
}

// scheduler is the primary's scheduler, or nil on any other instance.
func (s *Server) scheduler() Scheduler { return s.deps.Role().Scheduler }

// runs serves runs as this instance sees them now.
func (s *Server) runs() RunSource { return s.deps.Role().Runs }

// Error is the one path from an error to a JSON reply: fishtest's shape, which workers parse,
// with "<path>: <message>" and the time spent.
func Error(c *gin.Context, status int, msg string) {
	replyError(c, status, protocol.ErrorReply{Error: c.Request.URL.Path + ": " + msg, Duration: duration(c)})
}

// internalError answers 500 in the API's error shape and records err for the access log, which
// logs every 5xx with the request it belongs to.
func (s *Server) internalError(c *gin.Context, err error) {
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		// The client went away (a worker's timeout, a closed page): nothing failed here, and
		// nobody reads the answer. 499 is nginx's code for it.
		c.AbortWithStatus(guard.StatusClientClosedRequest)
		return
	}
	_ = c.Error(err)
	Error(c, http.StatusInternalServerError, "Internal Server Error")
}

// duration returns the seconds spent on the request so far, the worker protocol's duration.
func duration(c *gin.Context) float64 { return guard.SinceStart(c).Seconds() }
