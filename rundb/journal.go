package rundb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/metrics"
)

// The journal makes a change the primary acknowledges to a worker durable before the reply
// leaves, while the run cache keeps writing whole run documents behind, as it always has.
//
// A record is the after-image of what a worker's change alters in its run: the tasks it touched
// or appended, the SPSA iteration, each parameter's theta and the history rows added, and the
// run's last_updated. Everything else such a change alters (results, cores, workers, committed
// and total games, the SPRT's state, the flags) is derived from the tasks and recomputed when the
// runs load. Changes that finish, modify or purge a run are written to the run document before
// they are acknowledged, so they need no record.
//
// Each run carries a position, (epoch, seq): the epoch of the primary that made its latest
// journaled change and a sequence that grows with each record of the run. A run document stores
// the position it covers (journal_epoch, journal_seq); at start the primary applies, in order,
// every record newer than its run's document. After-images make that idempotent: a record
// applied twice leaves what it left the first time.
//
// Records of the epoch go to segments named journal_<epoch>_<n>: collections in a database of
// their own when the database is one a standby can reach too, files beside the database's when
// this process runs the embedded database itself (see fileSegments: no standby can take over
// from such a primary, since its database goes with it, and a file costs a fraction of an
// insert on the server's own core). Concurrent changes share one write: while a batch is being
// written the next one gathers (group commit). A segment is dropped once every run with a
// record in it has had a newer document written; dropping a segment is cheap where deleting
// records one by one would scan it.
//
// Fencing: the primary takes its epoch from the lease document (one more than the last, see
// AcquireLease); every journal batch is acknowledged, and every run document written, only while
// the lease still names that epoch (checkLease). A primary whose epoch was overtaken gets
// ErrFenced and must stop writing. Its batches that landed after the
// successor read the journal are never replayed: the successor writes what it replayed into its
// own first segment and then records the epochs it absorbed, whose segments are ignored from
// then on.

// ErrFenced means another primary, of a newer epoch, owns the runs: this one must step down.
var ErrFenced = errors.New("another primary took over (newer epoch)")

// ErrNotStored wraps every reason a journal record was not stored (ErrFenced among them): the
// change it records is made in memory but must not be acknowledged. The caller may retry.
var ErrNotStored = errors.New("the change was not stored")

// JournalOptions configures OpenJournal.
type JournalOptions struct {
	// Lease is the primary's lease, taken with AcquireLease; a zero Lease makes OpenJournal
	// take it for Holder.
	Lease Lease
	// Holder names this instance in the lease document (its address, say).
	Holder string
	// LeaseTTL is the lease's time to live (DefaultLeaseTTL if zero); the journal renews it
	// every fifth of that.
	LeaseTTL time.Duration
	// OnFenced is called, once, when the journal finds that a newer epoch holds the lease: the
	// primary must step down. It must not block (it runs on the journal's own goroutines, which
	// the step-down's Close waits for): start the step-down and return.
	OnFenced func(error)
	// Dir, if set, makes the journal keep its segments as files in Dir rather than as
	// collections of the journal's database: for a primary running the embedded database
	// itself, whose data directory holds Dir. Segments of earlier epochs are read from both.
	Dir string
	// SyncEvery, for a journal in files, is how often they are fsynced: zero (the default)
	// fsyncs each batch before it is acknowledged, so that not even a power cut loses an
	// acknowledged change; a positive interval acknowledges a batch once it is written (a crash
	// of the server loses nothing, a crash of the machine at most that interval's changes, as
	// MongoDB's default journaling can) and saves the fsync's time and CPU per batch.
	SyncEvery time.Duration
	// GroupWait is how long a batch gathers, from its oldest record's arrival, before the writer
	// writes it: the changes arriving meanwhile share its write (and fsync), which then costs
	// the server's core that much less per change, for at most GroupWait more before each is
	// acknowledged. A batch gathers only while changes arrive fast enough that GroupWait is
	// expected to bring minGather of them; sparser ones are written as soon as the writer is
	// free (changes arriving during a write still share the next one). Zero never gathers, and
	// neither does a journal in files synced at an interval (SyncEvery): with no fsync per
	// batch to share, a batch's write costs a few microseconds, and waiting would add up to
	// GroupWait to a change's reply for almost nothing saved.
	GroupWait time.Duration
	// SegmentRecords and SegmentAge bound a segment before the next one starts; zero means
	// 20,000 records and 10 seconds.
	SegmentRecords int
	SegmentAge     time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// BeforeWrite, if set, is called by the writer before each batch it writes: tests use it
	// to hold the journal up.
	BeforeWrite func()
}

