package rundb_test

import (
	"context"
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

// PGNs uploaded together are stored together, in fewer insert commands than uploads; each task
// still holds exactly one PGN, the one uploaded last when a task's worker uploads again.
func TestPGNsPutTogetherShareInserts(t *testing.T) {
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

	closed, err := rundb.Open(ctx, rundb.Options{URI: rundbtest.URI(t), Database: rundbtest.NewName(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	putCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := closed.PGNs.Put(putCtx, &rundb.PGN{RunID: run + "-0"}); err == nil || putCtx.Err() != nil {
		t.Errorf("a put on a closed database: %v (context %v), want an error at once", err, putCtx.Err())
	}
}
