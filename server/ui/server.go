// Package ui is Shoal's web UI: server-rendered pages of runs, accounts, people, networks and
// tools, their forms, and their live updates (Server-Sent Events of rendered HTML, ui/live).
// Handlers are methods on Server, which holds their dependencies; server/routes.go names them.
// Templates and static files are embedded (templates, static) and parsed once, in New.
package ui

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-contrib/sessions/cookie"
	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui/live"
	"github.com/shoal-chess/shoal/templates"
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
	// Name is "primary", "starting" (the primary, loading its runs), "secondary" or "standby".
	Name string
	// Scheduler is the primary's scheduler, nil on any other instance.
	Scheduler Scheduler
	// Runs serves runs: the primary's run cache, or the database.
	Runs RunSource
	// Changed is the primary's RunCache.Changed, nil otherwise (live pages then poll).
	Changed func() <-chan struct{}
}

// What the web UI asks of the database and of the scheduler, method by method: *rundb.DB and
// its stores and *scheduler.Scheduler satisfy these (the server checks it where it wires
// them).

// Users are the accounts (rundb.UserStore): logins and their sessions, sign-ups, profiles, and
// what approvers do to accounts.
type Users interface {
	Get(ctx context.Context, username string) (*rundb.User, error)
	Authenticate(ctx context.Context, username, password string) (*rundb.User, error)
	OpenSession(ctx context.Context, username, id string, expires time.Time) error
	CloseSession(ctx context.Context, username, id string) error
	CloseAllSessions(ctx context.Context, username string) error
	Taken(ctx context.Context, username, email string) (nameTaken, emailTaken bool, err error)
	Create(ctx context.Context, nu rundb.NewUser) (*rundb.User, error)
	SetProfile(ctx context.Context, username, email, testsRepo string) error
	SetPassword(ctx context.Context, username, password string) error
	CountPending(ctx context.Context) (int, error)
	Accept(ctx context.Context, username string) error
	DeletePending(ctx context.Context, username string) error
	SetBlocked(ctx context.Context, username string, blocked bool) error
	SetMachineLimit(ctx context.Context, username string, limit int) error
	UsernamesContaining(ctx context.Context, part string, limit int) ([]string, error)
}

// People lists the accounts for approvers (rundb.DB).
type People interface {
	ListUsers(ctx context.Context, q rundb.UserQuery) ([]*rundb.User, int, error)
	CountUserGroups(ctx context.Context) (rundb.UserGroupCounts, error)
}

// Contributors rank the users by what they contributed (rundb.UserCacheStore): overall, or
// over the last month.
type Contributors interface {
	Find(ctx context.Context, q rundb.ContributorQuery, search string) (string, error)
	Rank(ctx context.Context, q rundb.ContributorQuery, username string) (int, error)
	Totals(ctx context.Context) (rundb.ContributorTotals, error)
	List(ctx context.Context, q rundb.ContributorQuery) ([]*rundb.UserStats, int, error)
}

// UserStats are the users' contribution totals (rundb.UserCacheStore): the ranking, and one
// user's row on their profile.
type UserStats interface {
	Contributors
	Get(ctx context.Context, username string) (*rundb.UserStats, error)
}

// Runs are the stored runs (rundb.RunStore), which the run lists read.
type Runs interface {
	Active(ctx context.Context) ([]*rundb.Run, error)
	CountFinished(ctx context.Context, f rundb.RunSearch, limit int) (int, error)
	SearchFinished(ctx context.Context, f rundb.RunSearch, skip, limit int) ([]*rundb.Run, error)
}

// Actions are the event log (rundb.ActionStore): approvers' actions are written to it, and the
// events page searches it.
type Actions interface {
	Insert(ctx context.Context, a *rundb.Action) error
	Count(ctx context.Context, q rundb.ActionQuery) (int, error)
	Query(ctx context.Context, q rundb.ActionQuery) ([]*rundb.Action, error)
	Usernames(ctx context.Context) ([]string, error)
}

