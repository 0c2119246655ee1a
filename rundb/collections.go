package rundb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// UserStats are a contributor's totals (fishtest's user_cache collection). Among other things
// they decide whether a user's workers may stop a run (1000 CPU hours).
type UserStats struct {
	Username     string    `bson:"username" json:"username"`
	CPUHours     float64   `bson:"cpu_hours" json:"cpu_hours"`
	Games        int       `bson:"games" json:"games"`
	GamesPerHour float64   `bson:"games_per_hour" json:"games_per_hour"`
	Tests        int       `bson:"tests" json:"tests"`
	TestsRepo    string    `bson:"tests_repo" json:"tests_repo"`
	LastUpdated  time.Time `bson:"last_updated" json:"last_updated"`

	Extra Extra `bson:",inline" json:"-"`
}

// UserCacheStore reads and writes the user_cache collection. Safe for concurrent use.
type UserCacheStore struct {
	coll *mongo.Collection
}

// Get returns a contributor's totals; ErrNotFound if the user has none yet.
func (s *UserCacheStore) Get(ctx context.Context, username string) (*UserStats, error) {
	var st UserStats
	if err := s.coll.FindOne(ctx, bson.D{{Key: "username", Value: username}}).Decode(&st); err != nil {
		return nil, fmt.Errorf("get user stats %s: %w", username, mapError(err))
	}
	return &st, nil
}

// Put creates or replaces a contributor's totals.
func (s *UserCacheStore) Put(ctx context.Context, st *UserStats) error {
	_, err := s.coll.ReplaceOne(ctx, bson.D{{Key: "username", Value: st.Username}}, st, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("put user stats %s: %w", st.Username, mapError(err))
	}
	return nil
}

// maxActionMessage is the longest message an action keeps, as in fishtest.
const maxActionMessage = 5120

