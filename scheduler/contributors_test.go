package scheduler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// fishtest's estimate_game_duration: (base + 68 × increment) × 2 players × 0.92 of the clock.
var (
	stcSeconds = (10 + 68*0.1) * 2 * 0.92 // "10+0.1": 30.912 s
	ltcSeconds = (60 + 68*0.6) * 2 * 0.92 // "60+0.6": 185.472 s
)

// contributorsJob returns the job Jobs registers for contributor statistics.
func contributorsJob(t *testing.T, s *Scheduler) Job {
	t.Helper()
	for _, j := range s.Jobs() {
		if j.Name == "update contributors" {
			return j
		}
	}
	t.Fatal("Jobs has no \"update contributors\" job")
	return Job{}
}

func TestContributorsJobIsRegistered(t *testing.T) {
	s, _ := newTestScheduler(t)
	j := contributorsJob(t, s)
	// fishtest's script runs from cron; a quarter of an hour at the default scavenge period.
	if want := 15 * s.cfg.ScavengePeriod; j.Period != want || j.Run == nil {
		t.Errorf("period %v, want %v", j.Period, want)
	}
}

// statsTask returns a task by a worker of user that played w+l+d games.
func statsTask(user string, w, l, d int, active bool, at time.Time) rundb.Task {
	wi := worker(1)
	wi.Username = user
	return rundb.Task{NumGames: w + l + d, Active: active, LastUpdated: at, WorkerInfo: wi,
		Stats: rundb.Results{Wins: w, Losses: l, Draws: d, Crashes: 1, Pentanomial: make([]int, 5)}}
}

