package rundb_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// at returns a UTC time with millisecond precision, what BSON datetimes keep.
func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC().Truncate(time.Millisecond)
}

func intp(i int) *int           { return &i }
func floatp(f float64) *float64 { return &f }

func sampleWorkerInfo() rundb.WorkerInfo { return rundbtest.SampleWorkerInfo() }

func sampleRun() *rundb.Run { return rundbtest.SampleRun() }

func TestRunRoundTripKeepsFishtestShape(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	want := sampleRun()
	if err := db.Runs.Insert(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := db.Runs.Get(ctx, want.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the run:\n got %+v\nwant %+v", got, want)
	}
	if got.StartTime.Location() != time.UTC {
		t.Errorf("start_time comes back in %v, want UTC", got.StartTime.Location())
	}

	// What fishtest reads: the stored document, field by field.
	raw, err := rundbtest.Collection(t, db, "runs").FindOne(ctx, bson.M{"_id": bson.ObjectID(want.ID)}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path []string
		typ  bson.Type
	}{
		{[]string{"_id"}, bson.TypeObjectID},
		{[]string{"start_time"}, bson.TypeDateTime},
		{[]string{"last_updated"}, bson.TypeDateTime},
		{[]string{"args", "priority"}, bson.TypeDouble},
		{[]string{"args", "throughput"}, bson.TypeDouble},
		{[]string{"args", "sprt", "overshoot"}, bson.TypeEmbeddedDocument},
		{[]string{"tasks", "1", "spsa_params", "packed_flips"}, bson.TypeBinary},
		{[]string{"tasks", "0", "last_updated"}, bson.TypeDateTime},
		{[]string{"bad_tasks", "0", "residual"}, bson.TypeDouble},
		{[]string{"results", "pentanomial"}, bson.TypeArray},
	} {
		v, err := raw.LookupErr(c.path...)
		if err != nil {
			t.Errorf("stored run lacks %v: %v", c.path, err)
		} else if v.Type != c.typ {
			t.Errorf("%v stored as %v, want %v", c.path, v.Type, c.typ)
		}
	}
	for _, absent := range [][]string{{"args", "sprt", "lost_samples"}, {"tasks", "1", "bad"}, {"tasks", "0", "residual"}} {
		if _, err := raw.LookupErr(absent...); err == nil {
			t.Errorf("stored run has %v; fishtest's shape leaves it out", absent)
		}
	}
}

func TestRunReplaceKeepsUnknownFields(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	coll := rundbtest.Collection(t, db, "runs")
	id := bson.NewObjectID()
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "version", Value: int32(24)},
		{Key: "start_time", Value: bson.NewDateTimeFromTime(at("2026-10-01T00:00:00Z"))},
		{Key: "last_updated", Value: bson.NewDateTimeFromTime(at("2026-10-01T01:00:00Z"))},
		{Key: "tc_base", Value: 10.0}, {Key: "approved", Value: true}, {Key: "approver", Value: "bob"},
		{Key: "finished", Value: false}, {Key: "deleted", Value: false}, {Key: "failed", Value: false},
		{Key: "failures", Value: int32(0)}, {Key: "is_green", Value: false}, {Key: "is_yellow", Value: false},
		{Key: "workers", Value: int32(0)}, {Key: "cores", Value: int32(0)},
		{Key: "committed_games", Value: int32(0)}, {Key: "total_games", Value: int32(0)},
		{Key: "results", Value: bson.D{{Key: "wins", Value: int32(0)}, {Key: "losses", Value: int32(0)},
			{Key: "draws", Value: int32(0)}, {Key: "crashes", Value: int32(0)}, {Key: "time_losses", Value: int32(0)},
			{Key: "pentanomial", Value: bson.A{int32(0), int32(0), int32(0), int32(0), int32(0)}}}},
		{Key: "nps", Value: 0.0}, {Key: "games_per_minute", Value: 0.0},
		{Key: "args", Value: bson.D{{Key: "tc", Value: "10+0.1"}, {Key: "num_games", Value: int32(1000)},
			{Key: "priority", Value: 0.0}, {Key: "a_future_arg", Value: "kept"}}},
		{Key: "tasks", Value: bson.A{}}, {Key: "bad_tasks", Value: bson.A{}},
		{Key: "a_future_field", Value: bson.D{{Key: "nested", Value: int32(7)}}},
	}
	if _, err := coll.InsertOne(ctx, doc); err != nil {
		t.Fatal(err)
	}
	run, err := db.Runs.Get(ctx, rundb.ObjectID(id))
	if err != nil {
		t.Fatal(err)
	}
	run.Args.Priority = 1
	if err := db.Runs.Replace(ctx, run); err != nil {
		t.Fatal(err)
	}
	raw, err := coll.FindOne(ctx, bson.M{"_id": id}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := raw.LookupErr("a_future_field", "nested"); err != nil || v.Int32() != 7 {
		t.Errorf("unknown top-level field became %v (%v)", v, err)
	}
	if v, err := raw.LookupErr("args", "a_future_arg"); err != nil || v.StringValue() != "kept" {
		t.Errorf("unknown args field became %v (%v)", v, err)
	}
	if v := raw.Lookup("args", "priority"); v.Type != bson.TypeDouble || v.Double() != 1 {
		t.Errorf("priority = %v, want 1.0 (a float, as fishtest stores it)", v)
	}
}