// Journal is the primary's write-ahead record of acknowledged changes. Safe for concurrent use.
type Journal struct {
	// out takes this epoch's segments; stores are where earlier epochs' may be (the journal's
	// database, and out).
	out     segmentStore
	stores  []segmentStore
	store   *RunStore
	epoch   int64
	now     func() time.Time
	logger  *slog.Logger
	metrics *metrics.Metrics
	segMax  int
	segAge  time.Duration
	ttl     time.Duration
	gather  time.Duration // JournalOptions.GroupWait
	parent  *DB           // the database the journal belongs to

	onFenced    func(error)
	beforeWrite func()
	fencedOnce  sync.Once
	renewed     atomic.Int64 // unix nanoseconds of the last renewal
	stopRenew   chan struct{}
	renewDone   chan struct{}

	// replay holds, until Preload takes it, the records found at open, by run, in order.
	replay map[ObjectID][]*journalRecord
	// stale are segments of earlier epochs, dropped once their records are absorbed.
	stale    []staleSegment
	absorbed int64 // the lease's absorbed epoch at open

	mu    sync.Mutex
	queue []*journalEntry
	// lastQueued is when the latest record arrived, and gap a moving average of the time
	// between two arrivals (each gap counted up to twice the gather), which says whether a
	// batch is worth gathering (gatherFor).
	lastQueued time.Time
	gap        time.Duration
	wake       chan struct{}
	closing    bool
	covered    map[ObjectID]Position
	// segments are this epoch's, oldest first; the last takes new records.
	segments []*segment
	records  int // records in live segments
	done     chan struct{}
}

// Position is a place in a run's journal: the epoch of the primary and the record's sequence.
type Position struct {
	Epoch int64
	Seq   int64
}

// After reports whether p is later than q.
func (p Position) After(q Position) bool {
	return p.Epoch > q.Epoch || (p.Epoch == q.Epoch && p.Seq > q.Seq)
}

// pos is the position a run is at (the latest record made from it, or its document's).
func pos(r *Run) Position { return Position{r.JournalEpoch, r.JournalSeq} }

// staleSegment is a segment of an earlier epoch, and where it is.
type staleSegment struct {
	store segmentStore
	name  string
}

type segment struct {
	name    string
	n       int
	records int
	started time.Time
	// pins holds, for each run with a record here, the newest such record's position; it is
	// removed once a document covering it is written.
	pins map[ObjectID]Position
}

type journalEntry struct {
	run    ObjectID
	pos    Position
	doc    []byte
	done   chan error
	queued time.Time
}

type journalRecord struct {
	Run         ObjectID      `bson:"run"`
	Epoch       int64         `bson:"epoch"`
	Seq         int64         `bson:"seq"`
	Tasks       []journalTask `bson:"tasks"`
	SPSA        *journalSPSA  `bson:"spsa,omitempty"`
	LastUpdated time.Time     `bson:"last_updated"`
}

func (r *journalRecord) pos() Position { return Position{r.Epoch, r.Seq} }

// storedRecord is a record as the journal collection holds it: the record itself encoded as one
// binary value. The embedded database stores a binary value as it is, where it would convert
// every field of a nested document (a task's worker_info above all): a batch of 32 records is
// written in a third of the time (3.1 against 9.9 ms, measured on the embedded database).
type storedRecord struct {
	Run    ObjectID `bson:"run"`
	Epoch  int64    `bson:"epoch"`
	Seq    int64    `bson:"seq"`
	Record []byte   `bson:"record"`
}

// encodeRecord is rec as the journal stores it.
func (j *Journal) encodeRecord(rec *journalRecord) ([]byte, error) {
	if doc, ok := appendCoreRecord(make([]byte, 0, 512), rec); ok {
		return doc, nil
	}
	return j.reflectRecord(rec)
}

// reflectRecord is encodeRecord for every shape of record, by the driver's encoder.
func (j *Journal) reflectRecord(rec *journalRecord) ([]byte, error) {
	inner, err := j.store.encodeDoc(rec)
	if err != nil {
		return nil, err
	}
	return bson.Marshal(storedRecord{Run: rec.Run, Epoch: rec.Epoch, Seq: rec.Seq, Record: inner})
}