// insertFinished stores a finished run by author, started at start and finished at end.
func insertFinished(t *testing.T, s *Scheduler, author, tc string, threads int, start, end time.Time, tasks ...rundb.Task) rundb.ObjectID {
	t.Helper()
	r := runSpec{username: author, tc: tc, threads: threads, approved: true}.build(start)
	r.Finished, r.LastUpdated, r.Tasks = true, end, tasks
	if err := dbOf(s).Runs.Insert(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// contributorDocs returns a contributor collection by username.
func contributorDocs(t *testing.T, store *rundb.UserCacheStore) map[string]*rundb.UserStats {
	t.Helper()
	all, err := store.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*rundb.UserStats{}
	for _, st := range all {
		out[st.Username] = st
	}
	return out
}

// want is what a contributor entry should hold.
type want struct {
	games, tests    int
	cpuHours, rate  float64
	repo            string
	lastUpdated     time.Time
	granted, absent bool
}

func checkContributors(t *testing.T, what string, got map[string]*rundb.UserStats, wants map[string]want) {
	t.Helper()
	for name, w := range wants {
		st := got[name]
		switch {
		case w.absent && st != nil:
			t.Errorf("%s: %s has an entry %+v, want none", what, name, st)
			continue
		case w.absent:
			continue
		case st == nil:
			t.Errorf("%s: %s has no entry", what, name)
			continue
		}
		if st.Games != w.games || st.Tests != w.tests || math.Abs(st.CPUHours-w.cpuHours) > 1e-9 ||
			math.Abs(st.GamesPerHour-w.rate) > 1e-9 || st.TestsRepo != w.repo || !st.LastUpdated.Equal(w.lastUpdated) {
			t.Errorf("%s: %s = games %d tests %d cpu_hours %.9f games_per_hour %.6f repo %q last %v;\n"+
				"want games %d tests %d cpu_hours %.9f games_per_hour %.6f repo %q last %v", what, name,
				st.Games, st.Tests, st.CPUHours, st.GamesPerHour, st.TestsRepo, st.LastUpdated,
				w.games, w.tests, w.cpuHours, w.rate, w.repo, w.lastUpdated)
		}
		if _, ok := st.Extra[grantedKey]; ok != w.granted {
			t.Errorf("%s: %s records granted hours: %v, want %v", what, name, ok, w.granted)
		}
	}
	if len(got) != countPresent(wants) {
		t.Errorf("%s has %d entries, want %d", what, len(got), countPresent(wants))
	}
}

func countPresent(wants map[string]want) int {
	n := 0
	for _, w := range wants {
		if !w.absent {
			n++
		}
	}
	return n
}

func TestContributorStatistics(t *testing.T) {
	s, clk := newTestScheduler(t)
	ctx := context.Background()
	db := dbOf(s)
	for _, name := range []string{"alice", "bob", "carol", "dave", "erin"} {
		if _, err := db.Users.Create(ctx, rundb.NewUser{Username: name, Password: "secret-password", Accepted: true}); err != nil {
			t.Fatal(err)
		}
	}
	const carolRepo = "https://github.com/carol/Stockfish"
	if err := db.Users.SetProfile(ctx, "carol", "", carolRepo); err != nil {
		t.Fatal(err)
	}
	now := clk.now()
	ms := func(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
	// What `shoal user add --cpu-hours` writes: carol will contribute as well, erin will not.
	for name, hours := range map[string]float64{"carol": 500, "erin": 1000} {
		if err := db.UserCache.Put(ctx, &rundb.UserStats{Username: name, CPUHours: hours, LastUpdated: now}); err != nil {
			t.Fatal(err)
		}
	}

	// alice's run finished yesterday: carol played 100 games, dave 50, and a worker of a user
	// who no longer exists 7, which count for no one.
	tA := now.Add(-24 * time.Hour)
	insertFinished(t, s, "alice", "10+0.1", 1, now.Add(-48*time.Hour), tA,
		statsTask("carol", 30, 20, 50, false, tA), statsTask("dave", 10, 10, 30, false, tA.Add(-time.Minute)),
		statsTask("ghost", 7, 0, 0, false, tA))
	// bob's run started 40 days ago: all-time only.
	tB := now.Add(-39 * 24 * time.Hour)
	insertFinished(t, s, "bob", "10+0.1", 1, now.Add(-40*24*time.Hour), tB, statsTask("carol", 5, 5, 0, false, tB))
	// bob's active run: dave's 8-core worker at 1 Mnps plays 2-thread games, 20 so far.
	active := runSpec{username: "bob", tc: "60+0.6", threads: 2, approved: true}.build(now.Add(-time.Hour))
	active.Tasks = []rundb.Task{statsTask("dave", 5, 5, 10, true, now)}
	if err := s.AddRun(ctx, active); err != nil {
		t.Fatal(err)
	}

	// fishtest's formulas: cpu_hours = games × threads × game duration / 3600; games_per_hour =
	// nps/628000 × 3600/game duration × ⌊concurrency/threads⌋.
	daveRate := 1e6 / 628000 * (3600 / ltcSeconds) * float64(8/2)
	wantTotal := map[string]want{
		"alice": {tests: 1},
		"bob":   {tests: 1},
		// The grant's last_updated is newer than carol's tasks.
		"carol": {games: 110, cpuHours: 500 + 100*1*stcSeconds/3600 + 10*1*stcSeconds/3600, repo: carolRepo,
			lastUpdated: ms(now), granted: true},
		"dave":  {games: 50, cpuHours: 50 * 1 * stcSeconds / 3600, rate: daveRate, lastUpdated: ms(tA.Add(-time.Minute))},
		"erin":  {cpuHours: 1000, lastUpdated: ms(now), granted: true},
		"ghost": {absent: true},
	}
	wantMonth := map[string]want{
		"alice": {tests: 1},
		"bob":   {tests: 1},
		"carol": {games: 100, cpuHours: 100 * 1 * stcSeconds / 3600, repo: carolRepo, lastUpdated: ms(tA)},
		"dave": {games: 70, cpuHours: 50*1*stcSeconds/3600 + 20*2*ltcSeconds/3600, rate: daveRate,
			lastUpdated: ms(now)},
		"erin":  {absent: true},
		"ghost": {absent: true},
	}
	job := contributorsJob(t, s)
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)
	checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)

	t.Run("running again changes nothing", func(t *testing.T) {
		total, month := contributorDocs(t, db.UserCache), contributorDocs(t, db.MonthlyContributors())
		clk.advance(15 * time.Minute)
		if err := job.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// The documents, _id included, are as they were.
		if got := contributorDocs(t, db.UserCache); !equalDocs(got, total) {
			t.Errorf("user_cache changed:\n%v\nwas\n%v", dump(got), dump(total))
		}
		if got := contributorDocs(t, db.MonthlyContributors()); !equalDocs(got, month) {
			t.Errorf("top_month changed:\n%v\nwas\n%v", dump(got), dump(month))
		}
	})

	// bob's run finishes with 25 games from dave, and a new run of alice's with 40 from carol.
	clk.advance(15 * time.Minute)
	end := clk.now()
	err := s.modify(ctx, active.ID, func(r *rundb.Run) (runcache.Prio, error) {
		r.Tasks[0].Stats.Draws += 5
		s.setInactiveRun(r, end)
		r.LastUpdated = end
		return runcache.PrioSaveNow, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// alice's run is submitted and finished through the scheduler, as every run a primary
	// finishes is: later updates read the runs it saw finish, not every run.
	lateRun := runSpec{username: "alice", tc: "10+0.1", threads: 1, approved: true}.build(end.Add(-time.Hour))
	lateRun.Tasks = []rundb.Task{statsTask("carol", 20, 0, 20, false, end)}
	if err := s.AddRun(ctx, lateRun); err != nil {
		t.Fatal(err)
	}
	late := lateRun.ID
	err = s.modify(ctx, late, func(r *rundb.Run) (runcache.Prio, error) {
		s.setInactiveRun(r, end)
		r.LastUpdated = end
		return runcache.PrioSaveNow, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("runs finishing later add their games", func(t *testing.T) {
		if err := job.Run(ctx); err != nil {
			t.Fatal(err)
		}
		carol := wantTotal["carol"]
		carol.games += 40
		carol.cpuHours += 40 * 1 * stcSeconds / 3600
		carol.lastUpdated = ms(end)
		wantTotal["carol"] = carol
		dave := wantTotal["dave"]
		dave.games += 25
		dave.cpuHours += 25 * 2 * ltcSeconds / 3600
		dave.rate = 0 // no worker left
		dave.lastUpdated = ms(end)
		wantTotal["dave"] = dave
		wantTotal["alice"] = want{tests: 2}
		wantTotal["bob"] = want{tests: 2}
		checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)

		carol = wantMonth["carol"]
		carol.games += 40
		carol.cpuHours += 40 * 1 * stcSeconds / 3600
		carol.lastUpdated = ms(end)
		wantMonth["carol"] = carol
		dave = wantMonth["dave"]
		dave.games += 5
		dave.cpuHours += 5 * 2 * ltcSeconds / 3600
		dave.rate = 0
		dave.lastUpdated = ms(end)
		wantMonth["dave"] = dave
		wantMonth["alice"] = want{tests: 2}
		checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)
	})

	t.Run("a new primary, reading the month afresh, agrees", func(t *testing.T) {
		clk.advance(15 * time.Minute)
		if err := contributorsJob(t, s).Run(ctx); err != nil {
			t.Fatal(err)
		}
		checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)
		checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)
	})

	t.Run("a resumed run counts once for the month and is not credited again", func(t *testing.T) {
		err := s.modify(ctx, late, func(r *rundb.Run) (runcache.Prio, error) {
			s.setActiveRun(r)
			return runcache.PrioSaveNow, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(15 * time.Minute)
		if err := job.Run(ctx); err != nil {
			t.Fatal(err)
		}
		checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)
		checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)
		err = s.modify(ctx, late, func(r *rundb.Run) (runcache.Prio, error) {
			s.setInactiveRun(r, clk.now())
			r.LastUpdated = clk.now()
			return runcache.PrioSaveNow, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a rebuild without deltas keeps granted hours", func(t *testing.T) {
		deltas := rundbtest.Collection(t, db, "deltas")
		if err := deltas.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		clk.advance(15 * time.Minute)
		if err := job.Run(ctx); err != nil {
			t.Fatal(err)
		}
		checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)
		checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)
		n, err := deltas.CountDocuments(ctx, bson.D{})
		if err != nil || n == 0 {
			t.Errorf("the rebuild recorded no credited runs (%d documents, %v)", n, err)
		}
	})

	t.Run("a run leaves the month 30 days after it started", func(t *testing.T) {
		// alice's first run started two days before the test began; bob's and alice's second
		// started within the last hour.
		clk.advance(29 * 24 * time.Hour)
		if err := job.Run(ctx); err != nil {
			t.Fatal(err)
		}
		carol := wantMonth["carol"]
		carol.games -= 100
		carol.cpuHours -= 100 * 1 * stcSeconds / 3600
		wantMonth["carol"] = carol
		dave := wantMonth["dave"]
		dave.games -= 50
		dave.cpuHours -= 50 * 1 * stcSeconds / 3600
		wantMonth["dave"] = dave
		wantMonth["alice"] = want{tests: 1}
		checkContributors(t, "top_month", contributorDocs(t, db.MonthlyContributors()), wantMonth)
		checkContributors(t, "user_cache", contributorDocs(t, db.UserCache), wantTotal)
	})
}

func equalDocs(a, b map[string]*rundb.UserStats) bool {
	if len(a) != len(b) {
		return false
	}
	for name, x := range a {
		y := b[name]
		if y == nil || !sameStats(x, y) || x.Extra["_id"] != y.Extra["_id"] {
			return false
		}
	}
	return true
}

func dump(m map[string]*rundb.UserStats) string {
	var lines []string
	for _, st := range m {
		lines = append(lines, fmt.Sprintf("%s games=%d tests=%d cpu_hours=%g games_per_hour=%g last=%v",
			st.Username, st.Games, st.Tests, st.CPUHours, st.GamesPerHour, st.LastUpdated))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
