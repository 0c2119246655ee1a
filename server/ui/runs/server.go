// Package runs is the web UI's pages of runs: the lists (the homepage, finished runs, a
// user's runs, the machines at work), one run's pages (its results, tasks, patch, charts, live
// Elo and statistics), the form that submits a run and the forms that act on one, and their
// live updates (Server-Sent Events of rendered blocks, which server/ui/live streams). What
// every page shares is server/ui's.
package runs

import (
	"context"
	"log/slog"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/server/ui/live"
	"github.com/shoal-chess/shoal/tokenpool"
)

// What the run pages ask of the database and of the repository mirrors, method by method:
// the database's stores and *gitmirror.Mirrors satisfy these (the server checks it where it
// wires them). The scheduler is the role's (ui.Scheduler).

// Runs are the stored runs (rundb.RunStore), which the run lists read.
type Runs interface {
	Active(ctx context.Context) ([]*rundb.Run, error)
	CountFinished(ctx context.Context, f rundb.RunSearch, limit int) (int, error)
	SearchFinished(ctx context.Context, f rundb.RunSearch, skip, limit int) ([]*rundb.Run, error)
}

// Users are the accounts as the run lists read them (rundb.UserStore): a user's page, and the
// usernames a search of finished runs matches.
type Users interface {
	Get(ctx context.Context, username string) (*rundb.User, error)
	UsernamesContaining(ctx context.Context, part string, limit int) ([]string, error)
}

// Sources are the engines' repository mirrors (gitmirror.Mirrors): a run's page shows the diff
// of its commits and what the repository says about them, without fetching.
type Sources interface {
	Commit(ctx context.Context, repo, sha string) (gitmirror.Commit, error)
	Relation(ctx context.Context, repo, base, new string) (gitmirror.Relation, error)
	Diff(ctx context.Context, repo, base, new string) (*gitmirror.Diff, error)
}

// Books are the opening books this server holds (books.Store), which the new-run form offers.
type Books interface {
	List() []books.Book
	Default() string
}

// Deps are the run pages' dependencies, built by the server.
type Deps struct {
	Logger  *slog.Logger
	Tokens  *tokenpool.Pool // bounds blocking database work
	Version string
	// Runs and Users are the database's stores, nil on a server built without one.
	Runs  Runs
	Users Users
	// ShuttingDown reports whether the server has begun to shut down: live streams then end.
	ShuttingDown func() bool
	// Sources are the repository mirrors; nil: run pages show no diff.
	Sources Sources
	// Books are the held opening books; nil: the form takes any book name.
	Books Books
}

// Server handles the run pages' requests. Safe for concurrent use.
type Server struct {
	ui     *ui.Server
	deps   Deps
	logger *slog.Logger
	live   *live.Streams // live updates, and the bounds on their open streams
}

// New builds the run pages on what the web UI's pages share.
func New(base *ui.Server, deps Deps) *Server {
	s := &Server{ui: base, deps: deps, logger: deps.Logger}
	s.live = &live.Streams{Limits: live.NewLimits(), Logger: deps.Logger, Changed: s.liveChanged, ShuttingDown: deps.ShuttingDown}
	return s
}
