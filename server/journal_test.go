package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// A worker call whose change the journal did not store (here: another instance took the lease
// while this primary stood still) is not acknowledged: the worker is told, in the plain-text
// shape it retries, to try again, and the run's stored state does not have it.
func TestWorkerCallWhoseChangeIsNotStoredIsToldToRetry(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	j, err := db.OpenJournal(ctx, rundb.JournalOptions{Holder: "this", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	f := newFleetOn(t, tokenpool.New(20), db, j)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	if code, out := f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)})); code != http.StatusOK || out["task_alive"] != true {
		t.Fatalf("update_task while the lease is ours: %d %v", code, out)
	}

	// This primary stands still for a minute; another instance takes the lease.
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if _, err := db.AcquireLease(ctx, "other", rundb.DefaultLeaseTTL, clock()); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(20)}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(f.url+"/api/update_task", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(raw), "could not be stored; retry later") || strings.HasPrefix(string(raw), "{") {
		t.Fatalf("update_task after the lease was taken: %d %q (Retry-After %q), want a plain-text 503 to retry",
			resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	// The journal has the first report only: a new primary replaying it finds 10 draws.
	j.Close()
	j2, err := db.OpenJournal(ctx, rundb.JournalOptions{Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j2.Close)
	cache := rundb.NewRunCache(db.Runs, nil, discardLogger())
	cache.SetJournal(j2)
	if _, err := cache.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	oid, _ := rundb.ParseObjectID(id)
	var got int
	if err := cache.View(ctx, oid, func(r *rundb.Run) { got = r.Tasks[0].Stats.Draws }); err != nil {
		t.Fatal(err)
	}
	if got != 20 {
		t.Errorf("the next primary finds %d draws for the task, want the 20 of the acknowledged report", got)
	}
}
