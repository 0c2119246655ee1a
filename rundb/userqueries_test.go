package rundb_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func usernames(us []*rundb.User) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Username
	}
	return out
}

func TestUserQueriesTakenAndProfile(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "Alice", Password: "pw", Email: "alice@example.org"})

	for _, tc := range []struct {
		name, email     string
		nameIn, emailIn bool
	}{
		{"alice", "", true, false},
		{"ALICE", "x@example.org", true, false},
		{"bob", "Alice@Example.org", false, true},
		{"bob", "bob@example.org", false, false},
		{"Ali", "alice@example", false, false},
		{"A.ice", "", false, false}, // a pattern character matches only itself
	} {
		n, e, err := db.Users.Taken(ctx, tc.name, tc.email)
		if err != nil || n != tc.nameIn || e != tc.emailIn {
			t.Errorf("Taken(%q, %q) = %v, %v, %v; want %v, %v", tc.name, tc.email, n, e, err, tc.nameIn, tc.emailIn)
		}
	}

	if err := db.Users.SetProfile(ctx, "Alice", "new@example.org", "https://github.com/alice/Stockfish"); err != nil {
		t.Fatal(err)
	}
	u, err := db.Users.Get(ctx, "Alice")
	if err != nil || u.Email != "new@example.org" || u.TestsRepo != "https://github.com/alice/Stockfish" {
		t.Fatalf("after SetProfile: %+v, %v", u, err)
	}
	if err := db.Users.SetProfile(ctx, "nobody", "a@b.org", ""); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("SetProfile of a missing user: %v, want ErrNotFound", err)
	}
}

func TestUserQueriesDeletePending(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "pend", Password: "pw"})
	mustCreateUser(t, db, rundb.NewUser{Username: "ok", Password: "pw", Accepted: true})

	if err := db.Users.DeletePending(ctx, "ok"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("deleting an accepted user: %v, want ErrNotFound", err)
	}
	if _, err := db.Users.Get(ctx, "ok"); err != nil {
		t.Errorf("the accepted user is gone: %v", err)
	}
	if err := db.Users.DeletePending(ctx, "pend"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Get(ctx, "pend"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("the pending user is still there: %v", err)
	}
}

func TestUserQueriesListUsers(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "carl", Password: "pw", Accepted: true, Email: "z@example.org"})
	mustCreateUser(t, db, rundb.NewUser{Username: "anna", Password: "pw", Accepted: true, Approver: true, Email: "y@example.org"})
	mustCreateUser(t, db, rundb.NewUser{Username: "bert", Password: "pw", Email: "x@example.org"})
	mustCreateUser(t, db, rundb.NewUser{Username: "dora", Password: "pw", Accepted: true, Email: "w@example.org"})
	if err := db.Users.SetBlocked(ctx, "dora", true); err != nil {
		t.Fatal(err)
	}
	if err := db.UserCache.Put(ctx, &rundb.UserStats{Username: "carl", CPUHours: 1}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		q     rundb.UserQuery
		want  []string
		total int
	}{
		{rundb.UserQuery{}, []string{"anna", "bert", "carl", "dora"}, 4},
		{rundb.UserQuery{Group: rundb.UsersPending}, []string{"bert"}, 1},
		{rundb.UserQuery{Group: rundb.UsersBlocked}, []string{"dora"}, 1},
		{rundb.UserQuery{Group: rundb.UsersApprovers}, []string{"anna"}, 1},
		{rundb.UserQuery{Group: rundb.UsersIdle}, []string{"anna", "bert", "dora"}, 3},
		{rundb.UserQuery{Sort: "email"}, []string{"dora", "bert", "anna", "carl"}, 4},
		{rundb.UserQuery{Sort: "username", Desc: true, Skip: 1, Limit: 2}, []string{"carl", "bert"}, 4},
		{rundb.UserQuery{Search: "R"}, []string{"bert", "carl", "dora"}, 3},
		{rundb.UserQuery{Group: rundb.UsersIdle, Search: "a", Limit: 1}, []string{"anna"}, 2},
	} {
		t.Run(fmt.Sprintf("%+v", tc.q), func(t *testing.T) {
			us, n, err := db.ListUsers(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := usernames(us); !slices.Equal(got, tc.want) || n != tc.total {
				t.Errorf("got %v of %d, want %v of %d", got, n, tc.want, tc.total)
			}
			for _, u := range us {
				if u.PasswordHash != "" || u.Password != "" {
					t.Errorf("%s listed with a password", u.Username)
				}
			}
		})
	}
	if _, _, err := db.ListUsers(ctx, rundb.UserQuery{Group: "friends"}); !errors.Is(err, rundb.ErrInvalid) {
		t.Errorf("unknown group: %v, want ErrInvalid", err)
	}
	if _, _, err := db.ListUsers(ctx, rundb.UserQuery{Sort: "password"}); !errors.Is(err, rundb.ErrInvalid) {
		t.Errorf("unknown sort: %v, want ErrInvalid", err)
	}

	c, err := db.CountUserGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c != (rundb.UserGroupCounts{Pending: 1, Blocked: 1, Idle: 3, Approvers: 1, All: 4}) {
		t.Errorf("counts %+v", c)
	}
	if n, err := db.Users.CountPending(ctx); err != nil || n != 1 {
		t.Errorf("CountPending = %d, %v", n, err)
	}
}

