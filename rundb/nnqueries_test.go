package rundb_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// insertNets stores networks uploaded a day apart in the order given, starting 2026-01-01.
func insertNets(t *testing.T, db *rundb.DB, nets ...*rundb.NN) {
	t.Helper()
	start := at("2026-01-01T00:00:00Z")
	for i, n := range nets {
		if n.Extra == nil {
			n.Extra = rundb.Extra{}
		}
		n.Extra["_id"] = bson.NewObjectIDFromTimestamp(start.Add(time.Duration(i) * 24 * time.Hour))
		if err := db.NNs.Insert(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

func tested(date string, id string) bson.D {
	return bson.D{{Key: "date", Value: at(date)}, {Key: "id", Value: id}}
}

func netNames(nets []rundb.NNInfo) []string {
	names := make([]string, len(nets))
	for i, n := range nets {
		names[i] = n.Name
	}
	return names
}

func sampleNets() []*rundb.NN {
	return []*rundb.NN{
		{Name: "nn-000000000001.nnue", User: "Alice", Downloads: 5, IsMaster: true, Extra: rundb.Extra{
			"first_test": tested("2026-02-01T00:00:00Z", "aaaaaaaaaaaaaaaaaaaaaaaa"),
			"last_test":  tested("2026-03-01T00:00:00Z", "bbbbbbbbbbbbbbbbbbbbbbbb"),
		}},
		{Name: "nn-000000000002.nnue", User: "bob", Downloads: 1},
		{Name: "nn-abc000000003.nnue", User: "alice", Downloads: 10, Extra: rundb.Extra{
			"first_test": tested("2026-01-15T00:00:00Z", "cccccccccccccccccccccccc"),
			"last_test":  tested("2026-01-20T00:00:00Z", "cccccccccccccccccccccccc"),
		}},
		{Name: "nn-000000000004.nnue", User: "carol", Downloads: 0, IsMaster: true, Extra: rundb.Extra{
			"first_test": tested("2026-04-01T00:00:00Z", "dddddddddddddddddddddddd"),
			"last_test":  tested("2026-04-02T00:00:00Z", "dddddddddddddddddddddddd"),
		}},
	}
}

func TestNNListFiltersAndSorts(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	insertNets(t, db, sampleNets()...)
	cases := []struct {
		name   string
		filter rundb.NNFilter
		key    string
		desc   bool
		skip   int
		limit  int
		want   []string
	}{
		{"newest first", rundb.NNFilter{}, "time", true, 0, 0,
			[]string{"nn-000000000004.nnue", "nn-abc000000003.nnue", "nn-000000000002.nnue", "nn-000000000001.nnue"}},
		{"oldest first", rundb.NNFilter{}, "time", false, 0, 0,
			[]string{"nn-000000000001.nnue", "nn-000000000002.nnue", "nn-abc000000003.nnue", "nn-000000000004.nnue"}},
		{"most downloaded first", rundb.NNFilter{}, "downloads", true, 0, 0,
			[]string{"nn-abc000000003.nnue", "nn-000000000001.nnue", "nn-000000000002.nnue", "nn-000000000004.nnue"}},
		{"by name", rundb.NNFilter{}, "name", false, 0, 0,
			[]string{"nn-000000000001.nnue", "nn-000000000002.nnue", "nn-000000000004.nnue", "nn-abc000000003.nnue"}},
		{"by last test, untested last", rundb.NNFilter{}, "last_test", true, 0, 0,
			[]string{"nn-000000000004.nnue", "nn-000000000001.nnue", "nn-abc000000003.nnue", "nn-000000000002.nnue"}},
		{"by first test", rundb.NNFilter{}, "first_test", false, 0, 0,
			[]string{"nn-000000000002.nnue", "nn-abc000000003.nnue", "nn-000000000001.nnue", "nn-000000000004.nnue"}},
		{"a page", rundb.NNFilter{}, "time", true, 1, 2,
			[]string{"nn-abc000000003.nnue", "nn-000000000002.nnue"}},
		{"a user, any case, as a substring", rundb.NNFilter{User: "LIC"}, "time", false, 0, 0,
			[]string{"nn-000000000001.nnue", "nn-abc000000003.nnue"}},
		{"a name substring", rundb.NNFilter{Name: "ABC"}, "time", false, 0, 0,
			[]string{"nn-abc000000003.nnue"}},
		{"regexp characters match themselves", rundb.NNFilter{Name: ".*"}, "time", false, 0, 0,
			[]string{}},
		{"master nets only", rundb.NNFilter{MasterOnly: true}, "time", false, 0, 0,
			[]string{"nn-000000000001.nnue", "nn-000000000004.nnue"}},
		{"every filter at once", rundb.NNFilter{MasterOnly: true, User: "car", Name: "0004"}, "time", false, 0, 0,
			[]string{"nn-000000000004.nnue"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nets, err := db.NNs.List(ctx, c.filter, c.key, c.desc, c.skip, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := netNames(nets); !reflect.DeepEqual(got, c.want) {
				t.Errorf("List = %v, want %v", got, c.want)
			}
		})
	}
	if _, err := db.NNs.List(ctx, rundb.NNFilter{}, "password", false, 0, 0); err == nil {
		t.Error("List accepted an unknown sort key")
	}
}

func TestNNListReadsEveryField(t *testing.T) {
	db := rundbtest.Open(t)
	insertNets(t, db, sampleNets()...)
	nets, err := db.NNs.List(context.Background(), rundb.NNFilter{Name: "000000000001"}, "time", false, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := rundb.NNInfo{
		Name: "nn-000000000001.nnue", User: "Alice", Downloads: 5, IsMaster: true,
		Uploaded:  at("2026-01-01T00:00:00Z"),
		FirstTest: &rundb.NNTest{Date: at("2026-02-01T00:00:00Z"), ID: "aaaaaaaaaaaaaaaaaaaaaaaa"},
		LastTest:  &rundb.NNTest{Date: at("2026-03-01T00:00:00Z"), ID: "bbbbbbbbbbbbbbbbbbbbbbbb"},
	}
	if len(nets) != 1 || !reflect.DeepEqual(nets[0], want) {
		t.Errorf("List = %+v, want [%+v]", nets, want)
	}
}

func TestNNSummary(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	empty, err := db.NNs.Summary(ctx, rundb.NNFilter{})
	if err != nil || empty != (rundb.NNSummary{}) {
		t.Fatalf("Summary of nothing = %+v, %v; want zeros", empty, err)
	}
	insertNets(t, db, sampleNets()...)
	for _, c := range []struct {
		name   string
		filter rundb.NNFilter
		want   rundb.NNSummary
	}{
		// "Alice" and "alice" are different users, as usernames are case-sensitive.
		{"all", rundb.NNFilter{}, rundb.NNSummary{Nets: 4, MasterNets: 2, Contributors: 4, Downloads: 16}},
		{"filtered", rundb.NNFilter{User: "alice"}, rundb.NNSummary{Nets: 2, MasterNets: 1, Contributors: 2, Downloads: 15}},
		{"master only", rundb.NNFilter{MasterOnly: true}, rundb.NNSummary{Nets: 2, MasterNets: 2, Contributors: 2, Downloads: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := db.NNs.Summary(ctx, c.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("Summary = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestNNDelete(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	insertNets(t, db, sampleNets()...)
	if err := db.NNs.Delete(ctx, "nn-000000000002.nnue"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NNs.Get(ctx, "nn-000000000002.nnue"); err == nil {
		t.Error("the network is still there")
	}
	if err := db.NNs.Delete(ctx, "nn-ffffffffffff.nnue"); err != nil {
		t.Errorf("deleting an unknown network: %v", err)
	}
	if sum, err := db.NNs.Summary(ctx, rundb.NNFilter{}); err != nil || sum.Nets != 3 {
		t.Errorf("Summary = %+v, %v; want 3 nets left", sum, err)
	}
}
