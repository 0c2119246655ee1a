package runs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/server/ui/runs"
)

// The run pages' tests build runs as the new-test form does (scheduler.BuildRun), store them
// through the scheduler and change them through the run cache, writing at once so that the
// lists, which read the database, see the change.

const (
	runsTestBase = "1111111111111111111111111111111111111111"
	runsTestNew  = "2222222222222222222222222222222222222222"
)

func runsFloat(x float64) *float64 { return &x }

// runsTestRequest is an SPRT STC request; change adjusts it.
func runsTestRequest(change func(*protocol.RunRequest)) protocol.RunRequest {
	req := protocol.RunRequest{
		BaseTag: "master", NewTag: "patch", ResolvedBase: runsTestBase, ResolvedNew: runsTestNew,
		TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16",
		BaseSignature: "2050811", NewSignature: "2061234",
		TestsRepo: "https://github.com/alice/Stockfish", Info: "try a patch",
		SPRT: &protocol.SPRTRequest{Elo0: runsFloat(0), Elo1: runsFloat(2)},
	}
	if change != nil {
		change(&req)
	}
	return req
}

// runsAdd stores a new run of owner built from req.
func (e *uiEnv) runsAdd(owner string, req protocol.RunRequest) *rundb.Run {
	e.T.Helper()
	r, err := scheduler.BuildRun(req, owner, time.Now())
	if err != nil {
		e.T.Fatalf("build run: %v", err)
	}
	if err := e.Sched.AddRun(context.Background(), r); err != nil {
		e.T.Fatalf("add run: %v", err)
	}
	return r
}

// runsChange changes a run through the run cache and writes it to the database at once.
func (e *uiEnv) runsChange(id rundb.ObjectID, fn func(*rundb.Run)) {
	e.T.Helper()
	err := e.Runs.Change(context.Background(), id, func(r *rundb.Run) (runcache.Prio, error) {
		fn(r)
		return runcache.PrioSaveNow, nil
	})
	if err != nil {
		e.T.Fatalf("change run %s: %v", id, err)
	}
}

// runsWorker is the worker_info of a test worker.
func runsWorker(user, key string, cores int) rundb.WorkerInfo {
	return rundb.WorkerInfo{Username: user, UniqueKey: key, Concurrency: cores, Uname: "Linux 6.1",
		MaxMemory: 8000, Version: 325, GCCVersion: []int{13, 2, 0}, PythonVersion: []int{3, 12, 1},
		Compiler: "g++", WorkerArch: "x86-64-avx2", ARCH: "avx2 popcnt", NPS: 1.5e6}
}

// runsTask is a task with results w/l/d and a pentanomial that leans the same way: half the
// wins and losses in win-draw and loss-draw pairs, the rest of the pairs drawn.
func runsTask(wi rundb.WorkerInfo, active bool, w, l, d int) rundb.Task {
	pairs := (w + l + d) / 2
	return rundb.Task{NumGames: 1000, Active: active, LastUpdated: time.Now().UTC(), WorkerInfo: wi,
		Stats: rundb.Results{Wins: w, Losses: l, Draws: d, Pentanomial: []int{0, l / 2, pairs - l/2 - w/2, w / 2, 0}}}
}

// runsMakeActive approves a run and gives it active tasks, as if workers were playing it.
func (e *uiEnv) runsMakeActive(id rundb.ObjectID, tasks ...rundb.Task) {
	e.T.Helper()
	e.runsChange(id, func(r *rundb.Run) {
		r.Approved, r.Approver = true, "bob"
		r.Tasks = append(r.Tasks, tasks...)
		r.Results = rundb.NewResults()
		r.Workers, r.Cores = 0, 0
		for _, t := range r.Tasks {
			r.Results.Wins += t.Stats.Wins
			r.Results.Losses += t.Stats.Losses
			r.Results.Draws += t.Stats.Draws
			for i := range r.Results.Pentanomial {
				r.Results.Pentanomial[i] += t.Stats.Pentanomial[i]
			}
			if t.Active {
				r.Workers++
				r.Cores += t.WorkerInfo.Concurrency
			}
		}
		r.NPS, r.GamesPerMinute = 3e6, 120
	})
}

