package runs_test

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui/runs"
)

// viewFormIDs lists the action forms (and the reschedule link) a page shows.
func viewFormIDs(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`id="(form-[a-z]+|link-reschedule)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestUIViewPage(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "aaaa1111-1", 8), true, 30, 20, 50))

	t.Run("anonymous", func(t *testing.T) {
		w := env.anon().Get("/tests/view/" + r.ID.Hex())
		page := body(w)
		if w.Code != http.StatusOK {
			t.Fatalf("GET view = %d", w.Code)
		}
		for _, want := range []string{
			`id="run-games">Total: 100 W: 30 L: 20 D: 50<`,
			`id="run-llr">LLR: `,
			`id="run-elo">Elo: `,
			`<meta property="og:title" content="SPRT patch vs master">`,
			`<meta property="og:url" content="http://example.com/tests/view/` + r.ID.Hex() + `">`,
			`data-live-src="/tests/view/` + r.ID.Hex() + `/events"`,
			`<dt>new_tag</dt><dd><a href="https://github.com/alice/Stockfish/commit/` + runsTestNew + `">patch</a>`,
			`id="tasks"`,
			`carol-8cores-aaaa1111-1`,
			`<script src="/static/live.js" defer></script>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %s", want)
			}
		}
		if got := viewFormIDs(page); len(got) != 0 {
			t.Errorf("an anonymous visitor sees %v", got)
		}
		if strings.Contains(page, "/api/pgn/") {
			t.Error("an anonymous visitor gets PGN links")
		}
	})

	fresh := env.runsAdd("alice", runsTestRequest(nil)) // not approved yet
	for _, tc := range []struct {
		who  string
		want []string
	}{
		// The owner may stop, delete and modify, not approve their own run.
		{"alice", []string{"form-stop", "form-delete", "link-reschedule", "form-modify"}},
		// An approver may approve someone else's run.
		{"bob", []string{"form-stop", "form-approve", "form-delete", "link-reschedule", "form-modify"}},
	} {
		t.Run(tc.who, func(t *testing.T) {
			page := body(env.as(tc.who).Get("/tests/view/" + fresh.ID.Hex()))
			if got := viewFormIDs(page); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%s sees %v, want %v", tc.who, got, tc.want)
			}
			for _, id := range []string{"form-stop", "form-approve", "form-delete", "form-modify"} {
				form := regexp.MustCompile(`(?s)<form id="` + id + `"[^>]*>.*?</form>`).FindString(page)
				if form == "" {
					continue
				}
				if !strings.Contains(form, `name="csrf_token"`) || !strings.Contains(form, `name="run-id" value="`+fresh.ID.Hex()+`"`) {
					t.Errorf("%s lacks the CSRF token or the run id: %s", id, form)
				}
			}
			info := strings.Contains(page, `name="info"`)
			if info != (tc.who == "alice") {
				t.Errorf("%s sees the info field: %v", tc.who, info)
			}
			if !strings.Contains(body(env.as(tc.who).Get("/tests/view/"+r.ID.Hex())), `/api/pgn/`+r.ID.Hex()+`-0.pgn`) {
				t.Error("a logged-in user gets no PGN link")
			}
		})
	}
	t.Run("another user", func(t *testing.T) {
		bobs := env.runsAdd("bob", runsTestRequest(nil))
		page := body(env.as("alice").Get("/tests/view/" + bobs.ID.Hex()))
		if got := viewFormIDs(page); strings.Join(got, " ") != "link-reschedule" {
			t.Errorf("another user sees %v, want only the reschedule link", got)
		}
	})
	t.Run("an approver cannot approve their own run", func(t *testing.T) {
		bobs := env.runsAdd("bob", runsTestRequest(nil))
		page := body(env.as("bob").Get("/tests/view/" + bobs.ID.Hex()))
		if got := strings.Join(viewFormIDs(page), " "); got != "form-stop form-delete link-reschedule form-modify" {
			t.Errorf("bob on his own run sees %s", got)
		}
		if !strings.Contains(body(env.as("carol").Get("/tests/view/"+bobs.ID.Hex())), `id="form-approve"`) {
			t.Error("another approver cannot approve bob's run")
		}
	})
	t.Run("an approved run cannot be approved again", func(t *testing.T) {
		page := body(env.as("carol").Get("/tests/view/" + r.ID.Hex()))
		if strings.Contains(page, "form-approve") {
			t.Error("an approved run shows the approve button")
		}
	})
	t.Run("stop and delete ask first", func(t *testing.T) {
		page := body(env.as("alice").Get("/tests/view/" + fresh.ID.Hex()))
		for _, id := range []string{"form-stop", "form-delete"} {
			form := regexp.MustCompile(`(?s)<form id="` + id + `"[^>]*>.*?</form>`).FindString(page)
			if !strings.Contains(form, "data-confirm=") {
				t.Errorf("%s does not ask before sending", id)
			}
		}
	})

	t.Run("a finished run", func(t *testing.T) {
		done := env.runsAdd("alice", runsTestRequest(nil))
		env.runsFinish(done.ID, nil)
		page := body(env.as("alice").Get("/tests/view/" + done.ID.Hex()))
		if got := strings.Join(viewFormIDs(page), " "); got != "form-purge form-delete link-reschedule form-modify" {
			t.Errorf("the owner of a finished run sees %s", got)
		}
		if strings.Contains(page, "data-live-src") {
			t.Error("a finished run's page still listens for updates")
		}
	})

	t.Run("unknown runs", func(t *testing.T) {
		for _, id := range []string{rundb.NewObjectID().Hex(), "not-a-run-id", "0123"} {
			for _, path := range []string{"/tests/view/", "/tests/tasks/", "/tests/live_elo/", "/tests/stats/"} {
				if w := env.anon().Get(path + id); w.Code != http.StatusNotFound {
					t.Errorf("GET %s%s = %d, want 404", path, id, w.Code)
				}
			}
		}
	})
}

