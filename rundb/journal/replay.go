package journal

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// staleSegment is a segment of an earlier epoch, and where it is.
type staleSegment struct {
	store segmentStore
	name  string
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
	j.replay = map[rundb.ObjectID][]*journalRecord{}
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
				_, rec, err := j.decodeStored(raw)
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

// Replay applies to each of runs (but those skip names, which are cached already and left as
// they are) the records found at open that are newer than its document, queues one record of
// this epoch per run it changed with everything it applied, then records the earlier epochs as
// absorbed and drops their segments (absorb). Only the first call does anything.
func (j *Journal) Replay(ctx context.Context, runs []*rundb.Run, skip func(rundb.ObjectID) bool) error {
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
func (j *Journal) replayInto(r *rundb.Run) (applied int, touched map[int]bool, historyFrom int) {
	touched = map[int]bool{}
	historyFrom = -1
	for _, rec := range j.replay[r.ID] {
		if !rec.pos().After(PositionOf(r)) {
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
	if err := markAbsorbed(ctx, j.db, j.epoch, j.fileDir()); err != nil {
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
