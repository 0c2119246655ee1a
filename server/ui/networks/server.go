// Package networks is the web UI's pages of what engines play with and tools: the networks
// (/nns) and their upload, the opening books and their upload, and the SPRT calculator. The
// two uploads stream their file (upload.go). What every page shares is server/ui's.
package networks

import (
	"context"
	"io"
	"log/slog"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/tokenpool"
)

// What these pages ask of the database and of the books, method by method: the database's
// stores and *books.Store satisfy these (the server checks it where it wires them).

// Networks are the known networks (rundb.NNStore): listed on /nns, added by an upload.
type Networks interface {
	Summary(ctx context.Context, f rundb.NNFilter) (rundb.NNSummary, error)
	List(ctx context.Context, f rundb.NNFilter, key string, desc bool, skip, limit int) ([]rundb.NNInfo, error)
	Get(ctx context.Context, name string) (*rundb.NN, error)
	Insert(ctx context.Context, n *rundb.NN) error
	Delete(ctx context.Context, name string) error
}

// Actions are the event log (rundb.ActionStore), where an upload is written.
type Actions interface {
	Insert(ctx context.Context, a *rundb.Action) error
}

// Books are the opening books this server holds (books.Store): listed on /books, added by an
// approver's upload.
type Books interface {
	List() []books.Book
	Default() string
	Add(name string, r io.Reader) (books.Book, error)
}

// Deps are these pages' dependencies, built by the server.
type Deps struct {
	Logger *slog.Logger
	Tokens *tokenpool.Pool // bounds blocking database work
	// Networks and Actions are the database's stores, nil on a server built without one.
	Networks Networks
	Actions  Actions
	// Books are the held opening books; nil: none.
	Books Books
	// DataDir is the instance's data directory; uploaded networks live under DataDir/nn.
	DataDir string
	// MaxNetworkSize is the size an uploaded network must stay below; zero means
	// DefaultMaxNetworkSize.
	MaxNetworkSize int64
	// Transfers are the time limits of large uploads.
	Transfers guard.Transfers
}

// Server handles these pages' requests. Safe for concurrent use.
type Server struct {
	ui        *ui.Server
	deps      Deps
	logger    *slog.Logger
	transfers guard.Transfers // the time limits of large uploads
}

// New builds these pages on what the web UI's pages share.
func New(base *ui.Server, deps Deps) *Server {
	return &Server{ui: base, deps: deps, logger: deps.Logger, transfers: deps.Transfers}
}