// journalTask is one task of a record: its whole after-image (Task), or for a change to an
// existing task that kept its worker, only the fields such a change touches (Core): the
// worker_info is most of a task's bytes and of the time its encoding takes. Records written
// before Core existed hold Task, which decodes as before.
type journalTask struct {
	Index int       `bson:"i"`
	Task  *Task     `bson:"task,omitempty"`
	Core  *taskCore `bson:"core,omitempty"`
}

// taskCore is a task without its worker_info and the fields Shoal does not know (Extra).
type taskCore struct {
	NumGames      int         `bson:"num_games"`
	Active        bool        `bson:"active"`
	LastUpdated   time.Time   `bson:"last_updated"`
	Start         int         `bson:"start"`
	Stats         Results     `bson:"stats"`
	Bad           bool        `bson:"bad,omitempty"`
	SPSAParams    *SPSAParams `bson:"spsa_params,omitempty"`
	TaskID        *int        `bson:"task_id,omitempty"`
	Residual      *float64    `bson:"residual,omitempty"`
	ResidualColor string      `bson:"residual_color,omitempty"`
}

func coreOf(t *Task) *taskCore {
	return &taskCore{NumGames: t.NumGames, Active: t.Active, LastUpdated: t.LastUpdated, Start: t.Start,
		Stats: t.Stats, Bad: t.Bad, SPSAParams: t.SPSAParams, TaskID: t.TaskID, Residual: t.Residual,
		ResidualColor: t.ResidualColor}
}

// applyTo sets t's fields from c, keeping t's worker_info and unknown fields.
func (c *taskCore) applyTo(t *Task) {
	t.NumGames, t.Active, t.LastUpdated, t.Start, t.Stats = c.NumGames, c.Active, c.LastUpdated, c.Start, c.Stats
	t.Bad, t.SPSAParams, t.TaskID, t.Residual, t.ResidualColor = c.Bad, c.SPSAParams, c.TaskID, c.Residual, c.ResidualColor
}

// sameWorker says whether a and b have equal worker_info and no unknown fields: then a change
// from a to b is written as b's core alone.
func sameWorker(a, b *Task) bool {
	return len(a.Extra) == 0 && len(b.Extra) == 0 && len(a.WorkerInfo.Extra) == 0 && len(b.WorkerInfo.Extra) == 0 &&
		equalWorkerInfo(&a.WorkerInfo, &b.WorkerInfo)
}

func equalWorkerInfo(a, b *WorkerInfo) bool {
	return a.Uname == b.Uname && slices.Equal(a.Architecture, b.Architecture) && a.Concurrency == b.Concurrency &&
		a.MaxMemory == b.MaxMemory && a.MinThreads == b.MinThreads && a.Username == b.Username &&
		a.Version == b.Version && slices.Equal(a.PythonVersion, b.PythonVersion) &&
		slices.Equal(a.GCCVersion, b.GCCVersion) && a.Compiler == b.Compiler && a.UniqueKey == b.UniqueKey &&
		a.Modified == b.Modified && a.WorkerArch == b.WorkerArch && a.ARCH == b.ARCH && a.NPS == b.NPS &&
		a.NearGithubAPILimit == b.NearGithubAPILimit && a.RemoteAddr == b.RemoteAddr && a.CountryCode == b.CountryCode
}

type journalSPSA struct {
	Iter        int          `bson:"iter"`
	Theta       []float64    `bson:"theta"`
	HistoryFrom int          `bson:"history_from"`
	History     ParamHistory `bson:"history,omitempty"`
}

const (
	segmentPrefix = "journal_"
	maxBatch      = 2000
)

// JournalDatabase is the name of the database that holds the journal and the lease of
// database name.
func JournalDatabase(name string) string { return name + "_shoal" }

