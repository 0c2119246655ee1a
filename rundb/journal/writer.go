package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

type segment struct {
	name    string
	n       int
	records int
	started time.Time
	// pins holds, for each run with a record here, the newest such record's position; it is
	// removed once a document covering it is written.
	pins map[rundb.ObjectID]Position
}

const (
	segmentPrefix = "journal_"
	maxBatch      = 2000
)

func (j *Journal) newSegment(n int) *segment {
	return &segment{name: fmt.Sprintf("%s%d_%d", segmentPrefix, j.epoch, n), n: n, started: j.now(),
		pins: map[rundb.ObjectID]Position{}}
}

// enqueue queues e, its doc set, as run's record at p, and returns the channel that receives
// the write's outcome. The journal owns e from then on.
func (j *Journal) enqueue(run rundb.ObjectID, p Position, e *journalEntry) <-chan error {
	e.run, e.pos, e.done, e.queued = run, p, make(chan error, 1), time.Now()
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		done := e.done
		done <- fmt.Errorf("%w: the journal is closed (the primary is stopping)", rundb.ErrNotStored)
		recycle(e)
		return done
	}
	j.queue = append(j.queue, e)
	j.noteArrival(e.queued)
	done := e.done // e is the writer's once the lock is let go
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return done
}

// write is the writer: it takes every queued record (up to maxBatch) once the oldest has
// waited GroupWait, appends them to the current segment in one write (one insertMany into a
// collection, or one write to a file), checks the lease and tells each waiter; then it drops
// the segments no run needs.
func (j *Journal) write() {
	defer close(j.done)
	// The batch and its records' bytes, kept from one batch to the next: the writer takes
	// thousands of batches a second.
	var batch []*journalEntry
	var docs [][]byte
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
			batch = append(batch[:0], j.queue[:n]...)
			// The rest moves to the front, so that the queue's array is reused too.
			rest := copy(j.queue, j.queue[n:])
			clear(j.queue[rest:])
			j.queue = j.queue[:rest]
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
			docs = docs[:0]
			for _, e := range batch {
				docs = append(docs, e.doc)
			}
			err := j.writeBatch(seg, batch, docs)
			clear(docs)
			end := time.Now()
			for _, e := range batch {
				j.metrics.ObserveJournalWait(end.Sub(e.queued))
				e.done <- err
				recycle(e) // written (copied into a frame or sent): nothing refers to it now
			}
			clear(batch)
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

// writeTimeout bounds a batch's write, with the lease's checks.
const writeTimeout = 30 * time.Second

// writeBatch writes batch, whose records' bytes are docs, to seg.
func (j *Journal) writeBatch(seg *segment, batch []*journalEntry, docs [][]byte) error {
	if j.beforeWrite != nil {
		j.beforeWrite()
	}
	start := time.Now()
	deadline := start.Add(writeTimeout)
	// Checked before the write too, so that a primary resumed after a long pause (whose lease
	// is then old) writes nothing; after it, so that nothing written after a takeover is
	// acknowledged.
	err := j.checkLeaseBy(deadline)
	if err == nil {
		if err = j.out.append(deadline, seg.name, docs); err != nil {
			j.nextSegmentAfter(seg)
		}
	}
	if err == nil {
		err = j.checkLeaseBy(deadline)
	}
	j.metrics.ObserveJournalWrite(time.Since(start), len(batch), err)
	if errors.Is(err, ErrFenced) {
		return fmt.Errorf("%w: %w", rundb.ErrNotStored, err)
	}
	if err != nil {
		return fmt.Errorf("%w: journal: write %d records: %w", rundb.ErrNotStored, len(batch), err)
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

// checkLeaseBy is CheckLease with a deadline, whose context (and timer) is made only if the
// lease must be read: the writer checks twice a batch, thousands of batches a second.
func (j *Journal) checkLeaseBy(deadline time.Time) error {
	if j.leaseFresh() {
		return nil // as CheckLease would answer, without a read
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return j.CheckLease(ctx)
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

// CheckLease returns ErrFenced unless the lease still names this primary's epoch. It runs
// before a batch is written, and again after it is written and before it is acknowledged (the
// run cache calls it before each run write too). While this primary renewed its lease less
// than half its time to live ago, no other instance can have taken it (they wait a whole time
// to live without renewal, by their clocks, which must agree with this one's within the other
// half: NTP does far better), so the batch is safe without a read; past that, the lease is read.
func (j *Journal) CheckLease(ctx context.Context) error {
	if j.leaseFresh() {
		return nil
	}
	lease, err := ReadLease(ctx, j.db)
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

// leaseFresh reports whether the lease was renewed within half its term: no other instance
// can have taken it since, so it need not be read.
func (j *Journal) leaseFresh() bool { return j.LeaseAge() < j.ttl/2 }

// Covered tells the journal that run's document, as written, covers its records up to p, so
// that segments holding only covered records can be dropped.
func (j *Journal) Covered(run rundb.ObjectID, p Position) {
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
	if !j.anyCoveredLocked() {
		j.mu.Unlock()
		return // the usual case, every time the queue runs dry: nothing to build
	}
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

// anyCoveredLocked reports whether a segment, but the current one, has all its records
// covered. j.mu must be held.
func (j *Journal) anyCoveredLocked() bool {
	for _, s := range j.segments[:len(j.segments)-1] {
		if len(s.pins) == 0 {
			return true
		}
	}
	return false
}
