package rundb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// openCounted opens a fresh database whose commands are counted in the returned registry.
func openCounted(t *testing.T) (*rundb.DB, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	db, err := rundb.Open(ctx, rundb.Options{URI: rundbtest.URI(t), Database: rundbtest.NewName(t), Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Drop(ctx); err != nil {
			t.Error(err)
		}
		if err := db.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return db, reg
}

// closedDB opens a database and closes it, for the writes that must then fail at once.
func closedDB(t *testing.T) *rundb.DB {
	t.Helper()
	closed, err := rundb.Open(context.Background(), rundb.Options{URI: rundbtest.URI(t), Database: rundbtest.NewName(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return closed
}

// PGNs uploaded together are stored together, in fewer insert commands than uploads; each task
// still holds exactly one PGN, the one uploaded last when a task's worker uploads again.
func TestPGNsPutTogetherShareInserts(t *testing.T) {
	ctx := context.Background()
	db, reg := openCounted(t)
	const run, uploads = "6b02abe9707638b5fd2b68ca", 64
	put := func(round int) {
		var wg sync.WaitGroup
		for i := range uploads {
			wg.Go(func() {
				p := &rundb.PGN{RunID: fmt.Sprintf("%s-%d", run, i), PGNZip: []byte{0x1f, 0x8b, byte(round)}, Size: round}
				if err := db.PGNs.Put(ctx, p); err != nil {
					t.Errorf("put %s: %v", p.RunID, err)
				}
			})
		}
		wg.Wait()
	}
	put(1)
	inserts := metricstest.HistogramCount(t, reg, "shoal_db_operation_duration_seconds", "command", "insert")
	if inserts == 0 || inserts >= uploads {
		t.Errorf("%d concurrent uploads took %d insert commands, want fewer", uploads, inserts)
	}
	put(2) // every task again: each replaces its PGN
	n, err := rundbtest.Collection(t, db, "pgns").CountDocuments(ctx, bson.D{})
	if err != nil || n != uploads {
		t.Errorf("%d PGNs stored (%v), want one per task, %d", n, err, uploads)
	}
	for i := range uploads {
		p, err := db.PGNs.Get(ctx, fmt.Sprintf("%s-%d", run, i))
		if err != nil || p.Size != 2 {
			t.Errorf("task %d: %+v %v, want the second upload", i, p, err)
		}
	}

	closed := closedDB(t)
	putCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := closed.PGNs.Put(putCtx, &rundb.PGN{RunID: run + "-0"}); err == nil || putCtx.Err() != nil {
		t.Errorf("a put on a closed database: %v (context %v), want an error at once", err, putCtx.Err())
	}
}

// TestActionsInsertedTogetherShareInserts: a fleet that stops together logs an action per
// worker; those logged together share an insert command, each is stored once, and one refused
// (an ID already stored) fails alone.
func TestActionsInsertedTogetherShareInserts(t *testing.T) {
	ctx := context.Background()
	db, reg := openCounted(t)
	taken := &rundb.Action{Action: "failed_task", Username: "u", Message: "first"}
	if err := db.Actions.Insert(ctx, taken); err != nil {
		t.Fatal(err)
	}
	const actions = 64
	errs := make([]error, actions)
	var wg sync.WaitGroup
	for i := range actions {
		wg.Go(func() {
			a := &rundb.Action{Action: "failed_task", Username: "u", Message: fmt.Sprintf("worker %d", i)}
			if i == 7 {
				a.ID = taken.ID
			}
			errs[i] = db.Actions.Insert(ctx, a)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 {
			if !errors.Is(err, rundb.ErrConflict) {
				t.Errorf("an action under a stored ID: %v, want ErrConflict", err)
			}
		} else if err != nil {
			t.Errorf("action %d: %v", i, err)
		}
	}
	inserts := metricstest.HistogramCount(t, reg, "shoal_db_operation_duration_seconds", "command", "insert")
	if inserts < 2 || inserts >= 1+actions {
		t.Errorf("1 + %d concurrent actions took %d insert commands, want fewer", actions, inserts)
	}
	coll := rundbtest.Collection(t, db, "actions")
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != actions {
		t.Errorf("%d actions stored (%v), want %d: the first and all but the refused one", n, err, actions)
	}
	var first rundb.Action
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: taken.ID}}).Decode(&first); err != nil || first.Message != "first" {
		t.Errorf("the stored action under the reused ID: %+v %v, want the first, unchanged", first, err)
	}

	closed := closedDB(t)
	insCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := closed.Actions.Insert(insCtx, &rundb.Action{Action: "failed_task"}); err == nil || insCtx.Err() != nil {
		t.Errorf("an insert on a closed database: %v (context %v), want an error at once", err, insCtx.Err())
	}
}
