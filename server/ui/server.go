// Package ui is Shoal's web UI: server-rendered pages of runs, accounts, people, networks and
// tools, their forms, and their live updates (Server-Sent Events of rendered HTML, ui/live).
// Handlers are methods on Server, which holds their dependencies; server/routes.go names them.
// Templates and static files are embedded (templates, static) and parsed once, in New.
package ui

import (
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-contrib/sessions/cookie"
	"github.com/gin-gonic/gin"

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
	// Name is "primary", "secondary" or "standby".
	Name string
	// Scheduler is the primary's scheduler, nil on any other instance.
	Scheduler *scheduler.Scheduler
	// Runs serves runs: the primary's run cache, or the database.
	Runs RunSource
	// Changed is the primary's RunCache.Changed, nil otherwise (live pages then poll).
	Changed func() <-chan struct{}
}

// Deps are the web UI's dependencies, built by the server.
type Deps struct {
	Logger  *slog.Logger
	Tokens  *tokenpool.Pool // bounds blocking database work
	Version string
	// DB is the database: users, runs, actions, workers and networks.
	DB *rundb.DB
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
	// Logins are the server's limits on password checks and signups, which the API's checks
	// count against too.
	Logins *guard.Logins
	// Heavy are the server's slots for reads that scan, shared with the API's searches.
	Heavy *guard.HeavyReads
	// Transfers are the time limits of large uploads, for the network upload.
	Transfers guard.Transfers
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
func (s *Server) scheduler() *scheduler.Scheduler { return s.deps.Role().Scheduler }

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