func TestUIViewWarnings(t *testing.T) {
	env := newUIEnv(t)
	plain := env.runsAdd("alice", runsTestRequest(nil))
	odd := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) {
		r.TC, r.NewTC = "60+0.6", "30+0.3"
		r.BaseOptions, r.NewOptions = "Hash=16", "Hash=64 Threads=1"
		r.Throughput, r.Priority = new(200), 1
		r.ArchFilter, r.Compiler = "avx2", "clang++"
	}))
	env.runsChange(odd.ID, func(r *rundb.Run) { r.Failures = 2 })
	page := body(env.anon().Get("/tests/view/" + plain.ID.Hex()))
	if strings.Contains(page, "Warning:") {
		t.Errorf("a plain run has warnings:\n%s", regexp.MustCompile(`Warning: [^<]*`).FindAllString(page, -1))
	}
	page = body(env.anon().Get("/tests/view/" + odd.ID.Hex()))
	for _, want := range []string{
		"throughput exceeds the normal limit",
		"priority exceeds the normal limit",
		"hash options are too low or too high for this TC",
		"base options differ from new options",
		"this test had 2 failures",
		"this is a test with time odds",
		"this test has a non-trivial arch filter",
		"this test has a pinned compiler",
	} {
		if !strings.Contains(page, "Warning: "+want) {
			t.Errorf("no warning %q", want)
		}
	}
	for _, tc := range []struct {
		ratio float64
		hash  int
		ok    bool
	}{{1, 1, true}, {4.9, 9999, true}, {6, 64, true}, {6, 16, false}, {6, 97, false}, {6, 96, true}, {12, 128, true}, {12, 64, false}} {
		if got := runs.ViewOKHash(tc.ratio, tc.hash); got != tc.ok {
			t.Errorf("viewOKHash(%v, %d) = %v, want %v", tc.ratio, tc.hash, got, tc.ok)
		}
	}
}

