package rundb_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestSearchFinishedRuns(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	base := at("2026-10-01T00:00:00Z")
	hour := func(h int) time.Time { return base.Add(time.Duration(h) * time.Hour) }
	runs := map[string]*rundb.Run{
		"alice green": finishedRun(hour(6), func(r *rundb.Run) { r.IsGreen = true; r.Args.Info = "Faster Search" }),
		"alice ltc":   finishedRun(hour(1), func(r *rundb.Run) { r.TCBase = 60; r.Args.Info = "LTC: search tweak" }),
		"bob yellow": finishedRun(hour(3), func(r *rundb.Run) {
			r.IsYellow, r.Args.Username, r.Args.Info = true, "bob", "eval (a+b)"
		}),
		"bobby plain": finishedRun(hour(4), func(r *rundb.Run) { r.Args.Username, r.Args.Info = "bobby", "nothing" }),
		"bob deleted": finishedRun(hour(5), func(r *rundb.Run) { r.Deleted, r.Args.Username = true, "bob" }),
		"unfinished":  sampleRun(),
	}
	ids := map[rundb.ObjectID]string{}
	for name, r := range runs {
		if err := db.Runs.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		ids[r.ID] = name
	}
	names := func(rs []*rundb.Run) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, ids[r.ID])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		search rundb.RunSearch
		want   []string
	}{
		{"everything finished and undeleted, newest first", rundb.RunSearch{},
			[]string{"alice green", "bobby plain", "bob yellow", "alice ltc"}},
		{"several users", rundb.RunSearch{Usernames: []string{"bob", "bobby"}}, []string{"bobby plain", "bob yellow"}},
		{"one user", rundb.RunSearch{Usernames: []string{"bob"}}, []string{"bob yellow"}},
		{"no user found matches nothing", rundb.RunSearch{Usernames: []string{}}, []string{}},
		{"text ignores case", rundb.RunSearch{Text: "search"}, []string{"alice green", "alice ltc"}},
		{"text is not a pattern", rundb.RunSearch{Text: "(a+b)"}, []string{"bob yellow"}},
		{"greens", rundb.RunSearch{SuccessOnly: true}, []string{"alice green"}},
		{"yellows", rundb.RunSearch{YellowOnly: true}, []string{"bob yellow"}},
		{"ltc", rundb.RunSearch{LTCOnly: true}, []string{"alice ltc"}},
		{"text and user together", rundb.RunSearch{Usernames: []string{"alice"}, Text: "tweak"}, []string{"alice ltc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.Runs.SearchFinished(ctx, tc.search, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(names(got), tc.want) {
				t.Errorf("SearchFinished = %v, want %v", names(got), tc.want)
			}
			for _, r := range got {
				if r.Tasks != nil {
					t.Errorf("run %s came with its tasks", ids[r.ID])
				}
			}
			n, err := db.Runs.CountFinished(ctx, tc.search, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tc.want) {
				t.Errorf("CountFinished = %d, want %d", n, len(tc.want))
			}
		})
	}

	t.Run("skip and limit page through", func(t *testing.T) {
		got, err := db.Runs.SearchFinished(ctx, rundb.RunSearch{}, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"bobby plain", "bob yellow"}; !reflect.DeepEqual(names(got), want) {
			t.Errorf("page = %v, want %v", names(got), want)
		}
	})
	t.Run("count stops at its limit", func(t *testing.T) {
		n, err := db.Runs.CountFinished(ctx, rundb.RunSearch{}, 3)
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Errorf("CountFinished with limit 3 = %d", n)
		}
	})
	t.Run("a bad page is refused", func(t *testing.T) {
		if _, err := db.Runs.SearchFinished(ctx, rundb.RunSearch{}, 0, 0); err == nil {
			t.Error("limit 0 accepted")
		}
	})
}

func TestUsernamesContaining(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	for _, name := range []string{"Rob", "bob", "bobby", "Jimbob", "alice"} {
		if _, err := db.Users.Create(ctx, rundb.NewUser{Username: name, Password: "secret-password", Email: name + "@example.org"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		part  string
		limit int
		want  []string
	}{
		{"BOB", 10, []string{"bob", "bobby", "Jimbob"}},
		{"ob", 10, []string{"Jimbob", "Rob", "bob", "bobby"}},
		{"bob", 2, []string{"bob", "bobby"}},
		{"zed", 10, []string{}},
		{".*", 10, []string{}},
		{"  ", 10, nil},
	} {
		got, err := db.Users.UsernamesContaining(ctx, tc.part, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("UsernamesContaining(%q, %d) = %v, want %v", tc.part, tc.limit, got, tc.want)
		}
	}
}