// runsFinish finishes a run as the scheduler would, with the given flags.
func (e *uiEnv) runsFinish(id rundb.ObjectID, change func(*rundb.Run)) {
	e.T.Helper()
	e.runsChange(id, func(r *rundb.Run) {
		r.Finished, r.Workers, r.Cores = true, 0, 0
		for i := range r.Tasks {
			r.Tasks[i].Active = false
		}
		if change != nil {
			change(r)
		}
	})
}

// runsRowOf returns the <tr> of a run in a page, "" if the run is not there.
func runsRowOf(page string, id rundb.ObjectID) string {
	m := regexp.MustCompile(`(?s)<tr data-run="` + id.Hex() + `"[^>]*>.*?</tr>`).FindString(page)
	return m
}

// runsSection returns the part of a page from the element with id up to its closing tag.
func runsSection(page, id string) string {
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	rest := page[i:]
	if j := strings.Index(rest, "</section>"); j >= 0 {
		return rest[:j]
	}
	return rest
}

func TestUIRunsHomepage(t *testing.T) {
	env := newUIEnv(t)
	env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "waiting" }))
	active := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "playing" }))
	env.runsMakeActive(active.ID, runsTask(runsWorker("carol", "abcd1234-5678", 8), true, 30, 20, 50))
	failed := env.runsAdd("bob", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "crashed" }))
	env.runsFinish(failed.ID, func(r *rundb.Run) { r.Failed, r.Failures = true, 1 })
	done := env.runsAdd("bob", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "finished-one" }))
	env.runsFinish(done.ID, func(r *rundb.Run) { r.IsGreen = true })

	for _, who := range []string{"", "alice"} {
		t.Run("as "+runsOr(who, "anonymous"), func(t *testing.T) {
			b := env.anon()
			if who != "" {
				b = env.as(who)
			}
			w := b.Get("/tests")
			page := body(w)
			if w.Code != http.StatusOK {
				t.Fatalf("GET /tests = %d\n%s", w.Code, page)
			}
			if !strings.Contains(runsSection(page, "pending-runs"), "waiting") {
				t.Error("the unapproved run is not among the pending runs")
			}
			act := runsSection(page, "active-runs")
			if !strings.Contains(act, "playing") || !strings.Contains(act, "Total: 100 W: 30 L: 20 D: 50") {
				t.Errorf("the active run or its games are missing:\n%s", act)
			}
			if !strings.Contains(runsSection(page, "failed-runs"), "crashed") {
				t.Error("the failed run is not among the failed runs")
			}
			if !strings.Contains(runsSection(page, "finished-runs"), "finished-one") {
				t.Error("the finished run is not among the finished runs")
			}
			stats := runsSection(page, "home-stats")
			for _, want := range []string{">1<", ">8<", ">3M<", ">120<"} { // machines, cores, nps, games/minute
				if !strings.Contains(stats, want) {
					t.Errorf("the numbers lack %s:\n%s", want, stats)
				}
			}
			if !strings.Contains(runsSection(page, "workers-panel"), "carol-8cores-abcd1234") {
				t.Error("the workers panel does not show carol's worker")
			}
			if !strings.Contains(page, `data-live-src="/tests/events"`) {
				t.Error("the homepage does not name its live stream")
			}
		})
	}

	t.Run("page 2 shows only finished runs", func(t *testing.T) {
		for i := range 30 {
			r := env.runsAdd("bob", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = fmt.Sprintf("old-%d", i) }))
			env.runsFinish(r.ID, nil)
		}
		page := body(env.anon().Get("/tests?page=2"))
		if strings.Contains(page, `id="pending-runs"`) || strings.Contains(page, `id="active-runs"`) || strings.Contains(page, `id="workers-panel"`) {
			t.Error("page 2 shows unfinished runs or workers")
		}
		if n := strings.Count(runsSection(page, "finished-runs"), "<tr data-run="); n != 32-runs.RunsPageSize {
			t.Errorf("page 2 has %d finished runs, want %d", n, 32-runs.RunsPageSize)
		}
		first := body(env.anon().Get("/tests"))
		if n := strings.Count(runsSection(first, "finished-runs"), "<tr data-run="); n != runs.RunsPageSize {
			t.Errorf("page 1 has %d finished runs, want %d", n, runs.RunsPageSize)
		}
		// A page past the end is the last page.
		if page := body(env.anon().Get("/tests?page=99")); !strings.Contains(page, `aria-current="page">2<`) {
			t.Error("page 99 is not clamped to the last page")
		}
	})
}

func runsOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestUIRunsHomepageFilters(t *testing.T) {
	env := newUIEnv(t)
	sprt := env.runsAdd("alice", runsTestRequest(nil))
	ltc := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) {
		r.SPRT, r.NumGames, r.TC, r.Threads = nil, 20000, "60+0.6", new(8)
		r.BaseOptions, r.NewOptions = "Hash=512", "Hash=512"
	}))
	for _, r := range []*rundb.Run{sprt, ltc} {
		env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "k"+r.ID.Hex()[:6], 8), true, 1, 1, 2))
	}
	for _, tc := range []struct {
		query               string
		sprtShown, ltcShown bool
	}{
		{"", true, true},
		{"?filter=1&type=sprt&type=spsa&type=numgames&tc=stc&tc=ltc&threads=st&threads=smp", true, true},
		{"?filter=1&type=sprt&tc=stc&tc=ltc&threads=st&threads=smp", true, false},
		{"?filter=1&type=sprt&type=numgames&tc=ltc&threads=st&threads=smp", false, true},
		{"?filter=1&type=sprt&type=numgames&tc=stc&tc=ltc&threads=st", true, false},
		{"?filter=1", false, false},
		// A group left out of a link (not the form) shows everything.
		{"?threads=smp", false, true},
	} {
		t.Run(runsOr(tc.query, "no filter"), func(t *testing.T) {
			page := body(env.anon().Get("/tests" + tc.query))
			for _, c := range []struct {
				name  string
				id    rundb.ObjectID
				shown bool
			}{{"SPRT STC", sprt.ID, tc.sprtShown}, {"NumGames LTC SMP", ltc.ID, tc.ltcShown}} {
				row := runsRowOf(runsSection(page, "active-runs"), c.id)
				if row == "" {
					t.Fatalf("the %s run is not in the active table at all", c.name)
				}
				hidden := strings.Contains(strings.SplitN(row, ">", 2)[0], " hidden")
				if hidden == c.shown {
					t.Errorf("%s run hidden = %v, want %v", c.name, hidden, !c.shown)
				}
			}
		})
	}
	page := body(env.anon().Get("/tests?filter=1&type=sprt&tc=stc&tc=ltc&threads=st&threads=smp"))
	if !strings.Contains(page, "(1 shown)") {
		t.Error("the active count does not say how many runs the filters show")
	}
	row := runsRowOf(page, ltc.ID)
	for _, attr := range []string{`data-type="numgames"`, `data-tc="ltc"`, `data-threads="smp"`} {
		if !strings.Contains(row, attr) {
			t.Errorf("the LTC SMP row lacks %s for the instant filters: %s", attr, row)
		}
	}
}

func TestUIRunsFinished(t *testing.T) {
	env := newUIEnv(t)
	mk := func(owner, tag, info string, change func(*rundb.Run)) *rundb.Run {
		r := env.runsAdd(owner, runsTestRequest(func(r *protocol.RunRequest) { r.NewTag, r.Info = tag, info }))
		env.runsFinish(r.ID, change)
		return r
	}
	mk("alice", "alice-green", "faster search", func(r *rundb.Run) { r.IsGreen = true })
	mk("bob", "bob-yellow", "eval tweak", func(r *rundb.Run) { r.IsYellow = true })
	mk("carol", "carol-ltc", "LTC: search", func(r *rundb.Run) { r.TCBase = 60 })
	mk("carol", "carol-deleted", "search", func(r *rundb.Run) { r.Deleted = true })
	env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "alice-running" }))

	for _, tc := range []struct {
		query   string
		want    []string
		notWant []string
	}{
		{"", []string{"alice-green", "bob-yellow", "carol-ltc"}, []string{"carol-deleted", "alice-running"}},
		{"?success_only=1", []string{"alice-green"}, []string{"bob-yellow", "carol-ltc"}},
		{"?yellow_only=1", []string{"bob-yellow"}, []string{"alice-green", "carol-ltc"}},
		{"?ltc_only=1", []string{"carol-ltc"}, []string{"alice-green", "bob-yellow"}},
		{"?user=AR", []string{"carol-ltc"}, []string{"alice-green", "bob-yellow", "carol-deleted"}},
		{"?user=nobody", nil, []string{"alice-green", "bob-yellow", "carol-ltc"}},
		{"?text=SEARCH", []string{"alice-green", "carol-ltc"}, []string{"bob-yellow", "carol-deleted"}},
		{"?text=search&user=ali", []string{"alice-green"}, []string{"carol-ltc"}},
		{"?text=search&success_only=1", []string{"alice-green"}, []string{"carol-ltc"}},
	} {
		t.Run(runsOr(tc.query, "all"), func(t *testing.T) {
			w := env.anon().Get("/tests/finished" + tc.query)
			page := body(w)
			if w.Code != http.StatusOK {
				t.Fatalf("GET /tests/finished%s = %d", tc.query, w.Code)
			}
			for _, s := range tc.want {
				if !strings.Contains(page, ">"+s+"<") {
					t.Errorf("%s is missing", s)
				}
			}
			for _, s := range tc.notWant {
				if strings.Contains(page, ">"+s+"<") {
					t.Errorf("%s is shown", s)
				}
			}
		})
	}
	if page := body(env.anon().Get("/tests/finished?user=AR")); !strings.Contains(page, "carol") || !strings.Contains(page, "Users matching") {
		t.Error("a user search does not say which users it found")
	}
	if page := body(env.anon().Get("/tests/finished?ltc_only=1")); !strings.Contains(page, `class="current" aria-current="page">LTC<`) {
		t.Error("the LTC tab is not marked current")
	}
}