// Workers are the workers that approvers blocked or noted (rundb.WorkerStore).
type Workers interface {
	Get(ctx context.Context, name string) (*rundb.Worker, error)
	Put(ctx context.Context, w *rundb.Worker) error
	Blocked(ctx context.Context) ([]*rundb.Worker, error)
}

// Networks are the known networks (rundb.NNStore): listed on /nns, added by an upload.
type Networks interface {
	Summary(ctx context.Context, f rundb.NNFilter) (rundb.NNSummary, error)
	List(ctx context.Context, f rundb.NNFilter, key string, desc bool, skip, limit int) ([]rundb.NNInfo, error)
	Get(ctx context.Context, name string) (*rundb.NN, error)
	Insert(ctx context.Context, n *rundb.NN) error
	Delete(ctx context.Context, name string) error
}

// Scheduler is what the run pages and forms ask of the primary's scheduler
// (scheduler.Scheduler).
type Scheduler interface {
	UnfinishedRuns(ctx context.Context) ([]*rundb.Run, error)
	ActiveTasks(ctx context.Context) ([]scheduler.ActiveTask, error)
	TaskSemaphoreSize() int
	PrepareRun(ctx context.Context, req protocol.RunRequest) (protocol.RunRequest, error)
	CreateRun(ctx context.Context, req protocol.RunRequest, username string) (*rundb.Run, error)
	ApproveRun(ctx context.Context, id rundb.ObjectID, approver string) error
	ModifyRun(ctx context.Context, id rundb.ObjectID, username string, approver bool, m scheduler.RunModification) (scheduler.ModifyResult, error)
	StopRunByUser(ctx context.Context, id rundb.ObjectID, username string) error
	PurgeRunByUser(ctx context.Context, id rundb.ObjectID, username string) (string, error)
	DeleteRun(ctx context.Context, id rundb.ObjectID, username string) error
}

// Sources are the engines' repository mirrors (gitmirror.Mirrors): a run's page shows the diff of
// its commits and what the repository says about them, without fetching.
type Sources interface {
	Commit(ctx context.Context, repo, sha string) (gitmirror.Commit, error)
	Relation(ctx context.Context, repo, base, new string) (gitmirror.Relation, error)
	Diff(ctx context.Context, repo, base, new string) (*gitmirror.Diff, error)
}

// Books are the opening books this server holds (books.Store): listed on /books, added by an
// approver's upload, offered by the new-test form.
type Books interface {
	List() []books.Book
	Names() []string
	Default() string
	Add(name string, r io.Reader) (books.Book, error)
}

// Deps are the web UI's dependencies, built by the server.
type Deps struct {
	Logger  *slog.Logger
	Tokens  *tokenpool.Pool // bounds blocking database work
	Version string
	// The database's stores, nil on a server built without one (MonthlyContributors is
	// fishtest's top_month collection).
	Users               Users
	People              People
	UserStats           UserStats
	MonthlyContributors Contributors
	Runs                Runs
	Actions             Actions
	Workers             Workers
	Networks            Networks
	// Role is this instance's role now.
	Role func() Role
	// Lease reads who holds the primary's lease, within a second; false if it cannot be told.
	Lease func(ctx context.Context) (protocol.LeaseInfo, bool)
	// ShuttingDown reports whether the server has begun to shut down: live streams then end.
	ShuttingDown func() bool
	// SessionSecret signs and encrypts the session cookies (at least 32 bytes; empty picks a
	// random one, so sessions end with the process).
	SessionSecret []byte
	// DataDir is the instance's data directory; uploaded networks live under DataDir/nn.
	DataDir string
	// MaxNetworkSize is the size an uploaded network must stay below; zero means
	// DefaultMaxNetworkSize.
	MaxNetworkSize int64
	// Logins are the server's limits on password checks and signups, which the API's checks
	// count against too.
	Logins *guard.Logins
	// Heavy are the server's slots for reads that scan, shared with the API's searches.
	Heavy *guard.HeavyReads
	// Transfers are the time limits of large uploads, for the network upload.
	Transfers guard.Transfers
	// Sources are the repository mirrors; nil: run pages show no diff.
	Sources Sources
	// Books are the held opening books; nil: the form takes any book name.
	Books Books
}

