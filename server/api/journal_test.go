package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/server/servertest"
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
	j, err := journal.Open(ctx, db, journal.Options{Holder: "this", Now: clock})
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
	if _, err := journal.AcquireLease(ctx, db, "other", journal.DefaultLeaseTTL, clock()); err != nil {
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
	j2, err := journal.Open(ctx, db, journal.Options{Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j2.Close)
	cache := runcache.New(db.Runs, runcache.Options{Logger: servertest.DiscardLogger(), Journal: j2})
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

// A worker call waiting for its journal record holds no token of the database pool: with one
// token and the journal held up, update_task's token is back in the pool while the call still
// waits, and the call is answered once the record is written.
func TestWorkerCallWaitsForItsRecordWithoutAToken(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	var held atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	j, err := journal.Open(ctx, db, journal.Options{Holder: "this", BeforeWrite: func() {
		if held.Load() {
			entered <- struct{}{}
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	pool := tokenpool.New(1)
	f := newFleetOn(t, pool, db, j)
	id := f.newRun(map[string]any{"num_games": 10000})
	if code, out := f.post("/api/request_task", call(1, nil)); code != http.StatusOK || out["run"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}

	held.Store(true)
	type answer struct {
		code int
		out  map[string]any
	}
	answered := make(chan answer, 1)
	body, err := json.Marshal(call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var a answer
		resp, err := http.Post(f.url+"/api/update_task", "application/json", bytes.NewReader(body))
		if err == nil {
			a.code = resp.StatusCode
			_ = json.NewDecoder(resp.Body).Decode(&a.out)
			resp.Body.Close()
		}
		answered <- a
	}()
	<-entered // the writer holds the update's record
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("update_task holds %d tokens while it waits for its journal record", pool.Stats().InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case a := <-answered:
		close(release)
		t.Fatalf("update_task answered (%d %v) before its record was written", a.code, a.out)
	case <-time.After(50 * time.Millisecond):
	}
	held.Store(false)
	close(release)
	if a := <-answered; a.code != http.StatusOK || a.out["task_alive"] != true {
		t.Fatalf("update_task once its record is written: %d %v", a.code, a.out)
	}
}
