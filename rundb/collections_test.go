package rundb_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestActions(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	long := strings.Repeat("x", 6000)
	for i, a := range []*rundb.Action{
		{Action: "new_run", Username: "alice", RunID: "6b02abe9707638b5fd2b68ca", Run: "patch-abcdef0", Message: "new"},
		{Action: "failed_task", Username: "bob", Worker: "bob-8cores-ab12cd34-5a28", TaskID: intp(0), Message: long},
		{Action: "system_event", Username: "fishtest.system", Message: "start"},
	} {
		a.Time = float64(1700000000 + i)
		if err := db.Actions.Insert(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.Actions.Find(ctx, rundb.ActionFilter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range all {
		kinds = append(kinds, a.Action)
	}
	if want := []string{"system_event", "failed_task", "new_run"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("Recent = %v, want newest first %v", kinds, want)
	}
	if got := len(all[1].Message); got != 5120 {
		t.Errorf("a 6000-character message was stored with %d characters, want 5120", got)
	}
	if all[1].TaskID == nil || *all[1].TaskID != 0 {
		t.Errorf("task_id 0 did not survive: %v", all[1].TaskID)
	}
	failed, err := db.Actions.Find(ctx, rundb.ActionFilter{Action: "failed_task"}, 10)
	if err != nil || len(failed) != 1 || failed[0].Worker != "bob-8cores-ab12cd34-5a28" {
		t.Errorf("Recent(failed_task) = %v, %v", failed, err)
	}
}

func TestWorkers(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	if _, err := db.Workers.Get(ctx, "bob-8cores-ab12cd34"); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("unknown worker: %v", err)
	}
	w := &rundb.Worker{WorkerName: "bob-8cores-ab12cd34", Blocked: true, Message: strings.Repeat("m", 600)}
	if err := db.Workers.Put(ctx, w); err != nil {
		t.Fatal(err)
	}
	w.Blocked = false
	if err := db.Workers.Put(ctx, w); err != nil { // replaces, despite the unique index
		t.Fatal(err)
	}
	got, err := db.Workers.Get(ctx, "bob-8cores-ab12cd34")
	if err != nil {
		t.Fatal(err)
	}
	if got.Blocked || len(got.Message) != 500 || got.LastUpdated.IsZero() {
		t.Errorf("worker = blocked %v, message %d chars, last_updated %v", got.Blocked, len(got.Message), got.LastUpdated)
	}
}

func TestKVStore(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	var out map[string]map[string]bool
	if err := db.KV.Get(ctx, "worker_runs", &out); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	in := map[string]map[string]bool{"bob-8cores-ab12cd34": {"6b02abe9707638b5fd2b68ca": true}}
	if err := db.KV.Put(ctx, "worker_runs", in); err != nil {
		t.Fatal(err)
	}
	if err := db.KV.Put(ctx, "worker_runs", in); err != nil {
		t.Fatal(err)
	}
	if err := db.KV.Get(ctx, "worker_runs", &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("Get = %v, %v; want %v", out, err, in)
	}
}

func TestPGNsNNsAndUserStats(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	p := &rundb.PGN{RunID: "6b02abe9707638b5fd2b68ca-3", PGNZip: []byte{0x1f, 0x8b, 8, 0}, Size: 4}
	if err := db.PGNs.Insert(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, err := db.PGNs.Get(ctx, p.RunID); err != nil || !reflect.DeepEqual(got, p) {
		t.Errorf("PGN = %+v, %v", got, err)
	}
	if _, err := db.PGNs.Get(ctx, "6b02abe9707638b5fd2b68ca-4"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("missing PGN: %v", err)
	}
	n := &rundb.NN{Name: "nn-0123456789ab.nnue", User: "alice"}
	if err := db.NNs.Insert(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got, err := db.NNs.Get(ctx, n.Name); err != nil || got.User != "alice" {
		t.Errorf("NN = %+v, %v", got, err)
	}
	if _, err := db.UserCache.Get(ctx, "alice"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("missing stats: %v", err)
	}
	if err := db.UserCache.Put(ctx, &rundb.UserStats{Username: "alice", CPUHours: 1500}); err != nil {
		t.Fatal(err)
	}
	if err := db.UserCache.Put(ctx, &rundb.UserStats{Username: "alice", CPUHours: 2000}); err != nil {
		t.Fatal(err)
	}
	if got, err := db.UserCache.Get(ctx, "alice"); err != nil || got.CPUHours != 2000 {
		t.Errorf("stats = %+v, %v; want cpu_hours 2000", got, err)
	}
}
