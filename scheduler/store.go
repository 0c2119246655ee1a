package scheduler

import (
	"context"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// What the Scheduler uses of the database, declared here, where it is used: one small interface
// per collection, holding only the calls the scheduler makes. *rundb.DB's stores satisfy them
// (storeOf); a test may stand in for any one of them (newScheduler). Run documents themselves
// go through the run cache (*runcache.Cache), which owns their writes.

// keyValues is the key-value collection: the worker-to-runs map, the legacy usernames, the
// opening books and the contributors' marker.
type keyValues interface {
	Get(ctx context.Context, key string, out any) error
	Put(ctx context.Context, key string, value any) error
}

// actionLog is the event log, which the scheduler appends to.
type actionLog interface {
	Insert(ctx context.Context, a *rundb.Action) error
}

// netLookup finds an uploaded network, which a new run's networks must name.
type netLookup interface {
	Get(ctx context.Context, name string) (*rundb.NN, error)
}

// workerRecords are the workers' records (blocked machines, their last contact).
type workerRecords interface {
	GetCached(ctx context.Context, name string, through func(context.Context, func(context.Context) error) error) (*rundb.Worker, error)
	Put(ctx context.Context, w *rundb.Worker) error
}

// contributorStats is one of the two contributor tables (all-time, this month).
type contributorStats interface {
	Get(ctx context.Context, username string) (*rundb.UserStats, error)
	All(ctx context.Context) ([]*rundb.UserStats, error)
	Put(ctx context.Context, st *rundb.UserStats) error
	Delete(ctx context.Context, usernames ...string) error
}

// contributorSources is what the contributors' job reads and marks besides the tables: whose
// tests repository is whose, which finished runs are already credited, and the finished runs.
type contributorSources interface {
	TestsRepos(ctx context.Context) (map[string]string, error)
	CreditedRuns(ctx context.Context) (map[rundb.ObjectID]bool, error)
	AddCreditedRuns(ctx context.Context, ids []rundb.ObjectID) error
	EachFinished(ctx context.Context, since time.Time, fn func(*rundb.Run) error) error
	EachByID(ctx context.Context, ids []rundb.ObjectID, fn func(*rundb.Run) error) error
}

// store is the scheduler's whole view of the database.
type store struct {
	kv           keyValues
	actions      actionLog
	nns          netLookup
	workers      workerRecords
	contributors contributorSources
	allTime      contributorStats // the users' all-time statistics (fishtest's user_cache)
	monthly      contributorStats // this month's
}

// dbContributors gathers the contributors' sources, spread over three collections of db.
type dbContributors struct{ db *rundb.DB }

func (c dbContributors) TestsRepos(ctx context.Context) (map[string]string, error) {
	return c.db.Users.TestsRepos(ctx)
}

func (c dbContributors) CreditedRuns(ctx context.Context) (map[rundb.ObjectID]bool, error) {
	return c.db.CreditedRuns(ctx)
}

func (c dbContributors) AddCreditedRuns(ctx context.Context, ids []rundb.ObjectID) error {
	return c.db.AddCreditedRuns(ctx, ids)
}

func (c dbContributors) EachFinished(ctx context.Context, since time.Time, fn func(*rundb.Run) error) error {
	return c.db.Runs.EachFinished(ctx, since, fn)
}

func (c dbContributors) EachByID(ctx context.Context, ids []rundb.ObjectID, fn func(*rundb.Run) error) error {
	return c.db.Runs.EachByID(ctx, ids, fn)
}

// storeOf is the scheduler's view of db.
func storeOf(db *rundb.DB) store {
	return store{kv: db.KV, actions: db.Actions, nns: db.NNs, workers: db.Workers,
		contributors: dbContributors{db}, allTime: db.UserCache, monthly: db.MonthlyContributors()}
}