// Action is one entry of the event log: who did what to which run, task, worker or user.
type Action struct {
	ID       ObjectID `bson:"_id" json:"_id"`
	Time     float64  `bson:"time" json:"time"` // Unix seconds
	Action   string   `bson:"action" json:"action"`
	Username string   `bson:"username" json:"username"`
	RunID    string   `bson:"run_id,omitempty" json:"run_id,omitempty"`
	Run      string   `bson:"run,omitempty" json:"run,omitempty"`
	TaskID   *int     `bson:"task_id,omitempty" json:"task_id,omitempty"`
	Worker   string   `bson:"worker,omitempty" json:"worker,omitempty"`
	User     string   `bson:"user,omitempty" json:"user,omitempty"`
	NN       string   `bson:"nn,omitempty" json:"nn,omitempty"`
	Message  string   `bson:"message,omitempty" json:"message,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// ActionStore appends to and reads the actions collection. Safe for concurrent use.
type ActionStore struct {
	coll *mongo.Collection
	// inserts stores Insert's actions, those that arrived together with one command: a fleet
	// that stops together logs a failed_task for each of its workers.
	inserts *batcher[*Action]
}

// newActionStore starts the store's writer; DB.Close stops it.
func newActionStore(coll *mongo.Collection) *ActionStore {
	s := &ActionStore{coll: coll}
	s.inserts = newBatcher(func(ctx context.Context, batch []*Action) []error { return insertEach(ctx, coll, batch) })
	return s
}

// Insert appends a to the log, stamping its ID and time if unset and truncating its message.
// It returns once a is stored, with the actions inserted alongside it.
func (s *ActionStore) Insert(ctx context.Context, a *Action) error {
	if a.ID.IsZero() {
		a.ID = NewObjectID()
	}
	if a.Time == 0 {
		a.Time = float64(time.Now().UnixMicro()) / 1e6
	}
	if len(a.Message) > maxActionMessage {
		a.Message = a.Message[:maxActionMessage]
	}
	if err := s.inserts.put(ctx, a); err != nil {
		return fmt.Errorf("insert %s action: %w", a.Action, mapError(err))
	}
	return nil
}

// maxWorkerMessage is the longest block message kept for a worker, as in fishtest.
const maxWorkerMessage = 500

// Worker is what Shoal remembers about a worker machine by its short name
// ("user-8cores-abcd1234"): whether it is blocked or quarantined, and why.
type Worker struct {
	WorkerName  string    `bson:"worker_name" json:"worker_name"`
	Blocked     bool      `bson:"blocked" json:"blocked"`
	Message     string    `bson:"message" json:"message"`
	LastUpdated time.Time `bson:"last_updated" json:"last_updated"`
	// BlockedBy is who blocked the worker, and BlockedByApprover whether they were an approver
	// then: only an approver may lift an approver's block. Both are empty while it is not
	// blocked, and on a block written before they were recorded.
	BlockedBy         string `bson:"blocked_by,omitempty" json:"blocked_by,omitempty"`
	BlockedByApprover bool   `bson:"blocked_by_approver,omitempty" json:"blocked_by_approver,omitempty"`
	// Quarantined says the block is the server's own: the machine's results stood far outside
	// the fleet's (see the scheduler's quarantine rule), and Message says how. QuarantinedSince
	// is when, and Quarantines how many times this machine was ever quarantined, which stays
	// when a quarantine is lifted. fishtest reads such a record as an approver's block.
	Quarantined      bool      `bson:"quarantined,omitempty" json:"quarantined,omitempty"`
	QuarantinedSince time.Time `bson:"quarantined_since,omitempty" json:"quarantined_since,omitzero"`
	Quarantines      int       `bson:"quarantines,omitempty" json:"quarantines,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// ApproverBlock reports whether the worker is blocked by an approver, or by someone unknown (a
// block recorded before Shoal noted who): only an approver may lift or change such a block.
func (w *Worker) ApproverBlock() bool {
	return w.Blocked && (w.BlockedByApprover || w.BlockedBy == "")
}

// WorkerStore reads and writes the workers collection. Safe for concurrent use.
type WorkerStore struct {
	coll  *mongo.Collection
	index *workerIndex
}

// GetCached is Get from an in-memory copy of the whole collection, for request_task's
// blocked-worker check: it reads the database only at its first call and, by one caller while
// the others go on, once the copy is older than UserCacheTTL. A Put through this store takes
// effect at once; a change made by another instance within UserCacheTTL. through, if not nil,
// runs that read (request_task passes the server's token pool: no token for a memory read).
func (s *WorkerStore) GetCached(ctx context.Context, name string, through func(context.Context, func(context.Context) error) error) (*Worker, error) {
	if through == nil {
		through = func(ctx context.Context, fn func(context.Context) error) error { return fn(ctx) }
	}
	return s.index.get(ctx, name, func(ctx context.Context) (all map[string]*Worker, err error) {
		err = through(ctx, func(ctx context.Context) error {
			all, err = readAllWorkers(ctx, s.coll)
			return err
		})
		return all, err
	})
}

// Get returns a worker by short name; ErrNotFound if it was never blocked or noted.
func (s *WorkerStore) Get(ctx context.Context, name string) (*Worker, error) {
	var w Worker
	if err := s.coll.FindOne(ctx, bson.D{{Key: "worker_name", Value: name}}).Decode(&w); err != nil {
		return nil, fmt.Errorf("get worker %s: %w", name, mapError(err))
	}
	return &w, nil
}

// Put creates or replaces a worker's record, truncating its message and stamping the time.
func (s *WorkerStore) Put(ctx context.Context, w *Worker) error {
	if len(w.Message) > maxWorkerMessage {
		w.Message = w.Message[:maxWorkerMessage]
	}
	w.LastUpdated = time.Now().UTC()
	_, err := s.coll.ReplaceOne(ctx, bson.D{{Key: "worker_name", Value: w.WorkerName}}, w, options.Replace().SetUpsert(true))
	s.index.put(w, err != nil) // on an error the write may have landed: read it again
	if err != nil {
		return fmt.Errorf("put worker %s: %w", w.WorkerName, mapError(err))
	}
	return nil
}

// PGN is the gzip-compressed PGN of one task's games; RunID is "<run id>-<task id>".
type PGN struct {
	RunID  string `bson:"run_id" json:"run_id"`
	PGNZip []byte `bson:"pgn_zip" json:"-"`
	Size   int    `bson:"size" json:"size"`
}

// PGNStore reads and writes the pgns collection. Safe for concurrent use.
type PGNStore struct {
	coll *mongo.Collection
	// puts stores Put's documents, those that arrived together with one command.
	puts *batcher[pgnDoc]
}

// newPGNStore starts the store's writer; DB.Close stops it.
func newPGNStore(coll *mongo.Collection) *PGNStore {
	s := &PGNStore{coll: coll}
	s.puts = newBatcher(s.putMany)
	return s
}

// putMany stores the batch's PGNs with one insert command; those whose task already had one
// (a worker that uploaded again) replace it, one by one. A task twice in one batch (an upload
// retried while the first was queued) is stored once, with its last upload, which both
// callers are answered for. It returns each PGN's error.
func (s *PGNStore) putMany(ctx context.Context, batch []pgnDoc) []error {
	last := make(map[string]int, len(batch)) // a task's last place in the batch
	for i, d := range batch {
		last[d.ID] = i
	}
	var docs []pgnDoc
	var placed []int // the batch index of each of docs
	for i, d := range batch {
		if last[d.ID] == i {
			docs, placed = append(docs, d), append(placed, i)
		}
	}
	inserted := insertEach(ctx, s.coll, docs)
	errs := make([]error, len(batch))
	for j, err := range inserted {
		i := placed[j]
		if !mongo.IsDuplicateKeyError(err) {
			errs[i] = err
			continue
		}
		// Each replace has a time of its own: after a fleet's restart many uploads are
		// repeats, and they must not share the insert's.
		rctx, cancel := context.WithTimeout(ctx, batchWriteTimeout)
		_, errs[i] = s.coll.ReplaceOne(rctx, idFilter(batch[i].ID), batch[i])
		cancel()
	}
	for i, d := range batch {
		errs[i] = errs[last[d.ID]]
	}
	return errs
}

// Insert stores one task's PGN as a new document, beside any the task already has. Workers'
// uploads go through Put instead.
func (s *PGNStore) Insert(ctx context.Context, p *PGN) error {
	if _, err := s.coll.InsertOne(ctx, p); err != nil {
		return fmt.Errorf("insert pgn %s: %w", p.RunID, mapError(err))
	}
	return nil
}

// pgnDoc is how Put stores a PGN: keyed by its "<run id>-<task id>" in _id as well as run_id, so
// that a task holds one PGN, found and replaced through the _id index that every database
// (the embedded one included) uses.
type pgnDoc struct {
	ID  string `bson:"_id"`
	PGN `bson:",inline"`
}

// Put stores one task's PGN, replacing the one Put stored for that task before: a worker that
// uploads again does not add a copy. The first upload is an insert, which costs the same
// however many PGNs are stored; only a repeat replaces the stored one (an upsert would look
// for the document first, which the embedded database does by reading the whole collection).
// PGNs put together share one insert (batcher). A caller that gives up (ctx) leaves its PGN to
// be stored or not: an upload's retry replaces it either way.
func (s *PGNStore) Put(ctx context.Context, p *PGN) error {
	if err := s.puts.put(ctx, pgnDoc{ID: p.RunID, PGN: *p}); err != nil {
		return fmt.Errorf("put pgn %s: %w", p.RunID, mapError(err))
	}
	return nil
}

// Get returns one task's PGN by "<run id>-<task id>": the one Put stored, or else (a database
// written by another server, which keys PGNs by run_id only) the first with that run_id.
func (s *PGNStore) Get(ctx context.Context, runTask string) (*PGN, error) {
	var p PGN
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: runTask}}).Decode(&p)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = s.coll.FindOne(ctx, bson.D{{Key: "run_id", Value: runTask}}).Decode(&p)
	}
	if err != nil {
		return nil, fmt.Errorf("get pgn %s: %w", runTask, mapError(err))
	}
	return &p, nil
}