// OpenJournal takes the next epoch in the lease document, reads the records of every epoch not
// yet absorbed (Preload applies them), and starts the writer. Close stops it.
func (d *DB) OpenJournal(ctx context.Context, opts JournalOptions) (*Journal, error) {
	dbStore := dbSegments{d.client.Database(JournalDatabase(d.db.Name()))}
	j := &Journal{
		out: dbStore, stores: []segmentStore{dbStore}, store: d.Runs, now: opts.Now, logger: d.logger.With("component", "journal"), metrics: d.metrics,
		segMax: opts.SegmentRecords, segAge: opts.SegmentAge, ttl: opts.LeaseTTL, parent: d, onFenced: opts.OnFenced,
		beforeWrite: opts.BeforeWrite, gather: opts.GroupWait,
		wake: make(chan struct{}, 1), covered: map[ObjectID]Position{}, done: make(chan struct{}),
		stopRenew: make(chan struct{}), renewDone: make(chan struct{}),
	}
	if j.now == nil {
		j.now = time.Now
	}
	if j.segMax <= 0 {
		j.segMax = 20_000
	}
	if j.segAge <= 0 {
		j.segAge = 10 * time.Second
	}
	if j.ttl <= 0 {
		j.ttl = DefaultLeaseTTL
	}
	if opts.Dir != "" {
		files, err := newFileSegments(opts.Dir, opts.SyncEvery)
		if err != nil {
			return nil, err
		}
		j.out = files
		j.stores = append(j.stores, files)
		if opts.SyncEvery > 0 {
			j.gather = 0 // see GroupWait
		}
	}
	lease := opts.Lease
	if lease.Epoch == 0 {
		var err error
		if lease, err = d.AcquireLease(ctx, opts.Holder, j.ttl, j.now()); err != nil {
			return nil, err
		}
	}
	j.epoch, j.absorbed = lease.Epoch, lease.Absorbed
	j.renewed.Store(lease.Renewed.UnixNano())
	if err := j.checkFileJournals(lease, opts.Dir); err != nil {
		if rerr := d.ReleaseLease(ctx, j.epoch); rerr != nil {
			err = fmt.Errorf("%w (and releasing the lease: %v)", err, rerr)
		}
		return nil, err
	}
	if opts.Dir != "" {
		// Recorded before any record is written: a primary that cannot read this directory
		// must not start as if the epoch had written nothing.
		if err := d.addFileJournal(ctx, j.epoch, opts.Dir); err != nil {
			return nil, err
		}
	}
	if err := j.read(ctx); err != nil {
		return nil, err
	}
	j.segments = []*segment{j.newSegment(0)}
	d.metrics.WatchJournal(j.Depth)
	d.metrics.WatchLease(j.epoch, j.LeaseAge)
	go j.write()
	go j.renew()
	return j, nil
}

// renew renews the lease every fifth of its time to live until Close, and reports a lease
// found taken by a newer epoch.
func (j *Journal) renew() {
	defer close(j.renewDone)
	t := time.NewTicker(j.ttl / 5)
	defer t.Stop()
	for {
		select {
		case <-j.stopRenew:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), j.ttl/2)
		now := j.now()
		err := j.parent.RenewLease(ctx, j.epoch, now)
		cancel()
		switch {
		case err == nil:
			j.renewed.Store(now.UnixNano())
		case errors.Is(err, ErrFenced):
			j.fenced(err)
			return
		default:
			j.logger.Warn("lease not renewed", "epoch", j.epoch, "age", j.LeaseAge().Round(time.Millisecond), "err", err)
		}
	}
}

// fenced reports, once, that a newer epoch holds the lease.
func (j *Journal) fenced(err error) {
	j.fencedOnce.Do(func() {
		j.logger.Error("this primary lost its lease: stepping down", "epoch", j.epoch, "err", err)
		if j.onFenced != nil {
			j.onFenced(err)
		}
	})
}

// LeaseAge is the time since this primary last renewed its lease.
func (j *Journal) LeaseAge() time.Duration {
	return j.now().Sub(time.Unix(0, j.renewed.Load()))
}

// Epoch is this primary's epoch.
func (j *Journal) Epoch() int64 { return j.epoch }

func (j *Journal) newSegment(n int) *segment {
	return &segment{name: fmt.Sprintf("%s%d_%d", segmentPrefix, j.epoch, n), n: n, started: j.now(),
		pins: map[ObjectID]Position{}}
}

// segmentEpoch parses journal_<epoch>_<n>.
func segmentEpoch(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, segmentPrefix)
	if !ok {
		return 0, false
	}
	e, _, ok := strings.Cut(rest, "_")
	if !ok {
		return 0, false
	}
	epoch, err := strconv.ParseInt(e, 10, 64)
	return epoch, err == nil
}