func TestUIViewTasksResidualColours(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	// Eight workers that agree (tasks 0-7), one far better than the rest (8), one that crashes (9).
	var tasks []rundb.Task
	for i := range 8 {
		tasks = append(tasks, runsTask(runsWorker("carol", fmt.Sprintf("aaaa000%d-1", i), 4), i < 2, 100, 100, 200))
	}
	tasks = append(tasks, runsTask(runsWorker("carol", "ffff0005-1", 4), false, 300, 10, 90))
	crash := runsTask(runsWorker("carol", "eeee0006-1", 4), false, 10, 10, 20)
	crash.Stats.Crashes = 5
	tasks = append(tasks, crash)
	env.runsMakeActive(r.ID, tasks...)
	// A purged task: its games and residual are kept in bad_tasks.
	env.runsChange(r.ID, func(r *rundb.Run) {
		id, res := 10, math.Inf(1)
		bad := runsTask(runsWorker("dave", "dddd0007-1", 2), false, 200, 0, 0)
		bad.Bad, bad.TaskID, bad.Residual, bad.ResidualColor = true, &id, &res, "red"
		zero := bad
		zero.Stats = rundb.NewResults()
		zero.TaskID, zero.Residual, zero.ResidualColor = nil, nil, ""
		r.Tasks = append(r.Tasks, zero)
		r.BadTasks = append(r.BadTasks, bad)
	})

	page := body(env.as("bob").Get("/tests/tasks/" + r.ID.Hex() + "?show_task=2"))
	cell := func(taskID int) string {
		row := regexp.MustCompile(`(?s)<tr id="task` + fmt.Sprint(taskID) + `"[^>]*>.*?</tr>`).FindString(page)
		if row == "" {
			t.Fatalf("task %d is not in the table", taskID)
		}
		return row
	}
	colour := func(taskID int) string {
		m := regexp.MustCompile(`data-residual="([a-z]*)"`).FindStringSubmatch(cell(taskID))
		if m == nil {
			return ""
		}
		return m[1]
	}
	for id := range 8 {
		if c := colour(id); c != "green" {
			t.Errorf("task %d of an agreeing worker is %q, want green", id, c)
		}
	}
	if c := colour(8); c != "red" {
		t.Errorf("the outlier's task is %q, want red", c)
	}
	if c := colour(9); c != "red" || !strings.Contains(cell(9), ">10.000<") {
		t.Errorf("the crashing worker's task is %q (%s), want red with residual 10", c, cell(9))
	}
	if !strings.Contains(cell(10), "purged") || colour(10) != "red" {
		t.Errorf("the purged task does not show as purged and red: %s", cell(10))
	}
	if !strings.Contains(cell(2), `class="highlight`) {
		t.Error("show_task=2 does not highlight task 2")
	}
	if strings.Contains(cell(3), "highlight") {
		t.Error("task 3 is highlighted")
	}
	if !strings.Contains(cell(0), `href="/workers/carol-4cores-aaaa0000"`) {
		t.Error("an approver gets no link to the worker")
	}
	if anon := body(env.anon().Get("/tests/tasks/" + r.ID.Hex())); strings.Contains(anon, `href="/workers/`) || strings.Contains(anon, "/api/pgn/") {
		t.Error("an anonymous visitor gets worker or PGN links")
	}
}

