package rundb_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// finishedRun is a finished run updated at the given time, with optional changes.
func finishedRun(updated time.Time, change func(*rundb.Run)) *rundb.Run {
	r := sampleRun()
	r.Finished, r.Workers, r.Cores = true, 0, 0
	r.LastUpdated = updated
	for i := range r.Tasks {
		r.Tasks[i].Active = false
	}
	if change != nil {
		change(r)
	}
	return r
}

func runIDs(runs []*rundb.Run) []rundb.ObjectID {
	ids := make([]rundb.ObjectID, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

func TestActiveRunsLeaveOutTasksAndHistory(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	active := sampleRun()
	done := finishedRun(at("2026-11-02T00:00:00Z"), nil)
	for _, r := range []*rundb.Run{active, done} {
		if err := db.Runs.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := db.Runs.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != active.ID {
		t.Fatalf("Active = %v, want only %v", runIDs(runs), active.ID)
	}
	got := runs[0]
	if got.Tasks != nil || got.BadTasks != nil {
		t.Errorf("Active returned %d tasks and %d bad tasks, want none", len(got.Tasks), len(got.BadTasks))
	}
	if got.Args.SPSA == nil || got.Args.SPSA.ParamHistory != nil {
		t.Errorf("Active returned SPSA %+v, want the parameters without param_history", got.Args.SPSA)
	}
	if got.Args.SPSA != nil && !reflect.DeepEqual(got.Args.SPSA.Params, active.Args.SPSA.Params) {
		t.Errorf("Active lost the SPSA parameters: %+v", got.Args.SPSA.Params)
	}
	if !reflect.DeepEqual(got.Results, active.Results) {
		t.Errorf("Active results = %+v, want %+v", got.Results, active.Results)
	}
}

func TestFinishedRunsFilterSortAndPage(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	base := at("2026-10-01T00:00:00Z")
	hour := func(h int) time.Time { return base.Add(time.Duration(h) * time.Hour) }
	// Named runs, inserted out of time order so that sorting is what orders them.
	runs := map[string]*rundb.Run{
		"alice green": finishedRun(hour(5), func(r *rundb.Run) { r.IsGreen = true }),
		"alice ltc":   finishedRun(hour(1), func(r *rundb.Run) { r.TCBase = 60 }),
		"bob yellow": finishedRun(hour(3), func(r *rundb.Run) {
			r.IsYellow = true
			r.Args.Username = "bob"
		}),
		"bob plain": finishedRun(hour(4), func(r *rundb.Run) { r.Args.Username = "bob" }),
		"deleted":   finishedRun(hour(6), func(r *rundb.Run) { r.Deleted = true; r.IsGreen = true }),
		"unfinished": func() *rundb.Run {
			r := sampleRun()
			r.LastUpdated = hour(7)
			return r
		}(),
	}
	for _, name := range []string{"bob plain", "alice ltc", "deleted", "alice green", "unfinished", "bob yellow"} {
		if err := db.Runs.Insert(ctx, runs[name]); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ids []rundb.ObjectID) []string {
		var out []string
		for _, id := range ids {
			for name, r := range runs {
				if r.ID == id {
					out = append(out, name)
				}
			}
		}
		return out
	}
	since := hour(3)
	for _, c := range []struct {
		name     string
		filter   rundb.FinishedFilter
		page     int
		pageSize int
		want     []string
	}{
		{"every finished undeleted run, newest first", rundb.FinishedFilter{}, 1, 50,
			[]string{"alice green", "bob plain", "bob yellow", "alice ltc"}},
		{"one user's runs", rundb.FinishedFilter{Username: "bob"}, 1, 50, []string{"bob plain", "bob yellow"}},
		{"green runs only", rundb.FinishedFilter{SuccessOnly: true}, 1, 50, []string{"alice green"}},
		{"yellow runs only", rundb.FinishedFilter{YellowOnly: true}, 1, 50, []string{"bob yellow"}},
		{"long time control only", rundb.FinishedFilter{LTCOnly: true}, 1, 50, []string{"alice ltc"}},
		{"updated since a time, inclusive", rundb.FinishedFilter{Since: &since}, 1, 50,
			[]string{"alice green", "bob plain", "bob yellow"}},
		{"user and flag together", rundb.FinishedFilter{Username: "alice", SuccessOnly: true}, 1, 50, []string{"alice green"}},
		{"first page of two", rundb.FinishedFilter{}, 1, 2, []string{"alice green", "bob plain"}},
		{"second page of two", rundb.FinishedFilter{}, 2, 2, []string{"bob yellow", "alice ltc"}},
		{"a page past the end", rundb.FinishedFilter{}, 3, 2, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := db.Runs.Finished(ctx, c.filter, c.page, c.pageSize)
			if err != nil {
				t.Fatal(err)
			}
			if n := names(runIDs(got)); !reflect.DeepEqual(n, c.want) {
				t.Errorf("Finished = %v, want %v", n, c.want)
			}
			for _, r := range got {
				if r.Tasks != nil || r.BadTasks != nil || (r.Args.SPSA != nil && r.Args.SPSA.ParamHistory != nil) {
					t.Errorf("run %s came with tasks or SPSA history", r.ID)
				}
			}
		})
	}
	if _, err := db.Runs.Finished(ctx, rundb.FinishedFilter{}, 0, 50); err == nil {
		t.Error("Finished accepted page 0; pages count from 1")
	}
}

// Without the indexes the hints name, the queries still answer.
func TestQueriesWorkWithoutIndexes(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	for _, coll := range []string{"runs", "actions"} {
		if err := rundbtest.Collection(t, db, coll).Indexes().DropAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Runs.Insert(ctx, finishedRun(at("2026-10-01T00:00:00Z"), func(r *rundb.Run) { r.IsGreen = true })); err != nil {
		t.Fatal(err)
	}
	if err := db.Actions.Insert(ctx, &rundb.Action{Action: "new_run", Username: "alice"}); err != nil {
		t.Fatal(err)
	}
	if runs, err := db.Runs.Finished(ctx, rundb.FinishedFilter{SuccessOnly: true}, 1, 50); err != nil || len(runs) != 1 {
		t.Errorf("Finished without indexes = %d runs, %v", len(runs), err)
	}
	if _, err := db.Runs.Active(ctx); err != nil {
		t.Errorf("Active without indexes: %v", err)
	}
	if acts, err := db.Actions.Find(ctx, rundb.ActionFilter{Username: "alice"}, 10); err != nil || len(acts) != 1 {
		t.Errorf("Find without indexes = %d actions, %v", len(acts), err)
	}
}

func TestFindActions(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	runID := "6b02abe9707638b5fd2b68ca"
	seed := []*rundb.Action{
		{Time: 100, Action: "new_run", Username: "alice", RunID: runID, Run: "patch-abcdef0"},
		{Time: 200, Action: "failed_task", Username: "bob", RunID: runID, Run: "patch-abcdef0", TaskID: intp(3), Worker: "bob-8cores-ab12cd34-5a28"},
		{Time: 300, Action: "block_user", Username: "carol", User: "bob", Message: "blocked"},
		{Time: 400, Action: "upload_nn", Username: "alice", NN: "nn-0123456789ab.nnue"},
		{Time: 500, Action: "failed_task", Username: "bob", RunID: runID, TaskID: intp(0), Worker: "bob-8cores-ab12cd34-5a28"},
	}
	for _, a := range seed {
		if err := db.Actions.Insert(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	times := func(acts []*rundb.Action) []float64 {
		out := []float64{}
		for _, a := range acts {
			out = append(out, a.Time)
		}
		return out
	}
	fp := func(f float64) *float64 { return &f }
	for _, c := range []struct {
		name   string
		filter rundb.ActionFilter
		limit  int
		want   []float64
	}{
		{"everything, newest first", rundb.ActionFilter{}, 0, []float64{500, 400, 300, 200, 100}},
		{"the limit keeps the newest", rundb.ActionFilter{}, 2, []float64{500, 400}},
		{"by action", rundb.ActionFilter{Action: "failed_task"}, 0, []float64{500, 200}},
		{"by username", rundb.ActionFilter{Username: "alice"}, 0, []float64{400, 100}},
		{"by run id", rundb.ActionFilter{RunID: runID}, 0, []float64{500, 200, 100}},
		{"by run name", rundb.ActionFilter{Run: "patch-abcdef0"}, 0, []float64{200, 100}},
		{"by task id, zero included", rundb.ActionFilter{TaskID: intp(0)}, 0, []float64{500}},
		{"by worker", rundb.ActionFilter{Worker: "bob-8cores-ab12cd34-5a28"}, 0, []float64{500, 200}},
		{"by user acted on", rundb.ActionFilter{User: "bob"}, 0, []float64{300}},
		{"by network", rundb.ActionFilter{NN: "nn-0123456789ab.nnue"}, 0, []float64{400}},
		{"before, inclusive", rundb.ActionFilter{Before: fp(300)}, 0, []float64{300, 200, 100}},
		{"after, inclusive", rundb.ActionFilter{After: fp(300)}, 0, []float64{500, 400, 300}},
		{"a time window", rundb.ActionFilter{After: fp(150), Before: fp(450)}, 0, []float64{400, 300, 200}},
		{"several fields must all match", rundb.ActionFilter{Action: "failed_task", TaskID: intp(3)}, 0, []float64{200}},
		{"nothing matches", rundb.ActionFilter{Username: "nobody"}, 0, []float64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := db.Actions.Find(ctx, c.filter, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if g := times(got); !reflect.DeepEqual(g, c.want) {
				t.Errorf("Find = times %v, want %v", g, c.want)
			}
		})
	}
}

func TestListPGNsForRun(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	run := "6b02abe9707638b5fd2b68ca"
	// Task 10 must come after task 9, which a string sort would get wrong; other runs' PGNs,
	// including one whose id starts with this run's, must not appear.
	for _, id := range []string{run + "-10", run + "-2", run + "-9", run + "-0", run + "1-3", "other-1", run + "-x"} {
		data := []byte("gzip of " + id)
		if err := db.PGNs.Insert(ctx, &rundb.PGN{RunID: id, PGNZip: data, Size: len(data)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.PGNs.ListForRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []int
	for _, p := range got {
		tasks = append(tasks, p.TaskID)
		if want := fmt.Sprintf("%s-%d", run, p.TaskID); p.RunID != want || p.Size != len("gzip of "+want) {
			t.Errorf("PGN info %+v, want run_id %s and its size", p, want)
		}
	}
	if want := []int{0, 2, 9, 10}; !reflect.DeepEqual(tasks, want) {
		t.Errorf("ListForRun tasks = %v, want %v", tasks, want)
	}
	none, err := db.PGNs.ListForRun(ctx, "0123456789abcdef01234567")
	if err != nil || len(none) != 0 {
		t.Errorf("ListForRun of a run without PGNs = %v, %v; want empty", none, err)
	}
}

func TestCountNNDownload(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	if err := db.NNs.Insert(ctx, &rundb.NN{Name: "nn-0123456789ab.nnue", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := db.NNs.CountDownload(ctx, "nn-0123456789ab.nnue"); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.NNs.Get(ctx, "nn-0123456789ab.nnue")
	if err != nil || n.Downloads != 3 {
		t.Errorf("after 3 downloads: %+v, %v", n, err)
	}
	if err := db.NNs.CountDownload(ctx, "nn-ffffffffffff.nnue"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("CountDownload of an unknown network: %v, want ErrNotFound", err)
	}
}

func TestExtraPlain(t *testing.T) {
	id := bson.NewObjectID()
	when := at("2026-11-01T10:00:00.5Z")
	e := rundb.Extra{
		"doc":  bson.D{{Key: "when", Value: bson.NewDateTimeFromTime(when)}, {Key: "n", Value: int32(1)}},
		"list": bson.A{id, bson.Binary{Data: []byte{1, 2}}},
		"map":  map[string]any{},
		"s":    "kept",
	}
	want := map[string]any{
		"doc":  map[string]any{"when": when, "n": int32(1)},
		"list": []any{rundb.ObjectID(id), []byte{1, 2}},
		"map":  map[string]any{},
		"s":    "kept",
	}
	if got := e.Plain(); !reflect.DeepEqual(got, want) {
		t.Errorf("Plain = %#v\nwant %#v", got, want)
	}
	if got := rundb.Extra(nil).Plain(); got != nil {
		t.Errorf("Plain of no extra fields = %v, want nil", got)
	}
}