// checkFileJournals refuses to open when an epoch not yet absorbed kept its journal in files
// this journal cannot read (dir is not theirs): starting without them would lose what that
// primary acknowledged.
func (j *Journal) checkFileJournals(lease Lease, dir string) error {
	if dir != "" {
		var err error
		if dir, err = filepath.Abs(dir); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	for _, fj := range lease.FileJournals {
		if fj.Epoch <= j.absorbed || fj.Epoch >= j.epoch {
			continue
		}
		if dir == "" || filepath.Clean(fj.Dir) != dir {
			return fmt.Errorf("journal: the records of epoch %d are in files in %s, which this server does not read: "+
				"start shoal serve once on the embedded database of that data directory to take them in", fj.Epoch, fj.Dir)
		}
	}
	return nil
}

// read loads the records of every segment of an epoch not yet absorbed, by run, in order.
func (j *Journal) read(ctx context.Context) error {
	j.replay = map[ObjectID][]*journalRecord{}
	n := 0
	for _, st := range j.stores {
		names, err := st.list(ctx)
		if err != nil {
			return err
		}
		for _, name := range names {
			epoch, ok := segmentEpoch(name)
			if !ok {
				continue
			}
			j.stale = append(j.stale, staleSegment{st, name})
			if epoch <= j.absorbed || epoch >= j.epoch {
				// Absorbed already, or written by a primary that lost its lease to one that
				// absorbed it; or (>= ours) impossible, since epochs only grow.
				continue
			}
			err := st.read(ctx, name, func(raw []byte) error {
				var stored storedRecord
				rec := new(journalRecord)
				err := bson.Unmarshal(raw, &stored)
				if err == nil {
					err = j.store.decodeDoc(stored.Record, rec)
				}
				if err != nil {
					return fmt.Errorf("journal: decode a record of %s: %w", name, err)
				}
				j.replay[rec.Run] = append(j.replay[rec.Run], rec)
				n++
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	for _, recs := range j.replay {
		slices.SortFunc(recs, func(a, b *journalRecord) int {
			switch {
			case a.pos().After(b.pos()):
				return 1
			case b.pos().After(a.pos()):
				return -1
			}
			return 0
		})
	}
	j.logger.Info("journal open", "epoch", j.epoch, "segments", j.out, "records_to_replay", n, "runs", len(j.replay), "old_segments", len(j.stale))
	return nil
}

// mark is what record needs of a run from before a change: where its tasks and history ended,
// and a copy of the task the change is about, if it existed (before is nil otherwise).
type mark struct {
	tasks, history int
	before         *Task
}

func markOf(r *Run, task int) mark {
	m := mark{tasks: len(r.Tasks)}
	if task >= 0 && task < len(r.Tasks) {
		before := r.Tasks[task]
		m.before = &before
	}
	if r.Args.SPSA != nil {
		m.history = len(r.Args.SPSA.ParamHistory)
	}
	return m
}

// record makes r's next journal record after a change, and queues it: the task the change is
// about (if it existed before, as m says), the tasks appended since m, and the SPSA state with
// the history rows added since m. The caller holds r's lock, so records of one run are queued in
// their order. Its channel receives the write's outcome.
func (j *Journal) record(r *Run, task int, m mark) (<-chan error, error) {
	return j.push(r, j.makeRecord(r, task, m))
}

// makeRecord is r's next record after a change about task, m being markOf(r, task) from before
// it (see record).
func (j *Journal) makeRecord(r *Run, task int, m mark) *journalRecord {
	var tasks []int
	existed := m.before != nil && task < len(r.Tasks) // then tasks[0] is task
	if existed {
		tasks = append(tasks, task)
	}
	for i := m.tasks; i < len(r.Tasks); i++ {
		tasks = append(tasks, i)
	}
	rec := j.newRecord(r, tasks, m.history)
	if existed && sameWorker(m.before, &r.Tasks[task]) {
		rec.Tasks[0] = journalTask{Index: task, Core: coreOf(&r.Tasks[task])}
	}
	return rec
}

// queueRecord queues r's next record: the after-images of tasks (indices into r.Tasks), and for
// an SPSA run its iteration, thetas and the history rows from historyFrom on. It advances r's
// position to the record's.
func (j *Journal) queueRecord(r *Run, tasks []int, historyFrom int) (<-chan error, error) {
	return j.push(r, j.newRecord(r, tasks, historyFrom))
}

// newRecord is r's next record with the whole after-images of tasks (see queueRecord).
func (j *Journal) newRecord(r *Run, tasks []int, historyFrom int) *journalRecord {
	rec := &journalRecord{Run: r.ID, Epoch: j.epoch, Seq: r.JournalSeq + 1, LastUpdated: r.LastUpdated}
	for _, i := range tasks {
		rec.Tasks = append(rec.Tasks, journalTask{Index: i, Task: &r.Tasks[i]})
	}
	if s := r.Args.SPSA; s != nil {
		from := min(historyFrom, len(s.ParamHistory))
		js := &journalSPSA{Iter: s.Iter, Theta: make([]float64, len(s.Params)), HistoryFrom: from, History: s.ParamHistory[from:]}
		for i, p := range s.Params {
			js.Theta[i] = p.Theta
		}
		rec.SPSA = js
	}
	return rec
}

// push encodes rec, queues it and advances r's position to it. r's lock is held.
func (j *Journal) push(r *Run, rec *journalRecord) (<-chan error, error) {
	doc, err := j.encodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: journal: encode a record of run %s: %w", ErrNotStored, r.ID, err)
	}
	r.JournalEpoch, r.JournalSeq = rec.Epoch, rec.Seq
	return j.enqueue(r.ID, rec.pos(), doc), nil
}

func (j *Journal) enqueue(run ObjectID, p Position, doc []byte) <-chan error {
	e := &journalEntry{run: run, pos: p, doc: doc, done: make(chan error, 1), queued: time.Now()}
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		e.done <- fmt.Errorf("%w: the journal is closed (the primary is stopping)", ErrNotStored)
		return e.done
	}
	j.queue = append(j.queue, e)
	j.noteArrival(e.queued)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return e.done
}

// write is the writer: it takes every queued record (up to maxBatch) once the oldest has
// waited GroupWait, appends them to the current segment in one write (one insertMany into a
// collection, or one write to a file), checks the lease and tells each waiter; then it drops
// the segments no run needs.
func (j *Journal) write() {
	defer close(j.done)
	for {
		<-j.wake
		for {
			j.mu.Lock()
			if wait := j.gatherFor(); wait > 0 {
				j.mu.Unlock()
				time.Sleep(wait)
				continue
			}
			n := min(len(j.queue), maxBatch)
			batch := slices.Clone(j.queue[:n])
			j.queue = j.queue[n:]
			closing := j.closing
			seg := j.currentSegment()
			j.mu.Unlock()
			if n == 0 {
				j.dropCovered()
				if closing {
					return
				}
				break
			}
			err := j.writeBatch(seg, batch)
			end := time.Now()
			for _, e := range batch {
				j.metrics.ObserveJournalWait(end.Sub(e.queued))
				e.done <- err
			}
		}
	}
}

// minGather is the number of records a gather must be expected to bring for the batch to wait:
// below it, the wait would cost every change up to GroupWait for a few writes saved. With the
// default gather of 2 ms, changes gather from 2,000 a second (docs/benchmarks, "The journal's
// gather").
const minGather = 4

// noteArrival updates the average gap between arrivals with one that arrived at t. A gap
// counts up to twice the gather, so that an idle spell does not make the estimate sparse for
// long; the average moves a quarter of the way to each new gap. j.mu must be held.
func (j *Journal) noteArrival(t time.Time) {
	if j.gather <= 0 {
		return
	}
	gap := 2 * j.gather
	if !j.lastQueued.IsZero() {
		gap = min(max(t.Sub(j.lastQueued), 0), gap)
	} else {
		j.gap = gap // the first arrival: sparse until shown otherwise
	}
	j.lastQueued = t
	j.gap += (gap - j.gap) / 4
}

// gatherFor is how much longer the queued batch gathers: until its oldest record has waited
// GroupWait, unless the batch is full, the journal is closing, or arrivals are too sparse for
// the wait to bring minGather records. j.mu must be held.
func (j *Journal) gatherFor() time.Duration {
	if j.gather <= 0 || len(j.queue) == 0 || len(j.queue) >= maxBatch || j.closing || j.gap*minGather > j.gather {
		return 0
	}
	return j.gather - time.Since(j.queue[0].queued)
}

// currentSegment returns the segment new records go to, starting the next one when the
// current one is full or old. j.mu must be held.
func (j *Journal) currentSegment() *segment {
	cur := j.segments[len(j.segments)-1]
	if cur.records >= j.segMax || (cur.records > 0 && j.now().Sub(cur.started) >= j.segAge) {
		cur = j.newSegment(cur.n + 1)
		j.segments = append(j.segments, cur)
	}
	return cur
}

func (j *Journal) writeBatch(seg *segment, batch []*journalEntry) error {
	if j.beforeWrite != nil {
		j.beforeWrite()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	docs := make([][]byte, len(batch))
	for i, e := range batch {
		docs[i] = e.doc
	}
	// Checked before the write too, so that a primary resumed after a long pause (whose lease
	// is then old) writes nothing; after it, so that nothing written after a takeover is
	// acknowledged.
	err := j.checkLease(ctx)
	if err == nil {
		if err = j.out.append(ctx, seg.name, docs); err != nil {
			j.nextSegmentAfter(seg)
		}
	}
	if err == nil {
		err = j.checkLease(ctx)
	}
	j.metrics.ObserveJournalWrite(time.Since(start), len(batch), err)
	if errors.Is(err, ErrFenced) {
		return fmt.Errorf("%w: %w", ErrNotStored, err)
	}
	if err != nil {
		return fmt.Errorf("%w: journal: write %d records: %w", ErrNotStored, len(batch), err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range batch {
		seg.records++
		j.records++
		if c, ok := j.covered[e.run]; ok && !e.pos.After(c) {
			continue // a document written meanwhile covers it
		}
		if p, ok := seg.pins[e.run]; !ok || e.pos.After(p) {
			seg.pins[e.run] = e.pos
		}
	}
	return nil
}

// nextSegmentAfter starts the next segment if seg, whose write failed, is still the current one:
// nothing is appended after what a failed write may have left (see fileSegments).
func (j *Journal) nextSegmentAfter(seg *segment) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.segments[len(j.segments)-1] == seg {
		j.segments = append(j.segments, j.newSegment(seg.n+1))
	}
}

// checkLease returns ErrFenced unless the lease still names this primary's epoch. It runs
// before a batch is written, and again after it is written and before it is acknowledged (the
// run cache calls it before each run write too). While this primary renewed its lease less
// than half its time to live ago, no other instance can have taken it (they wait a whole time
// to live without renewal, by their clocks, which must agree with this one's within the other
// half: NTP does far better), so the batch is safe without a read; past that, the lease is read.
func (j *Journal) checkLease(ctx context.Context) error {
	if j.LeaseAge() < j.ttl/2 {
		return nil
	}
	lease, err := j.parent.ReadLease(ctx)
	if err != nil {
		return fmt.Errorf("journal: read the lease: %w", err)
	}
	if lease.Epoch != j.epoch {
		err := fmt.Errorf("%w: epoch %d holds the lease, this primary has %d", ErrFenced, lease.Epoch, j.epoch)
		j.fenced(err)
		return err
	}
	return nil
}

// Covered tells the journal that run's document, as written, covers its records up to p, so
// that segments holding only covered records can be dropped.
func (j *Journal) Covered(run ObjectID, p Position) {
	j.mu.Lock()
	if c, ok := j.covered[run]; !ok || p.After(c) {
		j.covered[run] = p
	}
	wake := false
	for _, s := range j.segments {
		if q, ok := s.pins[run]; ok && !q.After(p) {
			delete(s.pins, run)
			wake = wake || len(s.pins) == 0
		}
	}
	j.mu.Unlock()
	if wake {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// dropCovered drops the segments, but the current one, whose records are all covered.
func (j *Journal) dropCovered() {
	j.mu.Lock()
	var drop []*segment
	keep := j.segments[:0:0]
	for i, s := range j.segments {
		if i < len(j.segments)-1 && len(s.pins) == 0 {
			drop = append(drop, s)
			j.records -= s.records
		} else {
			keep = append(keep, s)
		}
	}
	j.segments = keep
	j.mu.Unlock()
	for _, s := range drop {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := j.out.drop(ctx, s.name); err != nil {
			j.logger.Warn("drop a covered journal segment; it is dropped at the next start", "segment", s.name, "err", err)
		}
		cancel()
	}
}

// Depth returns the records in this epoch's live segments, and those queued for the next write.
func (j *Journal) Depth() (records, queued int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.records, len(j.queue)
}

// Release gives the lease up, for a graceful stop once everything is written: a standby takes
// over at once. Call it after Close.
func (j *Journal) Release(ctx context.Context) error { return j.parent.ReleaseLease(ctx, j.epoch) }

// Close writes what is queued and stops the writer and the lease's renewal (the lease then
// lapses, unless the same holder takes it again). Records queued later are refused.
func (j *Journal) Close() {
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		<-j.done
		<-j.renewDone
		return
	}
	j.closing = true
	j.mu.Unlock()
	close(j.stopRenew)
	<-j.renewDone
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.done
	j.out.close()
}

// fileDir is the directory of this journal's segments, or "" when they are in the database.
func (j *Journal) fileDir() string {
	if f, ok := j.out.(*fileSegments); ok {
		return f.dir
	}
	return ""
}

// replayRuns applies to each of runs (but those skip names, which are cached already and left as
// they are) the records found at open that are newer than its document, queues one record of
// this epoch per run it changed with everything it applied, then records the earlier epochs as
// absorbed and drops their segments (absorb). Only the first call does anything.
func (j *Journal) replayRuns(ctx context.Context, runs []*Run, skip func(ObjectID) bool) error {
	if j.replay == nil {
		return nil
	}
	start := time.Now()
	var waits []<-chan error
	changed, records := 0, 0
	for _, r := range runs {
		if skip(r.ID) {
			continue
		}
		applied, touched, historyFrom := j.replayInto(r)
		if applied == 0 {
			continue
		}
		tasks := slices.Sorted(maps.Keys(touched))
		if historyFrom < 0 {
			historyFrom = math.MaxInt // no SPSA record: no history rows to carry
		}
		done, err := j.queueRecord(r, tasks, historyFrom)
		if err != nil {
			return err
		}
		waits = append(waits, done)
		changed++
		records += applied
	}
	if err := j.absorb(ctx, waits); err != nil {
		return err
	}
	j.metrics.SetJournalReplay(time.Since(start), records)
	j.logger.Info("journal replayed", "runs", changed, "records", records, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// replayInto applies to r, in order, the records of its run found at open that are newer than
// its document, and returns how many it applied and which tasks and history rows they touched.
func (j *Journal) replayInto(r *Run) (applied int, touched map[int]bool, historyFrom int) {
	touched = map[int]bool{}
	historyFrom = -1
	for _, rec := range j.replay[r.ID] {
		if !rec.pos().After(pos(r)) {
			continue
		}
		if err := applyRecord(r, rec); err != nil {
			j.logger.Error("journal record not applied", "run_id", r.ID, "epoch", rec.Epoch, "seq", rec.Seq, "err", err)
			continue
		}
		applied++
		for _, t := range rec.Tasks {
			touched[t.Index] = true
		}
		if rec.SPSA != nil && (historyFrom < 0 || rec.SPSA.HistoryFrom < historyFrom) {
			historyFrom = rec.SPSA.HistoryFrom
		}
	}
	return applied, touched, historyFrom
}

// applyRecord writes a record's after-images into r.
func applyRecord(r *Run, rec *journalRecord) error {
	for _, t := range rec.Tasks {
		switch {
		case t.Core != nil && t.Index < len(r.Tasks):
			t.Core.applyTo(&r.Tasks[t.Index])
		case t.Core != nil:
			return fmt.Errorf("a change to task %d, after only %d tasks", t.Index, len(r.Tasks))
		case t.Task == nil:
			return fmt.Errorf("task %d without its contents", t.Index)
		case t.Index < len(r.Tasks):
			r.Tasks[t.Index] = *t.Task
		case t.Index == len(r.Tasks):
			r.Tasks = append(r.Tasks, *t.Task)
		default:
			return fmt.Errorf("task %d after only %d tasks", t.Index, len(r.Tasks))
		}
	}
	if s, js := r.Args.SPSA, rec.SPSA; s != nil && js != nil {
		if len(js.Theta) != len(s.Params) {
			return fmt.Errorf("%d thetas for %d parameters", len(js.Theta), len(s.Params))
		}
		s.Iter = js.Iter
		for i := range s.Params {
			s.Params[i].Theta = js.Theta[i]
		}
		if js.HistoryFrom <= len(s.ParamHistory) {
			s.ParamHistory = append(s.ParamHistory[:js.HistoryFrom], js.History...)
		}
	}
	if rec.LastUpdated.After(r.LastUpdated) {
		r.LastUpdated = rec.LastUpdated
	}
	r.JournalEpoch, r.JournalSeq = rec.Epoch, rec.Seq
	return nil
}

// absorb writes, for each run the replay changed, one record of this epoch with everything the
// replay applied, then records in the lease that every earlier epoch is absorbed and drops the
// old segments. From then on a primary of an earlier epoch that still writes is ignored.
func (j *Journal) absorb(ctx context.Context, entries []<-chan error) error {
	for _, done := range entries {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := j.parent.markAbsorbed(ctx, j.epoch, j.fileDir()); err != nil {
		return err
	}
	for _, st := range j.stale {
		if err := st.store.drop(ctx, st.name); err != nil {
			j.logger.Warn("drop an absorbed journal segment", "segment", st.name, "in", st.store, "err", err)
		}
	}
	j.replay, j.stale = nil, nil
	return nil
}
