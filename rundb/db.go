// Package rundb holds Shoal's data model (Run, User, Worker, ...) and its stores: one store type
// per collection, with fishtest's document shapes so that an existing fishtest database opens
// unchanged. Its sibling packages hold the rest of the database's concerns: runcache keeps the
// primary's active runs in memory and writes them behind, journal makes the changes acknowledged
// to workers durable (with the primary's lease), and embedded runs the embedded database that
// Open starts when no URI is given.
//
// Every method takes a context first. A missing document is ErrNotFound and a unique-key
// violation is ErrConflict; callers test them with errors.Is. No BSON types appear in the
// exported API, and the one driver type (JournalDB) is for package journal.
package rundb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

var (
	// ErrNotFound means the document asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a write would break a unique index (an existing username, say).
	ErrConflict = errors.New("already exists")
	// ErrNotStored wraps every reason a change to a run was not stored durably (the journal's
	// lease lost to another primary among them): the change is made in memory but must not be
	// acknowledged. The caller may retry.
	ErrNotStored = errors.New("the change was not stored")
)

// DefaultDatabase is fishtest's database name, so that Shoal opens a fishtest database as is.
const DefaultDatabase = "fishtest_new"

// Options says which database to open.
type Options struct {
	// URI of a MongoDB deployment. Empty means: start the embedded database in DataDir.
	URI string
	// DataDir holds the embedded database's files and its lock file. Unused with a URI.
	DataDir string
	// EmbeddedAddr, if set, is a loopback HOST:PORT where the embedded database also listens,
	// for this OS user's other processes ("127.0.0.1:0" picks a free port); it always listens
	// on a Unix socket in the data directory.
	EmbeddedAddr string
	// EmbeddedCommand, if set, runs the embedded database as a child process: this program and
	// its arguments (cmd/shoal gives itself with "db"), with --data and --addr appended. Empty:
	// the database runs in this process. See rundb/embedded/process.go for why a server wants it.
	EmbeddedCommand []string
	// Database is the database name; empty means DefaultDatabase.
	Database string
	// Logger receives the database's log lines; nil means slog.Default().
	Logger *slog.Logger
	// PasswordHashCost is the bcrypt cost of new password hashes; 0 means bcrypt's default.
	// Tests lower it to keep the race detector fast.
	PasswordHashCost int
	// Metrics receives the duration and failures of every database command; nil records
	// nothing.
	Metrics *metrics.Metrics
}

// DB is an open database with one store per collection. It is safe for concurrent use.
type DB struct {
	client   *mongo.Client
	db       *mongo.Database
	embedded embeddedServer
	ferret   bool // the server is FerretDB: Shoal's embedded database, here or reached by URI
	uri      string
	logger   *slog.Logger
	metrics  *metrics.Metrics

	Runs      *RunStore
	Users     *UserStore
	UserCache *UserCacheStore
	Actions   *ActionStore
	Workers   *WorkerStore
	PGNs      *PGNStore
	NNs       *NNStore
	KV        *KVStore
	// NotifySettings and Outbox are the notifications' (in JournalDatabase, see notify.go).
	NotifySettings *NotifySettingsStore
	Outbox         *OutboxStore
}

// Open connects to the database that opts name, starting the embedded one when opts.URI is
// empty, and checks that it answers. It does not create indexes: see EnsureIndexes.
func Open(ctx context.Context, opts Options) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	name := opts.Database
	if name == "" {
		name = DefaultDatabase
	}
	d := &DB{logger: logger, uri: opts.URI, metrics: opts.Metrics}
	if opts.URI == "" {
		var e embeddedServer
		var err error
		if len(opts.EmbeddedCommand) > 0 {
			e, err = embedded.StartProcess(opts.EmbeddedCommand, opts.DataDir, opts.EmbeddedAddr, logger)
		} else {
			e, err = embedded.Start(opts.DataDir, opts.EmbeddedAddr, logger)
		}
		if err != nil {
			return nil, err
		}
		d.embedded = e
		d.uri = e.URI()
	}
	clientOpts := options.Client().
		ApplyURI(d.uri).
		SetBSONOptions(&options.BSONOptions{UseJSONStructTags: false}).
		SetTimeout(30 * time.Second)
	if opts.Metrics != nil {
		clientOpts.SetMonitor(commandMonitor(opts.Metrics))
	}
	client, err := mongo.Connect(clientOpts)
	if err == nil {
		pingCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = client.Ping(pingCtx, nil)
		cancel()
		if err != nil {
			_ = client.Disconnect(context.Background())
		}
	}
	if err != nil {
		if d.embedded != nil {
			d.embedded.Close()
		}
		return nil, fmt.Errorf("connect to %s: %w", config.RedactURI(d.uri), err)
	}
	d.client = client
	d.db = client.Database(name)
	ferret, err := isFerretDB(ctx, client)
	if err != nil {
		_ = d.Close(context.Background())
		return nil, fmt.Errorf("ask %s what it is: %w", config.RedactURI(d.uri), err)
	}
	// FerretDB (the embedded database, or another Shoal's embedded database reached by URI)
	// cannot store arrays of arrays.
	d.ferret = ferret
	d.Runs = &RunStore{coll: d.db.Collection("runs"), flatHistory: ferret}
	if ferret {
		d.Runs.scanDuty = ferretScanDuty
	}
	d.Users = newUserStore(d.db.Collection("users"), opts.PasswordHashCost)
	opts.Metrics.WatchPasswordChecks(d.Users.SlowChecks)
	d.UserCache = &UserCacheStore{coll: d.db.Collection("user_cache")}
	d.Actions = newActionStore(d.db.Collection("actions"))
	d.Workers = &WorkerStore{coll: d.db.Collection("workers"), index: &workerIndex{ttl: UserCacheTTL, now: time.Now}}
	d.PGNs = newPGNStore(d.db.Collection("pgns"))
	d.NNs = &NNStore{coll: d.db.Collection("nns")}
	d.KV = &KVStore{coll: d.db.Collection("kvstore")}
	d.NotifySettings = &NotifySettingsStore{coll: d.JournalDB().Collection(notifySettingsCollection)}
	d.Outbox = &OutboxStore{coll: d.JournalDB().Collection(outboxCollection), claims: d.JournalDB().Collection(claimsCollection)}
	return d, nil
}

