// Package journal makes a change the primary acknowledges to a worker durable before the reply
// leaves, while the run cache (package runcache) keeps writing whole run documents behind. It
// holds the journal, its segments (collections of the journal's database, or files) and the
// primary's lease, which fences a primary whose epoch was overtaken.
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
// the lease still names that epoch (CheckLease). A primary whose epoch was overtaken gets
// ErrFenced and must stop writing. Its batches that landed after the
// successor read the journal are never replayed: the successor writes what it replayed into its
// own first segment and then records the epochs it absorbed, whose segments are ignored from
// then on.
package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
)

// ErrFenced means another primary, of a newer epoch, owns the runs: this one must step down.
var ErrFenced = errors.New("another primary took over (newer epoch)")

// Options configures Open.
type Options struct {
	// Lease is the primary's lease, taken with AcquireLease; a zero Lease makes Open take it
	// for Holder.
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
	// Logger receives the journal's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives the journal's depth, waits and writes and the lease's age; nil records
	// nothing.
	Metrics *metrics.Metrics
}

// Journal is the primary's write-ahead record of acknowledged changes. Safe for concurrent use.
type Journal struct {
	// out takes this epoch's segments; stores are where earlier epochs' may be (the journal's
	// database, and out).
	out     segmentStore
	stores  []segmentStore
	codec   rundb.Codec // the runs' codec, which the records use too
	epoch   int64
	now     func() time.Time
	logger  *slog.Logger
	metrics *metrics.Metrics
	segMax  int
	segAge  time.Duration
	ttl     time.Duration
	gather  time.Duration // Options.GroupWait
	db      *rundb.DB     // the database the journal belongs to

	onFenced    func(error)
	beforeWrite func()
	fencedOnce  sync.Once
	renewed     atomic.Int64 // unix nanoseconds of the last renewal
	stopRenew   chan struct{}
	renewDone   chan struct{}

	// replay holds, until Preload takes it, the records found at open, by run, in order.
	replay map[rundb.ObjectID][]*journalRecord
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
	covered    map[rundb.ObjectID]Position
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

// PositionOf is the position a run is at (the latest record made from it, or its document's).
func PositionOf(r *rundb.Run) Position { return Position{r.JournalEpoch, r.JournalSeq} }

// Open takes the next epoch in the lease document of d, reads the records of every epoch not
// yet absorbed (the run cache's Preload applies them, through Replay), and starts the writer.
// Close stops it.
func Open(ctx context.Context, d *rundb.DB, opts Options) (*Journal, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	dbStore := dbSegments{d.JournalDB()}
	j := &Journal{
		out: dbStore, stores: []segmentStore{dbStore}, codec: d.Runs.Codec(), now: opts.Now,
		logger: logger.With("component", "journal"), metrics: opts.Metrics,
		segMax: opts.SegmentRecords, segAge: opts.SegmentAge, ttl: opts.LeaseTTL, db: d, onFenced: opts.OnFenced,
		beforeWrite: opts.BeforeWrite, gather: opts.GroupWait,
		wake: make(chan struct{}, 1), covered: map[rundb.ObjectID]Position{}, done: make(chan struct{}),
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
		if lease, err = AcquireLease(ctx, d, opts.Holder, j.ttl, j.now()); err != nil {
			return nil, err
		}
	}
	j.epoch, j.absorbed = lease.Epoch, lease.Absorbed
	j.renewed.Store(lease.Renewed.UnixNano())
	if err := j.checkFileJournals(lease, opts.Dir); err != nil {
		if rerr := ReleaseLease(ctx, d, j.epoch); rerr != nil {
			err = fmt.Errorf("%w (and releasing the lease: %v)", err, rerr)
		}
		return nil, err
	}
	if opts.Dir != "" {
		// Recorded before any record is written: a primary that cannot read this directory
		// must not start as if the epoch had written nothing.
		if err := addFileJournal(ctx, d, j.epoch, opts.Dir); err != nil {
			return nil, err
		}
	}
	if err := j.read(ctx); err != nil {
		return nil, err
	}
	j.segments = []*segment{j.newSegment(0)}
	j.metrics.WatchJournal(j.Depth)
	j.metrics.WatchLease(j.epoch, j.LeaseAge)
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
		err := RenewLease(ctx, j.db, j.epoch, now)
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

// Depth returns the records in this epoch's live segments, and those queued for the next write.
func (j *Journal) Depth() (records, queued int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.records, len(j.queue)
}

// Release gives the lease up, for a graceful stop once everything is written: a standby takes
// over at once. Call it after Close.
func (j *Journal) Release(ctx context.Context) error { return ReleaseLease(ctx, j.db, j.epoch) }

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
