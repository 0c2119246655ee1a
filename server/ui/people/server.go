// Package people is the web UI's pages of people: signing up, logging in and out, profiles and
// what approvers do to accounts, the user management page, workers that approvers block, the
// event log, the contributors' ranking, and the tuning page for operations. What every page
// shares is server/ui's.
package people

import (
	"context"
	"log/slog"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/tokenpool"
)

// What these pages ask of the database, method by method: *rundb.DB and its stores satisfy
// these (the server checks it where it wires them).

// Users are the accounts (rundb.UserStore): logins and their sessions, sign-ups, profiles, and
// what approvers do to accounts.
type Users interface {
	Get(ctx context.Context, username string) (*rundb.User, error)
	Authenticate(ctx context.Context, username, password string) (*rundb.User, error)
	Taken(ctx context.Context, username, email string) (nameTaken, emailTaken bool, err error)
	Create(ctx context.Context, nu rundb.NewUser) (*rundb.User, error)
	SetProfile(ctx context.Context, username, email, testsRepo string) error
	SetPassword(ctx context.Context, username, password string) error
	Accept(ctx context.Context, username string) error
	DeletePending(ctx context.Context, username string) error
	SetBlocked(ctx context.Context, username string, blocked bool) error
	SetMachineLimit(ctx context.Context, username string, limit int) error
	CreateToken(ctx context.Context, username string, nt rundb.NewToken) (string, *rundb.APIToken, error)
	RevokeToken(ctx context.Context, username, name string) error
	Tokens(ctx context.Context, username string) ([]rundb.TokenInfo, error)
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
	Quarantined(ctx context.Context) ([]*rundb.Worker, error)
}

// Deps are these pages' dependencies, built by the server.
type Deps struct {
	Logger *slog.Logger
	Tokens *tokenpool.Pool // bounds blocking database work
	// The database's stores, nil on a server built without one (MonthlyContributors is
	// fishtest's top_month collection).
	Users               Users
	People              People
	UserStats           UserStats
	MonthlyContributors Contributors
	Actions             Actions
	Workers             Workers
	// Lease reads who holds the primary's lease, within a second; false if it cannot be told.
	Lease func(ctx context.Context) (protocol.LeaseInfo, bool)
	// Logins are the server's limits on password checks and signups, which the API's checks
	// count against too.
	Logins *guard.Logins
	// NotifySettings and Outbox are the notifications' (notify.go); EmailEnabled says whether
	// the operator configured a mail server, without which users are offered no e-mail.
	NotifySettings NotifySettings
	Outbox         Outbox
	EmailEnabled   bool
}

// Server handles these pages' requests. Safe for concurrent use.
type Server struct {
	ui     *ui.Server
	deps   Deps
	logger *slog.Logger
	logins *guard.Logins // login and signup rate limits, and the log of failed logins
}

// New builds these pages on what the web UI's pages share.
func New(base *ui.Server, deps Deps) *Server {
	return &Server{ui: base, deps: deps, logger: deps.Logger, logins: deps.Logins}
}