func TestUserQueriesContributors(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, name := range []string{"amy", "ben", "cat", "dan", "eva"} {
		// ben and cat tie on cpu_hours.
		hours := []float64{50, 30, 30, 10, 70}[i]
		st := &rundb.UserStats{Username: name, CPUHours: hours, Games: 100 * (i + 1), Tests: i,
			LastUpdated: now.Add(time.Duration(i) * time.Hour)}
		if err := db.UserCache.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.MonthlyContributors().Put(ctx, &rundb.UserStats{Username: "ben", CPUHours: 1}); err != nil {
		t.Fatal(err)
	}

	byHours := rundb.ContributorQuery{Sort: "cpu_hours", Desc: true}
	order := []string{"eva", "amy", "ben", "cat", "dan"}
	list, n, err := db.UserCache.List(ctx, byHours)
	if err != nil || n != 5 {
		t.Fatalf("List: %d, %v", n, err)
	}
	var got []string
	for _, st := range list {
		got = append(got, st.Username)
	}
	if !slices.Equal(got, order) {
		t.Errorf("by cpu hours: %v, want %v", got, order)
	}
	page, _, err := db.UserCache.List(ctx, rundb.ContributorQuery{Sort: "games", Skip: 1, Limit: 2})
	if err != nil || len(page) != 2 || page[0].Username != "ben" || page[1].Username != "cat" {
		t.Errorf("games ascending, page 2 of 2: %v, %v", page, err)
	}
	for i, name := range order {
		if r, err := db.UserCache.Rank(ctx, byHours, name); err != nil || r != i {
			t.Errorf("Rank(%s) = %d, %v; want %d", name, r, err, i)
		}
	}
	if r, err := db.UserCache.Rank(ctx, rundb.ContributorQuery{Sort: "username", Desc: true}, "dan"); err != nil || r != 1 {
		t.Errorf("Rank(dan) by name descending = %d, %v; want 1", r, err)
	}
	if r, err := db.UserCache.Rank(ctx, rundb.ContributorQuery{Sort: "last_updated"}, "cat"); err != nil || r != 2 {
		t.Errorf("Rank(cat) by last update = %d, %v; want 2", r, err)
	}
	if _, err := db.UserCache.Rank(ctx, byHours, "zed"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Rank of a stranger: %v", err)
	}

	for search, want := range map[string]string{"AMY": "amy", "a": "eva", "at": "cat"} {
		if got, err := db.UserCache.Find(ctx, byHours, search); err != nil || got != want {
			t.Errorf("Find(%q) = %q, %v; want %q", search, got, err, want)
		}
	}
	if _, err := db.UserCache.Find(ctx, byHours, "zz"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Find(zz): %v", err)
	}

	tot, err := db.UserCache.Totals(ctx)
	if err != nil || tot.Contributors != 5 || tot.CPUHours != 190 || tot.Games != 1500 || tot.Tests != 10 {
		t.Errorf("Totals = %+v, %v", tot, err)
	}
	monthly, n, err := db.MonthlyContributors().List(ctx, byHours)
	if err != nil || n != 1 || monthly[0].Username != "ben" {
		t.Errorf("monthly: %v of %d, %v", monthly, n, err)
	}
}

func TestUserQueriesBlockedWorkers(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	for _, w := range []*rundb.Worker{
		{WorkerName: "amy-8cores-aaaa", Blocked: true, Message: "first"},
		{WorkerName: "ben-4cores-bbbb", Blocked: false},
		{WorkerName: "cat-2cores-cccc", Blocked: true, Message: "second"},
	} {
		if err := db.Workers.Put(ctx, w); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	ws, err := db.Workers.Blocked(ctx)
	if err != nil || len(ws) != 2 || ws[0].WorkerName != "cat-2cores-cccc" || ws[1].WorkerName != "amy-8cores-aaaa" {
		t.Fatalf("Blocked = %+v, %v", ws, err)
	}
}

func TestUserQueriesActions(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	task := 3
	add := func(sec float64, a rundb.Action) {
		t.Helper()
		a.Time = sec
		if err := db.Actions.Insert(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	add(1, rundb.Action{Action: "new_run", Username: "amy", RunID: "r1", Run: "alpha", Message: "SPRT test"})
	add(2, rundb.Action{Action: "system_event", Username: "fishtest.system", Message: "started"})
	add(3, rundb.Action{Action: "dead_task", Username: "ben", RunID: "r1", Run: "alpha", TaskID: &task})
	add(4, rundb.Action{Action: "block_user", Username: "cat", User: "ben", Message: "blocked"})
	add(5, rundb.Action{Action: "stop_run", Username: "amy", RunID: "r2", Run: "beta", Message: "User stop"})
	add(6, rundb.Action{Action: "update_stats", Username: "fishtest.system"})
	add(7, rundb.Action{Action: "approve_run", Username: "cat", RunID: "r1", Run: "alpha", Message: "approved"})

	before := 5.0
	for _, tc := range []struct {
		name  string
		q     rundb.ActionQuery
		want  []float64
		total int
	}{
		{"default hides system events and dead tasks", rundb.ActionQuery{Desc: true}, []float64{7, 5, 4, 1}, 4},
		{"system events by name, with the old update_stats", rundb.ActionQuery{Desc: true, Action: "system_event"}, []float64{6, 2}, 2},
		{"dead tasks by name", rundb.ActionQuery{Desc: true, Action: "dead_task"}, []float64{3}, 1},
		{"by user", rundb.ActionQuery{Desc: true, Usernames: []string{"amy"}}, []float64{5, 1}, 2},
		{"by no user", rundb.ActionQuery{Desc: true, Usernames: []string{}}, nil, 0},
		{"by text, any case", rundb.ActionQuery{Desc: true, Text: "STOP"}, []float64{5}, 1},
		{"text is not a pattern", rundb.ActionQuery{Desc: true, Text: "S.RT"}, nil, 0},
		{"text in the run's name or the user acted on", rundb.ActionQuery{Desc: true, Text: "BET"}, []float64{5}, 1},
		{"text in the user acted on", rundb.ActionQuery{Desc: true, Text: "ben"}, []float64{4}, 1},
		{"by run", rundb.ActionQuery{Desc: true, RunID: "r1"}, []float64{7, 1}, 2},
		{"before", rundb.ActionQuery{Desc: true, Before: &before}, []float64{5, 4, 1}, 3},
		{"oldest first", rundb.ActionQuery{Sort: "time"}, []float64{1, 4, 5, 7}, 4},
		{"by event", rundb.ActionQuery{Sort: "event"}, []float64{7, 4, 1, 5}, 4},
		{"by source, descending", rundb.ActionQuery{Sort: "source", Desc: true}, []float64{7, 4, 5, 1}, 4},
		{"by comment", rundb.ActionQuery{Sort: "comment"}, []float64{1, 5, 7, 4}, 4},
		{"a page", rundb.ActionQuery{Desc: true, Skip: 1, Limit: 2}, []float64{5, 4}, 4},
		{"capped", rundb.ActionQuery{Desc: true, Max: 2}, []float64{7, 5}, 2},
		{"capped, sorted within the cap", rundb.ActionQuery{Sort: "event", Max: 3}, []float64{7, 4, 5}, 3},
		{"capped, past the cap", rundb.ActionQuery{Desc: true, Max: 2, Skip: 2}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acts, err := db.Actions.Query(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			n, err := db.Actions.Count(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			for _, a := range acts {
				got = append(got, a.Time)
			}
			if !slices.Equal(got, tc.want) || n != tc.total {
				t.Errorf("got %v of %d, want %v of %d", got, n, tc.want, tc.total)
			}
		})
	}
	if _, err := db.Actions.Query(ctx, rundb.ActionQuery{Sort: "weather"}); !errors.Is(err, rundb.ErrInvalid) {
		t.Errorf("unknown sort: %v", err)
	}
	names, err := db.Actions.Usernames(ctx)
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"amy", "ben", "cat", "fishtest.system"}) {
		t.Errorf("Usernames = %v, %v", names, err)
	}
}
