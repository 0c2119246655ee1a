package journal_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// BenchmarkJournalChangeDurably is update_task's durable change of a task through the run cache
// and a journal in files, up to its acknowledgement: the record made and encoded under the
// run's lock, queued, written by the writer and waited for. The files are synced at an interval
// (a day: never, here), so the figure is the server's work, not the disk's. "parallel" has 16
// callers, whose records share batches. "new task" is request_task's change, serial.
func BenchmarkJournalChangeDurably(b *testing.B) {
	ctx := context.Background()
	db := rundbtest.Open(b)
	r := rundbtest.SampleRun()
	r.Finished, r.BadTasks, r.Args.SPSA = false, nil, nil // an SPRT run's record
	r.Tasks[1].SPSAParams = nil
	if err := db.Runs.Insert(ctx, r); err != nil {
		b.Fatal(err)
	}
	j, err := journal.Open(ctx, db, journal.Options{Dir: b.TempDir(), SyncEvery: 24 * time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(j.Close)
	c := runcache.New(db.Runs, runcache.Options{Logger: slog.New(slog.DiscardHandler), Journal: j})
	if _, err := c.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	update := func(b *testing.B) {
		stored, err := c.ChangeDurably(ctx, r.ID, 1, func(r *rundb.Run) (runcache.Prio, error) {
			r.Tasks[1].Stats.Wins++
			r.Tasks[1].LastUpdated = time.Now()
			return runcache.PrioNormal, nil
		})
		if err == nil {
			err = stored(ctx)
		}
		if err != nil {
			b.Error(err)
		}
	}
	// request_task's change: a new task appended, written whole. The run is cut back to its two
	// tasks first (a change not journalled), so that every record is the same.
	create := func(b *testing.B) {
		err := c.Change(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) {
			r.Tasks = r.Tasks[:2]
			return runcache.PrioNormal, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		stored, err := c.ChangeDurably(ctx, r.ID, -1, func(r *rundb.Run) (runcache.Prio, error) {
			r.Tasks = append(r.Tasks, rundb.Task{NumGames: 480, Active: true, LastUpdated: time.Now(),
				Start: r.TotalGames, Stats: rundb.NewResults(), WorkerInfo: rundbtest.SampleWorkerInfo()})
			return runcache.PrioHigh, nil
		})
		if err == nil {
			err = stored(ctx)
		}
		if err != nil {
			b.Error(err)
		}
	}
	b.Run("new task", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			create(b)
		}
	})
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			update(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8) // 16 callers on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				update(b)
			}
		})
	})
}