func TestUIRunsFinishedPagesAndCaps(t *testing.T) {
	env := newUIEnv(t)
	for i := range 30 {
		r := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) {
			r.NewTag, r.Info = fmt.Sprintf("run-%02d", i), "batch"
		}))
		env.runsFinish(r.ID, nil)
	}
	count := func(page string) int { return strings.Count(page, "<tr data-run=") }
	if n := count(body(env.anon().Get("/tests/finished"))); n != runs.RunsPageSize {
		t.Errorf("page 1 has %d runs, want %d", n, runs.RunsPageSize)
	}
	if n := count(body(env.anon().Get("/tests/finished?page=2"))); n != 5 {
		t.Errorf("page 2 has %d runs, want 5", n)
	}
	if n := count(body(env.anon().Get("/tests/finished?page=-3"))); n != runs.RunsPageSize {
		t.Errorf("page -3 has %d runs, want page 1's %d", n, runs.RunsPageSize)
	}
	t.Run("max_count caps a search", func(t *testing.T) {
		page := body(env.anon().Get("/tests/finished?text=batch&max_count=27"))
		if !strings.Contains(page, "Showing the first 27 matches") {
			t.Error("the page does not say the search was capped")
		}
		if n := count(body(env.anon().Get("/tests/finished?text=batch&max_count=27&page=2"))); n != 2 {
			t.Errorf("page 2 of a search capped at 27 has %d runs, want 2", n)
		}
		if n := count(body(env.anon().Get("/tests/finished?text=batch&max_count=27&page=3"))); n != 2 {
			t.Errorf("page 3 of a search capped at 27 has %d runs, want page 2's 2", n)
		}
	})
	t.Run("the cap depends on who asks", func(t *testing.T) {
		anon, user := env.anon(), env.as("alice")
		for _, tc := range []struct {
			b     *browser
			query string
			want  int
		}{
			{anon, "", runs.FinishedCapAnon},
			{anon, "max_count=5000", runs.FinishedCapAnon},
			{anon, "max_count=10", 10},
			{anon, "max_count=junk", runs.FinishedCapAnon},
			{user, "", runs.FinishedCapUser},
			{user, "max_count=99999999", runs.FinishedCapUser},
			{user, "max_count=5000", 5000},
		} {
			c, _ := gin.CreateTestContext(httptest.NewRecorder())
			c.Request = httptest.NewRequest(http.MethodGet, "/tests/finished?text=x&"+tc.query, nil)
			if tc.b == user {
				u, err := env.DB.Users.Get(context.Background(), "alice")
				if err != nil {
					t.Fatal(err)
				}
				c.Set(ui.UserKey, u)
			}
			if got := runs.FinishedMaxCount(c); got != tc.want {
				t.Errorf("max count for %q (logged in %v) = %d, want %d", tc.query, tc.b == user, got, tc.want)
			}
		}
	})
}