// NN is a neural network file known to Shoal (the file itself lives on disk).
type NN struct {
	Name      string `bson:"name" json:"name"`
	User      string `bson:"user" json:"user"`
	Downloads int    `bson:"downloads" json:"downloads"`
	IsMaster  bool   `bson:"is_master,omitempty" json:"is_master,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// NNStore reads and writes the nns collection. Safe for concurrent use.
type NNStore struct {
	coll *mongo.Collection
}

// Insert records a new network; ErrConflict is not raised by the database (the index on name
// is not unique, as in fishtest), so callers check Get first.
func (s *NNStore) Insert(ctx context.Context, n *NN) error {
	if _, err := s.coll.InsertOne(ctx, n); err != nil {
		return fmt.Errorf("insert nn %s: %w", n.Name, mapError(err))
	}
	return nil
}

// Get returns a network by name.
func (s *NNStore) Get(ctx context.Context, name string) (*NN, error) {
	var n NN
	if err := s.coll.FindOne(ctx, bson.D{{Key: "name", Value: name}}).Decode(&n); err != nil {
		return nil, fmt.Errorf("get nn %s: %w", name, mapError(err))
	}
	return &n, nil
}

// KVStore is the kvstore collection: small named values such as worker_runs and books.
// Safe for concurrent use.
type KVStore struct {
	coll *mongo.Collection
}

// Get decodes the value stored under key into out; ErrNotFound if there is none.
func (s *KVStore) Get(ctx context.Context, key string, out any) error {
	var doc struct {
		Value bson.RawValue `bson:"value"`
	}
	if err := s.coll.FindOne(ctx, idFilter(key)).Decode(&doc); err != nil {
		return fmt.Errorf("get kv %s: %w", key, mapError(err))
	}
	if err := doc.Value.Unmarshal(out); err != nil {
		return fmt.Errorf("decode kv %s: %w", key, err)
	}
	return nil
}

// Put stores value under key, replacing what was there.
func (s *KVStore) Put(ctx context.Context, key string, value any) error {
	doc := bson.D{{Key: "_id", Value: key}, {Key: "value", Value: value}}
	if _, err := s.coll.ReplaceOne(ctx, idFilter(key), doc, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("put kv %s: %w", key, mapError(err))
	}
	return nil
}
