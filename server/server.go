// Package server is Shoal's HTTP side: one Gin engine serving the worker API, the read API and
// the web UI on one port. Handlers are methods on Server, which holds their dependencies;
// routes.go lists every route.
package server

import (
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/templates"
	"github.com/shoal-chess/shoal/tokenpool"
)

// UserCounter is what the home page needs from the users store.
type UserCounter interface {
	Count(ctx context.Context) (int64, error)
}

// RunSource gives the current state of a run: from the primary's run cache, or from the
// database on a secondary. The run returned is the caller's own copy.
type RunSource interface {
	Snapshot(ctx context.Context, id rundb.ObjectID) (*rundb.Run, error)
}

// Deps are the server's dependencies, built by the caller.
type Deps struct {
	Logger   *slog.Logger
	Tokens   *tokenpool.Pool // bounds blocking database work
	Users    UserCounter
	Version  string
	Database string // a few words on the database in use, for people

	// DB is the database, for the read API's queries (runs, actions, PGNs, networks).
	DB *rundb.DB
	// Runs serves runs as the scheduler sees them.
	Runs RunSource
	// Scheduler owns the primary's scheduling state; nil on a secondary.
	Scheduler *scheduler.Scheduler
	// NNURL is where /api/nn/{name} redirects ("" means the request's own scheme and host).
	NNURL string
}

// ginReleaseMode switches Gin, whose mode is process-wide, out of debug mode (route dumps on
// stdout) once.
var ginReleaseMode sync.Once

// Server handles HTTP requests. Safe for concurrent use.
type Server struct {
	deps         Deps
	logger       *slog.Logger
	pages        map[string]*template.Template
	engine       *gin.Engine
	shuttingDown atomic.Bool
}

// New builds the server, parsing every template so that a broken one fails here.
func New(deps Deps) (*Server, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	pages, err := parsePages(templates.FS)
	if err != nil {
		return nil, err
	}
	ginReleaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	s := &Server{deps: deps, logger: deps.Logger.With("component", "http"), pages: pages}
	s.engine = s.routes()
	return s, nil
}

// Handler returns the http.Handler serving every route.
func (s *Server) Handler() http.Handler { return s.engine }

// BeginShutdown makes the server refuse new work: /healthz and every other route answer 503 in
// their error shape, so load balancers and workers back off while in-flight requests finish.
func (s *Server) BeginShutdown() { s.shuttingDown.Store(true) }

// parsePages parses each page template together with the layout.
func parsePages(fsys fs.FS) (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range []string{"index", "error"} {
		t, err := template.New(name).Option("missingkey=error").ParseFS(fsys, "layout.html", name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every page template gets besides its own data.
type page struct {
	Title   string
	Version string
}

// render writes a page. A template that fails half-way (parse-time checks make it unlikely)
// leaves a truncated page and is logged.
func (s *Server) render(c *gin.Context, status int, name string, data any) {
	t := s.pages[name]
	c.Status(status)
	c.Header("Content-Type", "text/html; charset=utf-8")
	if err := t.ExecuteTemplate(c.Writer, "layout", data); err != nil {
		s.logger.Error("render page", "page", name, "err", err)
	}
}

// startedKey is where the request's start time is kept, for the duration field.
const startedKey = "shoal.started"

// duration returns the seconds spent on the request so far, the worker protocol's duration.
func duration(c *gin.Context) float64 {
	if t, ok := c.Get(startedKey); ok {
		return time.Since(t.(time.Time)).Seconds()
	}
	return 0
}