// Server handles the web UI's requests. Safe for concurrent use.
type Server struct {
	deps      Deps
	logger    *slog.Logger
	pages     map[string]*template.Template
	sessions  cookie.Store
	logins    *guard.Logins     // login and signup rate limits, and the log of failed logins
	live      *live.Streams     // live updates, and the bounds on their open streams
	heavy     *guard.HeavyReads // slots for reads that scan (event log searches), apart from the worker path
	transfers guard.Transfers   // the time limits of large uploads
}

// New builds the web UI, parsing every template so that a broken one fails here.
func New(deps Deps) (*Server, error) {
	switch {
	case len(deps.SessionSecret) == 0:
		// Sessions then last as long as the process: right for tests, and never guessable.
		deps.SessionSecret = []byte(guard.NewToken())
	case len(deps.SessionSecret) < minSessionSecret:
		return nil, fmt.Errorf("session secret: %d bytes, need at least %d", len(deps.SessionSecret), minSessionSecret)
	}
	pages, err := parsePages(templates.FS)
	if err != nil {
		return nil, err
	}
	s := &Server{deps: deps, logger: deps.Logger, pages: pages, sessions: newSessionStore(deps.SessionSecret),
		logins: deps.Logins, heavy: deps.Heavy, transfers: deps.Transfers}
	s.live = &live.Streams{Limits: live.NewLimits(), Logger: deps.Logger, Changed: s.liveChanged, ShuttingDown: deps.ShuttingDown}
	return s, nil
}

// scheduler is the primary's scheduler, or nil on any other instance.
func (s *Server) scheduler() Scheduler { return s.deps.Role().Scheduler }

// runs serves runs as this instance sees them now.
func (s *Server) runs() RunSource { return s.deps.Role().Runs }

// minSessionSecret is the shortest session secret accepted.
const minSessionSecret = 32

// parsePages parses each page template (every NAME.html but layout.html and the _*.html
// partials) together with the layout and the partials, under the name NAME.
func parsePages(fsys fs.FS) (map[string]*template.Template, error) {
	names, err := fs.Glob(fsys, "*.html")
	if err != nil {
		return nil, err
	}
	partials, err := fs.Glob(fsys, "_*.html")
	if err != nil {
		return nil, err
	}
	funcs := templateFuncs()
	pages := map[string]*template.Template{}
	for _, file := range names {
		if file == "layout.html" || strings.HasPrefix(file, "_") {
			continue
		}
		name := strings.TrimSuffix(file, ".html")
		files := append([]string{"layout.html", file}, partials...)
		t, err := template.New(name).Funcs(funcs).Option("missingkey=error").ParseFS(fsys, files...)
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes a page. A template that fails half-way (parse-time checks make it unlikely)
// leaves a truncated page and is logged.
func (s *Server) render(c *gin.Context, status int, name string, data any) {
	s.renderBlock(c, status, name, "layout", data)
}

// renderBlock writes one named block of a page template (a fragment for live updates, or
// "layout" for the whole page).
func (s *Server) renderBlock(c *gin.Context, status int, name, block string, data any) {
	t, ok := s.pages[name]
	if !ok {
		panic("ui: no page template " + name) // a programming error, caught by recovery
	}
	c.Status(status)
	c.Header("Content-Type", "text/html; charset=utf-8")
	if err := t.ExecuteTemplate(c.Writer, block, data); err != nil {
		s.logger.Error("render page", "page", name, "block", block, "err", err)
	}
}

// PageError is the one path from an error to an HTML reply.
func (s *Server) PageError(c *gin.Context, status int, msg string) {
	setPageHeaders(c.Writer.Header())
	s.render(c, status, "error", struct {
		page
		Status  int
		Message string
	}{s.page(c, http.StatusText(status)), status, msg})
	c.Abort()
}