// commandMonitor reports each database command's duration, and its failure, to m. A command
// fails when the server answers ok: 0 or the network gives out; a write refused for a duplicate
// key succeeds as a command, and a find without a match is no failure.
func commandMonitor(m *metrics.Metrics) *event.CommandMonitor {
	return &event.CommandMonitor{
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			m.ObserveDBOperation(e.CommandName, e.Duration, false)
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			m.ObserveDBOperation(e.CommandName, e.Duration, true)
		},
	}
}

// isFerretDB reports whether the server is FerretDB rather than MongoDB.
func isFerretDB(ctx context.Context, client *mongo.Client) (bool, error) {
	var info bson.M
	err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info)
	if err != nil {
		return false, err
	}
	_, ferret := info["ferretdbVersion"]
	return ferret, nil
}

// Describe says in a few words which database is in use, for the start-up log.
func (d *DB) Describe() string {
	if d.embedded != nil {
		return fmt.Sprintf("embedded database (FerretDB, SQLite; %s) in %s at %s, database %q",
			d.embedded.Where(), d.embedded.Dir(), d.uri, d.db.Name())
	}
	if d.ferret {
		return fmt.Sprintf("FerretDB (shoal db, or another Shoal's embedded database) at %s, database %q",
			config.RedactURI(d.uri), d.db.Name())
	}
	return fmt.Sprintf("MongoDB at %s, database %q", config.RedactURI(d.uri), d.db.Name())
}

// URI is the address other processes use to reach this database; for the embedded database it
// is the loopback mongodb:// address it listens on.
func (d *DB) URI() string { return d.uri }

// SharedURI is the address other processes of this machine and user use to share the embedded
// database: its TCP front when one was asked for (Options.EmbeddedAddr), else its Unix socket's
// URI; "" when the database is not embedded.
func (d *DB) SharedURI() string {
	if d.embedded == nil {
		return ""
	}
	return d.embedded.SharedURI()
}

// embeddedServer is the embedded database as this DB runs it: in this process
// (*embedded.Server) or as a child process (*embedded.Process).
type embeddedServer interface {
	Dir() string
	URI() string
	SharedURI() string
	Close()
	// Lost delivers an error if the database's own process exits before Close; nil for one
	// in this process, which cannot die alone.
	Lost() <-chan error
	// Where says which process runs it, for Describe.
	Where() string
	// Gone reports whether the database's own process has exited before Close.
	Gone() bool
}

// Lost delivers an error if the embedded database's own process exits while the DB is open: the
// server has lost its database. It never delivers for a database in this process or reached by
// URI.
func (d *DB) Lost() <-chan error {
	if d.embedded == nil {
		return nil
	}
	return d.embedded.Lost()
}

// Gone reports whether the embedded database's own process has exited while the DB is open
// (Lost has delivered, or is about to): nothing more can be stored.
func (d *DB) Gone() bool { return d.embedded != nil && d.embedded.Gone() }

// Embedded reports whether this DB started the embedded database.
func (d *DB) Embedded() bool { return d.embedded != nil }

// JournalDir is where a primary on this DB keeps its journal (journal.Options.Dir): files in the
// data directory when this DB runs the embedded database, which no other instance can reach once
// this one is gone; "" (the database) otherwise.
func (d *DB) JournalDir() string {
	if d.embedded == nil {
		return ""
	}
	return filepath.Join(d.embedded.Dir(), "journal")
}

// JournalDatabase is the name of the database that holds the journal and the lease of
// database name (see package journal).
func JournalDatabase(name string) string { return name + "_shoal" }

// JournalDB is the database that holds this database's journal and lease. It is for package
// journal, which owns the calls made to it; no other caller needs it.
func (d *DB) JournalDB() *mongo.Database { return d.client.Database(JournalDatabase(d.db.Name())) }

// Name is the database name.
func (d *DB) Name() string { return d.db.Name() }

// Drop deletes the whole database, and its journal. Tests use it to clean up after themselves.
func (d *DB) Drop(ctx context.Context) error {
	for _, db := range []*mongo.Database{d.db, d.JournalDB()} {
		if err := db.Drop(ctx); err != nil {
			return fmt.Errorf("drop database %s: %w", db.Name(), err)
		}
	}
	return nil
}

// Close disconnects and, for the embedded database, stops it and releases its lock. It waits for
// in-flight operations up to ctx's deadline, but for a batch of PGNs or actions being written,
// which it cuts short (batcher.stop).
func (d *DB) Close(ctx context.Context) error {
	if d.PGNs != nil {
		d.PGNs.puts.stop()
	}
	if d.Actions != nil {
		d.Actions.inserts.stop()
	}
	err := d.client.Disconnect(ctx)
	if d.embedded != nil {
		d.embedded.Close()
	}
	if err != nil {
		return fmt.Errorf("disconnect from database: %w", err)
	}
	return nil
}

// mapError turns driver errors callers act on into this package's sentinels.
func mapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return ErrNotFound
	case mongo.IsDuplicateKeyError(err):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	}
	return err
}

// idFilter selects one document by _id.
func idFilter(id any) bson.D { return bson.D{{Key: "_id", Value: id}} }
