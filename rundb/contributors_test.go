package rundb_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// statsRun returns a small run with one task by worker.
func statsRun(finished, deleted bool, lastUpdated time.Time, worker string, games int) *rundb.Run {
	return &rundb.Run{
		ID: rundb.NewObjectID(), Version: rundb.RunVersion, StartTime: lastUpdated.Add(-time.Hour),
		LastUpdated: lastUpdated, Finished: finished, Deleted: deleted, Results: rundb.NewResults(),
		Args: rundb.RunArgs{Username: "alice", TC: "10+0.1", Threads: 2, Book: "book.epd", NumGames: 100},
		Tasks: []rundb.Task{{NumGames: 100, LastUpdated: lastUpdated, Stats: rundb.Results{Wins: games, Pentanomial: []int{0, 0, 0, 0, 0}},
			WorkerInfo: rundb.WorkerInfo{Username: worker, Concurrency: 8, UniqueKey: "k"}}},
		BadTasks: []rundb.Task{},
	}
}

// EachFinished answers alike with one query (MongoDB) and paced, a run at a time (the embedded
// database's way, which the tests' database would take by itself).
func TestEachFinishedReadsStatsFieldsOfRunsFinishedSince(t *testing.T) {
	for _, mode := range []struct {
		name string
		duty float64
	}{{"one query", 0}, {"paced", 0.5}} {
		t.Run(mode.name, func(t *testing.T) {
			db := rundbtest.Open(t)
			rundb.SetScanDuty(db.Runs, mode.duty)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			old := statsRun(true, false, now.Add(-48*time.Hour), "carol", 1)
			recent := statsRun(true, false, now.Add(-time.Hour), "carol", 2)
			deleted := statsRun(true, true, now.Add(-30*time.Minute), "dave", 3)
			active := statsRun(false, false, now, "dave", 4)
			for _, r := range []*rundb.Run{old, recent, deleted, active} {
				if err := db.Runs.Insert(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			collect := func(since time.Time) []*rundb.Run {
				t.Helper()
				var out []*rundb.Run
				if err := db.Runs.EachFinished(ctx, since, func(r *rundb.Run) error { out = append(out, r); return nil }); err != nil {
					t.Fatal(err)
				}
				return out
			}
			got := collect(now.Add(-2 * time.Hour))
			if len(got) != 2 || got[0].ID != deleted.ID || got[1].ID != recent.ID {
				t.Fatalf("runs since two hours ago: %d, want the deleted and the recent run, newest first", len(got))
			}
			r := got[1]
			if !r.StartTime.Equal(recent.StartTime) || !r.LastUpdated.Equal(recent.LastUpdated) || !r.Finished ||
				r.Args.Username != "alice" || r.Args.TC != "10+0.1" || r.Args.Threads != 2 {
				t.Errorf("run fields: start %v updated %v finished %v args %+v", r.StartTime, r.LastUpdated, r.Finished, r.Args)
			}
			if len(r.Tasks) != 1 || r.Tasks[0].WorkerInfo.Username != "carol" || r.Tasks[0].Stats.Wins != 2 ||
				!r.Tasks[0].LastUpdated.Equal(recent.LastUpdated) {
				t.Errorf("task fields: %+v", r.Tasks)
			}
			if r.Args.Book != "" || r.Args.NumGames != 0 || r.Tasks[0].WorkerInfo.Concurrency != 0 || r.Tasks[0].NumGames != 0 {
				t.Errorf("fields statistics do not need were read: book %q num_games %d concurrency %d",
					r.Args.Book, r.Args.NumGames, r.Tasks[0].WorkerInfo.Concurrency)
			}
			if got := collect(time.Time{}); len(got) != 3 {
				t.Errorf("every finished run: %d, want 3", len(got))
			}
			stop := errors.New("stop")
			n := 0
			err := db.Runs.EachFinished(ctx, time.Time{}, func(*rundb.Run) error { n++; return stop })
			if !errors.Is(err, stop) || n != 1 {
				t.Errorf("an error from fn: %v after %d calls, want it returned after 1", err, n)
			}
		})
	}
}

func TestCreditedRunsKeepFishtestsDeltasShape(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	got, err := db.CreditedRuns(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("a new database: %v, %v; want none", got, err)
	}
	// A document as fishtest's script writes it: run IDs as keys, null values.
	deltas := rundbtest.Collection(t, db, "deltas")
	ids := []rundb.ObjectID{rundb.NewObjectID(), rundb.NewObjectID(), rundb.NewObjectID(), rundb.NewObjectID()}
	if _, err := deltas.InsertOne(ctx, bson.D{{Key: ids[0].Hex(), Value: nil}}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddCreditedRuns(ctx, ids[1:3]); err != nil {
		t.Fatal(err)
	}
	if err := db.AddCreditedRuns(ctx, ids[3:]); err != nil {
		t.Fatal(err)
	}
	if err := db.AddCreditedRuns(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err = db.CreditedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !got[id] {
			t.Errorf("run %s is not credited", id)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("%d credited runs, want %d", len(got), len(ids))
	}
	if n, err := deltas.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("deltas holds %d documents (%v); want the first one filled, as fishtest reads any number", n, err)
	}
}

func TestUserCacheAllDeleteAndTestsRepos(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	for _, name := range []string{"carol", "dave"} {
		if err := db.UserCache.Put(ctx, &rundb.UserStats{Username: name, Games: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.UserCache.Delete(ctx, "dave", "nobody"); err != nil {
		t.Fatal(err)
	}
	if err := db.UserCache.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := db.UserCache.All(ctx)
	if err != nil || len(all) != 1 || all[0].Username != "carol" {
		t.Errorf("after deleting dave: %v, %v; want carol alone", all, err)
	}
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "carol", Password: "secret-password", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetProfile(ctx, "carol", "c@example.org", "https://github.com/carol/Stockfish"); err != nil {
		t.Fatal(err)
	}
	repos, err := db.Users.TestsRepos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := slices.Sorted(maps.Keys(repos)); !slices.Equal(names, []string{"carol"}) || repos["carol"] != "https://github.com/carol/Stockfish" {
		t.Errorf("TestsRepos = %v", repos)
	}
}