func TestUIRunsUserPage(t *testing.T) {
	env := newUIEnv(t)
	mine := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "alice-pending" }))
	done := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "alice-done" }))
	env.runsFinish(done.ID, nil)
	env.runsAdd("bob", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "bob-pending" }))
	for _, b := range []*browser{env.anon(), env.as("bob")} {
		w := b.Get("/tests/user/alice")
		page := body(w)
		if w.Code != http.StatusOK {
			t.Fatalf("GET /tests/user/alice = %d", w.Code)
		}
		if runsRowOf(runsSection(page, "pending-runs"), mine.ID) == "" || !strings.Contains(runsSection(page, "finished-runs"), "alice-done") {
			t.Error("alice's runs are missing from her page")
		}
		if strings.Contains(page, "bob-pending") {
			t.Error("bob's run is on alice's page")
		}
	}
	if w := env.anon().Get("/tests/user/nobody"); w.Code != http.StatusNotFound {
		t.Errorf("GET /tests/user/nobody = %d, want 404", w.Code)
	}
}

func TestUIRunsMachines(t *testing.T) {
	env := newUIEnv(t)
	r1 := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "first-test" }))
	env.runsMakeActive(r1.ID,
		runsTask(runsWorker("carol", "aaaa1111-1", 4), true, 1, 1, 2),
		runsTask(runsWorker("alice", "bbbb2222-2", 16), true, 1, 1, 2),
		runsTask(runsWorker("dave", "cccc3333-3", 2), false, 1, 1, 2)) // finished task: not at work
	r2 := env.runsAdd("bob", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "second-test" }))
	env.runsMakeActive(r2.ID, runsTask(runsWorker("carol", "dddd4444-4", 8), true, 1, 1, 2))

	names := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`href="/workers/([^"]+)"`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	w := env.anon().Get("/tests/machines")
	page := body(w)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /tests/machines = %d", w.Code)
	}
	if got := names(page); len(got) != 3 || strings.Contains(page, "dave-2cores") {
		t.Errorf("machines = %v, want the 3 active workers", got)
	}
	if !strings.Contains(page, fmt.Sprintf(`/tests/view/%s?show_task=0#tasks`, r1.ID.Hex())) {
		t.Error("a machine does not link to its task")
	}
	if w.Header().Get("Cache-Control") != "no-cache, private" {
		t.Errorf("Cache-Control = %q", w.Header().Get("Cache-Control"))
	}
	t.Run("sorted by cores", func(t *testing.T) {
		got := names(body(env.anon().Get("/tests/machines?sort=cores&order=asc")))
		want := []string{"carol-4cores-aaaa1111", "carol-8cores-dddd4444", "alice-16cores-bbbb2222"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("by cores = %v, want %v", got, want)
		}
	})
	t.Run("filtered by text", func(t *testing.T) {
		got := names(body(env.anon().Get("/tests/machines?q=SECOND")))
		if len(got) != 1 || got[0] != "carol-8cores-dddd4444" {
			t.Errorf("q=SECOND = %v", got)
		}
	})
	t.Run("my workers only for a logged-in user", func(t *testing.T) {
		if got := names(body(env.as("alice").Get("/tests/machines?my_workers=1"))); len(got) != 1 || got[0] != "alice-16cores-bbbb2222" {
			t.Errorf("alice's workers = %v", got)
		}
		if got := names(body(env.anon().Get("/tests/machines?my_workers=1"))); len(got) != 3 {
			t.Errorf("my_workers for an anonymous visitor = %v, want every worker", got)
		}
	})
	if runs.MachinesPageSize != 500 {
		t.Errorf("machines page size = %d, want fishtest's 500", runs.MachinesPageSize)
	}
}

// The primary's homepage shows what the run cache holds, not what the database has been
// written so far: results that have not been flushed yet are on the page.
func TestUIRunsHomepageReadsTheRunCache(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.NewTag = "fresh" }))
	env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "abcd1234-5678", 8), true, 30, 20, 50))
	err := env.Runs.Change(context.Background(), r.ID, func(r *rundb.Run) (runcache.Prio, error) {
		r.Results.Wins += 2 // not written: NORMAL waits for the flush job, which is not running
		return runcache.PrioNormal, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := env.DB.Runs.Get(context.Background(), r.ID); err != nil || stored.Results.Wins != 30 {
		t.Fatalf("the database already has the change (%v, %v): the test proves nothing", stored.Results.Wins, err)
	}
	act := runsSection(body(env.anon().Get("/tests")), "active-runs")
	if !strings.Contains(act, "Total: 102 W: 32 L: 20 D: 50") {
		t.Errorf("the homepage does not show the cached results:\n%s", act)
	}
}
