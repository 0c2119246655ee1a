// Package ui is what the pages of Shoal's web UI share: the templates, parsed once in New with
// every area's template functions; sessions in a signed and encrypted cookie, the logged-in
// user, CSRF checks and flashes; the common part of every page, tables' pagers and sort
// orders; the one path from an error to an HTML page; and the interfaces every page reads
// through. The pages themselves are the areas' (server/ui/runs: runs, their forms and live
// updates; server/ui/people: accounts, people and operations; server/ui/networks: networks,
// books and the SPRT calculator), each with a Server holding this package's; server/routes.go
// names their handlers.
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

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/guard"
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
	// Changed is the primary's runcache.Cache.Changed, nil otherwise (live pages then poll).
	Changed func() <-chan struct{}
}

// Users are the accounts as every page reads them (rundb.UserStore): the session's user,
// the sessions opened and closed, the sign-ups an approver's navigation counts.
type Users interface {
	Get(ctx context.Context, username string) (*rundb.User, error)
	OpenSession(ctx context.Context, username, id string, expires time.Time) error
	CloseSession(ctx context.Context, username, id string) error
	CloseAllSessions(ctx context.Context, username string) error
	CountPending(ctx context.Context) (int, error)
}

// Scheduler is what the web UI's pages ask of the primary's scheduler (scheduler.Scheduler):
// the run lists, the forms that change runs, and the tuning page.
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

// Deps are what the web UI's pages share, built by the server.
type Deps struct {
	Logger  *slog.Logger
	Tokens  *tokenpool.Pool // bounds blocking database work
	Version string
	// Users are the accounts; nil on a server built without a database.
	Users Users
	// Role is this instance's role now.
	Role func() Role
	// SessionSecret signs and encrypts the session cookies (at least 32 bytes; empty picks a
	// random one, so sessions end with the process).
	SessionSecret []byte
	// Heavy are the server's slots for reads that scan, shared with the API's searches.
	Heavy *guard.HeavyReads
}

// Server is what the web UI's areas (server/ui/runs, server/ui/people, server/ui/networks)
// share: the parsed templates, the session cookies, the logged-in user, CSRF, flashes, the
// common part of every page and the one path from an error to an HTML page. The area
// packages' handlers call its exported methods; the middleware (Sessions, LoadUser,
// CheckCSRF) runs before them. Safe for concurrent use.
type Server struct {
	deps     Deps
	logger   *slog.Logger
	pages    map[string]*template.Template
	sessions cookie.Store
	heavy    *guard.HeavyReads // slots for reads that scan (event log searches), apart from the worker path
}

// New builds what the web UI's pages share, parsing every template, with the template
// functions of the areas (each area's TemplateFuncs), so that a broken one fails here.
func New(deps Deps, areaFuncs ...template.FuncMap) (*Server, error) {
	switch {
	case len(deps.SessionSecret) == 0:
		// Sessions then last as long as the process: right for tests, and never guessable.
		deps.SessionSecret = []byte(guard.NewToken())
	case len(deps.SessionSecret) < minSessionSecret:
		return nil, fmt.Errorf("session secret: %d bytes, need at least %d", len(deps.SessionSecret), minSessionSecret)
	}
	pages, err := parsePages(templates.FS, templateFuncs(areaFuncs...))
	if err != nil {
		return nil, err
	}
	return &Server{deps: deps, logger: deps.Logger, pages: pages, sessions: newSessionStore(deps.SessionSecret),
		heavy: deps.Heavy}, nil
}

// Role is this instance's role now.
func (s *Server) Role() Role { return s.deps.Role() }

// Scheduler is the primary's scheduler, or nil on any other instance.
func (s *Server) Scheduler() Scheduler { return s.deps.Role().Scheduler }

// Runs serves runs as this instance sees them now.
func (s *Server) Runs() RunSource { return s.deps.Role().Runs }

// minSessionSecret is the shortest session secret accepted.
const minSessionSecret = 32

// parsePages parses each page template (every NAME.html but layout.html and the _*.html
// partials) together with the layout and the partials, under the name NAME.
func parsePages(fsys fs.FS, funcs template.FuncMap) (map[string]*template.Template, error) {
	names, err := fs.Glob(fsys, "*.html")
	if err != nil {
		return nil, err
	}
	partials, err := fs.Glob(fsys, "_*.html")
	if err != nil {
		return nil, err
	}
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

// Render writes a page. A template that fails half-way (parse-time checks make it unlikely)
// leaves a truncated page and is logged.
func (s *Server) Render(c *gin.Context, status int, name string, data any) {
	s.renderBlock(c, status, name, "layout", data)
}

// ExecuteBlock writes one named block of a page template to w (a live update's fragment).
func (s *Server) ExecuteBlock(w io.Writer, name, block string, data any) error {
	t, ok := s.pages[name]
	if !ok {
		return fmt.Errorf("no page template %s", name)
	}
	return t.ExecuteTemplate(w, block, data)
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
	s.Render(c, status, "error", struct {
		Page
		Status  int
		Message string
	}{s.Page(c, http.StatusText(status)), status, msg})
	c.Abort()
}