func TestUIViewTasksPages(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	var tasks []rundb.Task
	for i := range 30 {
		tasks = append(tasks, runsTask(runsWorker("carol", fmt.Sprintf("k%07d-1", i), 4), i%2 == 0, i, i, 2*i))
	}
	env.runsMakeActive(r.ID, tasks...)
	ids := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<tr id="task([0-9]+)"`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	path := "/tests/tasks/" + r.ID.Hex()
	if got := ids(body(env.anon().Get(path))); len(got) != runs.TasksPageSize || got[0] != "29" {
		t.Errorf("page 1 = %v, want 25 tasks, newest first", got)
	}
	if got := ids(body(env.anon().Get(path + "?page=2"))); len(got) != 5 || got[4] != "0" {
		t.Errorf("page 2 = %v, want the 5 oldest tasks", got)
	}
	if got := ids(body(env.anon().Get(path + "?sort=played&order=asc"))); len(got) != runs.TasksPageSize || got[0] != "0" {
		t.Errorf("by games played, ascending = %v", got)
	}
	if got := ids(body(env.anon().Get(path + "?q=K0000007"))); strings.Join(got, " ") != "7" {
		t.Errorf("q=K0000007 = %v, want task 7", got)
	}
	if got := ids(body(env.anon().Get(path + "?show_task=2"))); len(got) != 5 {
		t.Errorf("show_task=2 opens a page of %d tasks, want the page holding task 2", len(got))
	}
	// On the run page the table's links lead back to the table.
	page := body(env.anon().Get("/tests/view/" + r.ID.Hex()))
	if !strings.Contains(page, `href="/tests/view/`+r.ID.Hex()+`?page=2#tasks"`) {
		t.Error("the run page's task pager does not link to the run page's tasks")
	}
}

func TestUIViewLiveEloAndStats(t *testing.T) {
	env := newUIEnv(t)
	sprt := env.runsAdd("alice", runsTestRequest(nil))
	env.runsMakeActive(sprt.ID, runsTask(runsWorker("carol", "aaaa1111-1", 8), true, 300, 200, 500))
	fixed := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.SPRT, r.NumGames = nil, 20000 }))
	env.runsMakeActive(fixed.ID, runsTask(runsWorker("carol", "bbbb2222-1", 8), true, 30, 20, 50))

	for _, b := range []*browser{env.anon(), env.as("alice")} {
		w := b.Get("/tests/live_elo/" + sprt.ID.Hex())
		page := body(w)
		if w.Code != http.StatusOK {
			t.Fatalf("live Elo = %d", w.Code)
		}
		if n := strings.Count(page, `<svg class="gauge`); n != 3 {
			t.Errorf("live Elo has %d gauges, want 3 (LLR, LOS, Elo)", n)
		}
		if !strings.Contains(page, `id="live-games">1,000 (W: 300`) {
			t.Error("live Elo does not show the games")
		}
		if !strings.Contains(page, `data-live-src="/tests/view/`+sprt.ID.Hex()+`/events?for=live_elo"`) {
			t.Error("live Elo does not listen for updates")
		}
	}
	if w := env.anon().Get("/tests/live_elo/" + fixed.ID.Hex()); w.Code != http.StatusNotFound {
		t.Errorf("live Elo of a fixed-games run = %d, want 404", w.Code)
	}

	page := body(env.anon().Get("/tests/stats/" + sprt.ID.Hex()))
	for _, want := range []string{"Trinomial", "Pentanomial", "LLR, normalized, pentanomial", "LLR bounds", "SPRT Elo estimate", "Chi²"} {
		if !strings.Contains(page, want) {
			t.Errorf("the statistics page lacks %q", want)
		}
	}
	page = body(env.anon().Get("/tests/stats/" + fixed.ID.Hex()))
	if strings.Contains(page, "LLR bounds") || !strings.Contains(page, "Normalized Elo") {
		t.Error("a fixed-games run's statistics show an SPRT or lack the Elo")
	}
	st := runs.ViewCountsOf([]int{20, 50, 30})
	if math.Abs(st.Score-0.55) > 1e-12 || st.Games != 100 || math.Abs(st.DrawRate-0.5) > 1e-12 {
		t.Errorf("trinomial stats = %+v", st)
	}
	if p := runs.ViewCountsOf([]int{0, 0, 0, 0, 0}); !math.IsNaN(p.Score) || p.Games != 0 {
		t.Errorf("no pairs give score %v, games %d; want NaN and 0", p.Score, p.Games)
	}
}