func TestRunStoreErrors(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	if _, err := db.Runs.Get(ctx, rundb.NewObjectID()); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Get of a missing run: %v, want ErrNotFound", err)
	}
	if err := db.Runs.Replace(ctx, &rundb.Run{ID: rundb.NewObjectID()}); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Replace of a missing run: %v, want ErrNotFound", err)
	}
	r := sampleRun()
	if err := db.Runs.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := db.Runs.Insert(ctx, r); !errors.Is(err, rundb.ErrConflict) {
		t.Errorf("second Insert of the same run: %v, want ErrConflict", err)
	}
}

func TestUnfinishedRuns(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	var want []rundb.ObjectID
	for i, finished := range []bool{false, true, false} {
		r := &rundb.Run{ID: rundb.NewObjectID(), Finished: finished, Args: rundb.RunArgs{Info: string(rune('a' + i))}}
		if err := db.Runs.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		if !finished {
			want = append(want, r.ID)
		}
	}
	runs, err := db.Runs.Unfinished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []rundb.ObjectID
	for _, r := range runs {
		got = append(got, r.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Unfinished = %v, want %v", got, want)
	}
}

func TestEnsureIndexesTwice(t *testing.T) {
	db := rundbtest.Open(t) // creates them once
	ctx := context.Background()
	rep, err := db.EnsureIndexes(ctx)
	if err != nil {
		t.Fatalf("second EnsureIndexes: %v", err)
	}
	t.Logf("degraded: %+v", rep)
	// The unique indexes everywhere; the others only where queries use them: not on the
	// embedded database, whose queries use no index but _id's, while each index costs a parse
	// of the whole document on every write.
	unique := map[string][]string{"users": {"username_1"}, "workers": {"worker_name_1"}}
	others := map[string][]string{
		"runs":    {"unfinished_runs", "finished_runs", "finished_green_runs", "finished_yellow_runs", "finished_ltc_runs", "user_runs", "finished_user_runs"},
		"actions": {"actions_time_id", "actions_user_time_id", "actions_action_time_id", "actions_run_time_id"},
		"pgns":    {"run_id_1"},
		"nns":     {"name_1"},
	}
	check := func(want map[string][]string, present bool) {
		for coll, names := range want {
			have, err := db.IndexNames(ctx, coll)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if slices.Contains(have, n) != present {
					t.Errorf("collection %s: index %s present %v, want %v (has %v)", coll, n, !present, present, have)
				}
			}
		}
	}
	check(unique, true)
	ferret := len(rep.NotOnEmbedded) > 0 // the embedded database; MongoDB with SHOAL_TEST_MONGO_URI
	check(others, !ferret)
	if ferret && len(rep.NotOnEmbedded) != 19 {
		t.Errorf("%d indexes left out on the embedded database, want all 19 but the two unique ones: %v", len(rep.NotOnEmbedded), rep.NotOnEmbedded)
	}
	if ferret {
		// A database an older Shoal indexed loses the indexes that only cost writes.
		runs := rundbtest.Collection(t, db, "runs")
		if _, err := runs.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "args.username", Value: 1}, {Key: "last_updated", Value: 1}},
			Options: options.Index().SetName("user_runs")}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		check(map[string][]string{"runs": {"user_runs"}}, false)
	}
	// The unique indexes hold.
	if _, err := db.Workers.Get(ctx, "w"); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("Get of a missing worker: %v", err)
	}
	coll := rundbtest.Collection(t, db, "workers")
	if _, err := coll.InsertOne(ctx, bson.M{"worker_name": "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.M{"worker_name": "w"}); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("duplicate worker_name accepted: %v", err)
	}
}
