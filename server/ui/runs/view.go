package runs

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/stats"
)

// One run's pages: /tests/view/:id (everything about a run), /tests/tasks/:id (its task table
// alone), /tests/live_elo/:id (gauges of an SPRT) and /tests/stats/:id (raw statistics). Their
// live updates are in live.go.

// tasksPageSize is the number of tasks a page of the task table shows.
const tasksPageSize = 25

// viewRun reads the run of the :id parameter from the run source (the run cache on the
// primary). An id that is not a run id is a run that does not exist.
func (s *Server) viewRun(ctx context.Context, id string) (*rundb.Run, error) {
	if s.ui.Runs() == nil {
		return nil, errNoDatabase
	}
	oid, err := rundb.ParseObjectID(id)
	if err != nil {
		return nil, fmt.Errorf("run %q: %w", id, rundb.ErrNotFound)
	}
	return s.ui.Runs().Snapshot(ctx, oid)
}

// viewLoad reads the run of the request for a page; false once the error page is sent.
func (s *Server) viewLoad(c *gin.Context) (*rundb.Run, bool) {
	var r *rundb.Run
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var err error
		r, err = s.viewRun(ctx, c.Param("id"))
		return err
	})
	return r, ok
}

// viewContextAt returns a bare request context for the links of a table (pager, sort
// headers) as if the request had been for path with query q: live fragments are rendered by
// the event stream's request but link to the page. The links end with anchor ("#tasks"), so
// that a page reloaded for a new order or page opens at the table.
func viewContextAt(path, anchor string, q url.Values) *gin.Context {
	u := url.URL{Path: path, RawQuery: q.Encode(), Fragment: strings.TrimPrefix(anchor, "#")}
	return &gin.Context{Request: &http.Request{Method: http.MethodGet, URL: &u}}
}

// viewTaskRow is one row of a task table.
type viewTaskRow struct {
	ID            int
	Bad           bool
	Active        bool
	Highlight     bool
	Worker        string
	WorkerURL     string
	Info          string
	LastUpdated   time.Time
	Played        int
	NumGames      int
	Wins          int
	Losses        int
	Draws         int
	Ptnml         string
	Crashes       int
	TimeLosses    int
	Residual      string // "1.234", "-" when unknown, "" for SPSA runs
	ResidualColor string // green, yellow or red
	residual      float64
	PGN           string // the task's PGN, for logged-in users
}

// viewTasks is a task table: one page of the run's tasks, sorted and filtered.
type viewTasks struct {
	RunID        string
	Rows         []viewTaskRow
	Sort         ui.Sorting
	Pager        ui.Pager
	Q            string
	Action       string // where the search form goes
	ShowPenta    bool
	ShowResidual bool
	// Total is the number of tasks (bad ones included), Active of them active.
	Total, Active, Cores int
}

// tasksSortKeys are the columns of the task table; idx (newest first) is the default.
var tasksSortKeys = []string{"idx", "worker", "last_updated", "played", "wins", "losses", "draws",
	"crashes", "time", "residual"}

// viewTaskInfo describes the machine of a task.
func viewTaskInfo(w rundb.WorkerInfo) string {
	compiler := w.Compiler
	if compiler == "" {
		compiler = "g++"
	}
	arch := w.WorkerArch
	if arch == "" {
		arch = "unknown"
	}
	return fmt.Sprintf("os: %s; ram: %dMiB; compiler: %s %s; python: %s; worker: %d; arch: %s; features: %s",
		w.Uname, w.MaxMemory, compiler, runsDotted(w.GCCVersion), runsDotted(w.PythonVersion), w.Version, arch, w.ARCH)
}

// viewChi2Of runs the chi-square test of the run's workers.
func viewChi2Of(r *rundb.Run) stats.Chi2 {
	return stats.GetChi2(scheduler.TaskResults(r), nil)
}

// viewTaskRows lists every task of the run, the purged ones from bad_tasks (where their games
// and residual were kept), with the residual of each worker in the chi-square test: a purged
// task keeps the residual and colour it was purged with, a task with too many crashes or time
// losses counts as stats.CrashOrTimeResidual (red).
func viewTaskRows(r *rundb.Run, chi2 stats.Chi2, showTask int, user *rundb.User) []viewTaskRow {
	showResidual := r.Args.SPSA == nil
	approver := user != nil && user.IsApprover()
	row := func(id int, t rundb.Task) viewTaskRow {
		w := t.WorkerInfo
		st := t.Stats
		tr := viewTaskRow{ID: id, Bad: t.Bad, Active: t.Active, Highlight: id == showTask,
			Worker: w.LongName(), Info: viewTaskInfo(w), LastUpdated: t.LastUpdated,
			Played: st.Games(), NumGames: t.NumGames, Wins: st.Wins, Losses: st.Losses, Draws: st.Draws,
			Crashes: st.Crashes, TimeLosses: st.TimeLosses, residual: math.Inf(-1)}
		if approver && w.Username != "" {
			tr.WorkerURL = "/workers/" + url.PathEscape(w.ShortName())
		}
		if p := st.Pentanomial; len(p) == 5 {
			tr.Ptnml = fmt.Sprintf("[%d, %d, %d, %d, %d]", p[0], p[1], p[2], p[3], p[4])
		}
		if user != nil {
			tr.PGN = fmt.Sprintf("/api/pgn/%s-%d.pgn", r.ID.Hex(), id)
		}
		if !showResidual {
			return tr
		}
		var res float64
		color := ""
		switch {
		case t.Bad && t.Residual != nil:
			res, color = *t.Residual, t.ResidualColor
		case stats.CrashOrTime(st.Crashes, st.TimeLosses, st.Games()):
			res, color = stats.CrashOrTimeResidual, stats.ResidualRed
		default:
			v, ok := chi2.Residual[w.UniqueKey]
			if !ok {
				v = math.Inf(1)
			}
			res = v
			if !math.IsInf(v, 0) {
				color = stats.ResidualColor(v, chi2)
			}
		}
		// Colours of tasks purged by old fishtest versions were stored as CSS values.
		switch color {
		case "#44EB44":
			color = stats.ResidualGreen
		case "#FF6A6A":
			color = stats.ResidualRed
		}
		if math.IsInf(res, 0) || math.IsNaN(res) {
			// A purged task keeps its stored colour (an outlier's residual is infinite).
			tr.Residual = "-"
			if t.Bad {
				tr.ResidualColor = color
			}
		} else {
			tr.Residual, tr.ResidualColor, tr.residual = fmt.Sprintf("%.3f", res), color, res
		}
		return tr
	}
	rows := make([]viewTaskRow, 0, len(r.Tasks)+len(r.BadTasks))
	for i, t := range r.Tasks {
		if !t.Bad {
			rows = append(rows, row(i, t))
		}
	}
	for i, t := range r.BadTasks {
		id := i
		if t.TaskID != nil {
			id = *t.TaskID
		}
		t.Bad = true
		rows = append(rows, row(id, t))
	}
	return rows
}

// sortTaskRows orders task rows by a column, ties broken by task id.
func sortTaskRows(rows []viewTaskRow, key string, desc bool) {
	lower := strings.ToLower
	slices.SortStableFunc(rows, func(a, b viewTaskRow) int {
		var c int
		switch key {
		case "worker":
			c = cmp.Compare(lower(a.Worker), lower(b.Worker))
		case "last_updated":
			c = a.LastUpdated.Compare(b.LastUpdated)
		case "played":
			c = cmp.Or(cmp.Compare(a.Played, b.Played), cmp.Compare(a.NumGames, b.NumGames))
		case "wins":
			c = cmp.Compare(a.Wins, b.Wins)
		case "losses":
			c = cmp.Compare(a.Losses, b.Losses)
		case "draws":
			c = cmp.Compare(a.Draws, b.Draws)
		case "crashes":
			c = cmp.Compare(a.Crashes, b.Crashes)
		case "time":
			c = cmp.Compare(a.TimeLosses, b.TimeLosses)
		case "residual":
			c = cmp.Compare(a.residual, b.residual)
		}
		c = cmp.Or(c, cmp.Compare(a.ID, b.ID))
		if desc {
			c = -c
		}
		return c
	})
}

// viewTasksOf makes the task table of run r for a page at path whose query is q (sort, order,
// q, page, show_task). anchor ends the table's links ("#tasks" on the run page).
func viewTasksOf(r *rundb.Run, chi2 stats.Chi2, q url.Values, path, anchor string, user *rundb.User) viewTasks {
	showTask := -1
	if n, err := strconv.Atoi(q.Get("show_task")); err == nil && n >= 0 {
		showTask = n
	}
	rows := viewTaskRows(r, chi2, showTask, user)
	tb := viewTasks{RunID: r.ID.Hex(), Q: strings.TrimSpace(q.Get("q")), Action: path + anchor,
		ShowPenta: len(r.Results.Pentanomial) == 5, ShowResidual: r.Args.SPSA == nil, Total: len(rows)}
	for _, t := range r.Tasks {
		if t.Active {
			tb.Active++
			tb.Cores += t.WorkerInfo.Concurrency
		}
	}
	lc := viewContextAt(path, anchor, q)
	tb.Sort = ui.SortParam(lc, tasksSortKeys, "idx", true)
	sortTaskRows(rows, tb.Sort.Key, tb.Sort.Desc)
	if tb.Q != "" {
		needle := strings.ToLower(tb.Q)
		kept := rows[:0]
		for _, row := range rows {
			if strings.Contains(strings.ToLower(row.Worker), needle) || strings.Contains(strings.ToLower(row.Info), needle) {
				kept = append(kept, row)
			}
		}
		rows = kept
	}
	// Without an explicit page, open the page of the task to show.
	if q.Get("page") == "" && showTask >= 0 {
		if i := slices.IndexFunc(rows, func(t viewTaskRow) bool { return t.ID == showTask }); i >= 0 {
			q2 := url.Values{}
			for k, v := range q {
				q2[k] = v
			}
			q2.Set("page", strconv.Itoa(i/tasksPageSize+1))
			lc = viewContextAt(path, anchor, q2)
		}
	}
	tb.Pager = ui.NewPager(lc, len(rows), tasksPageSize)
	start := tb.Pager.Skip()
	tb.Rows = rows[min(start, len(rows)):min(len(rows), start+tasksPageSize)]
	return tb
}

// viewArg is one line of a run's arguments.
type viewArg struct {
	Name, Value, URL string
}

// viewRepo is the run's repository URL without a trailing slash.
func viewRepo(r *rundb.Run) string { return strings.TrimSuffix(r.Args.TestsRepo, "/") }

// viewArgs lists a run's arguments as fishtest's run page does.
func viewArgs(r *rundb.Run) []viewArg {
	a := r.Args
	repo := viewRepo(r)
	commit := func(sha string) string {
		if repo == "" || sha == "" {
			return ""
		}
		return repo + "/commit/" + sha
	}
	withMsg := func(tag, msg string) string {
		if msg == "" {
			return tag
		}
		return tag + "  (" + ui.ClipRunes(msg, 50) + ")"
	}
	out := []viewArg{{Name: "id", Value: r.ID.Hex()}}
	if r.RescheduledFrom != "" {
		out = append(out, viewArg{"rescheduled_from", r.RescheduledFrom, "/tests/view/" + url.PathEscape(r.RescheduledFrom)})
	}
	add := func(name, value, link string) { out = append(out, viewArg{name, value, link}) }
	add("new_tag", withMsg(a.NewTag, a.MsgNew), commit(a.ResolvedNew))
	add("new_signature", a.NewSignature, "")
	add("new_options", a.NewOptions, "")
	add("resolved_new", a.ResolvedNew, "")
	add("new_nets", strings.Join(a.NewNets, ", "), "")
	add("base_tag", withMsg(a.BaseTag, a.MsgBase), commit(a.ResolvedBase))
	add("base_signature", a.BaseSignature, "")
	add("base_options", a.BaseOptions, "")
	add("resolved_base", a.ResolvedBase, "")
	add("base_nets", strings.Join(a.BaseNets, ", "), "")
	if sp := a.SPRT; sp != nil {
		state := sp.State
		if state == "" {
			state = "-"
		}
		add("sprt", fmt.Sprintf("elo0: %.2f alpha: %.2f elo1: %.2f beta: %.2f state: %s (%s)",
			sp.Elo0, sp.Alpha, sp.Elo1, sp.Beta, state, chartSPRTModel(sp)), "")
	}
	add("num_games", strconv.Itoa(a.NumGames), "")
	if sp := a.SPSA; sp != nil {
		add("spsa", fmt.Sprintf("A: %g alpha: %g gamma: %g iterations: %d/%d", sp.A, sp.Alpha, sp.Gamma, sp.Iter, sp.NumIter), "")
	}
	add("tc", a.TC, "")
	add("new_tc", a.NewTC, "")
	add("threads", strconv.Itoa(a.Threads), "")
	add("book", a.Book, "")
	add("book_depth", a.BookDepth, "")
	add("auto_purge", strconv.FormatBool(a.AutoPurge), "")
	add("priority", strconv.FormatFloat(a.Priority, 'g', -1, 64), "")
	add("itp", strconv.FormatFloat(a.ITP, 'f', 0, 64), "")
	add("throughput", strconv.FormatFloat(a.Throughput, 'g', -1, 64), "")
	add("username", a.Username, "/tests/user/"+url.PathEscape(a.Username))
	add("tests_repo", a.TestsRepo, a.TestsRepo)
	if a.MasterRepo != "" {
		add("master_repo", a.MasterRepo, a.MasterRepo)
	}
	add("adjudication", strconv.FormatBool(a.Adjudication), "")
	if a.ArchFilter != "" {
		add("arch_filter", a.ArchFilter, "")
	}
	if a.Compiler != "" {
		add("compiler", a.Compiler, "")
	}
	add("info", a.Info, "")
	return out
}

// viewOKHash reports whether a Hash suits the TC ratio: 64 MiB at ratio 6 and in proportion,
// within [0.6, 1.5] of that; ratios below 5 are not checked (fishtest's ok_hash).
func viewOKHash(ratio float64, hash int) bool {
	if ratio < 5 {
		return true
	}
	target := 64 * ratio / 6
	q := float64(hash) / target
	return q >= 0.6 && q <= 1.5
}

// viewSameOptions compares engine options as sets of words, the order aside.
func viewSameOptions(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	slices.Sort(fa)
	slices.Sort(fb)
	return slices.Equal(fa, fb)
}

// viewWarnings are what an approver should look at twice, and notes what is merely unusual.
// GitHub ancestry checks (is base an ancestor of master and of new) need the GitHub API, which
// Shoal does not call, so they are not made.
func viewWarnings(r *rundb.Run) (warnings, notes []string) {
	a := r.Args
	if a.Throughput > runsNormalThroughput {
		warnings = append(warnings, "throughput exceeds the normal limit")
	}
	if a.Priority > 0 {
		warnings = append(warnings, "priority exceeds the normal limit")
	}
	if ratio, err := stats.TCRatio(a.TC, a.Threads); err != nil {
		warnings = append(warnings, "the time control cannot be read, so its Hash cannot be checked")
	} else if !viewOKHash(ratio, scheduler.HashMiB(a.BaseOptions)) || !viewOKHash(ratio, scheduler.HashMiB(a.NewOptions)) {
		warnings = append(warnings, "hash options are too low or too high for this TC")
	}
	if !viewSameOptions(a.BaseOptions, a.NewOptions) {
		warnings = append(warnings, "base options differ from new options")
	}
	switch {
	case r.Failures == 1:
		warnings = append(warnings, "this test had 1 failure")
	case r.Failures > 1:
		warnings = append(warnings, fmt.Sprintf("this test had %d failures", r.Failures))
	case r.Failed:
		warnings = append(warnings, "this is a failed test")
	}
	if a.NewTC != "" && a.TC != a.NewTC {
		warnings = append(warnings, "this is a test with time odds")
	}
	if a.ArchFilter != "" {
		warnings = append(warnings, "this test has a non-trivial arch filter")
	}
	if a.Compiler != "" {
		warnings = append(warnings, "this test has a pinned compiler")
	}
	if a.MasterRepo != "" {
		warnings = append(warnings, "the developer repository is not forked from official-stockfish/Stockfish")
	}
	if a.SPSA == nil && a.BaseSignature == a.NewSignature {
		notes = append(notes, "new signature and base signature are identical")
	}
	if r.Deleted {
		notes = append(notes, "this test has been deleted")
	}
	return warnings, notes
}

// viewPerms says which actions the viewer may take on the run; the action handlers check
// again.
type viewPerms struct {
	LoggedIn, Owner, Approver                  bool
	Modify, Stop, Approve, Purge, Delete, Info bool
	Reschedule                                 bool
	RunID                                      string
	CSRF                                       string
}

// viewPermsFor works out the viewer's actions. Only the primary takes actions.
func viewPermsFor(r *rundb.Run, user *rundb.User, primary bool, csrf string) viewPerms {
	p := viewPerms{RunID: r.ID.Hex(), CSRF: csrf}
	if user == nil {
		return p
	}
	p.LoggedIn, p.Reschedule = true, primary
	p.Owner = user.Username == r.Args.Username
	p.Approver = user.IsApprover()
	if !primary {
		return p
	}
	p.Modify = p.Owner || p.Approver
	p.Info = p.Owner
	p.Stop = p.Modify && !r.Finished
	p.Approve = p.Approver && !p.Owner && !r.Approved && !r.Finished
	p.Purge = p.Modify && r.Finished
	p.Delete = p.Modify && !r.Deleted
	return p
}

// viewOG is a run page's Open Graph description, for link previews.
type viewOG struct {
	Title, Description, URL string
}

// viewCharts are a run's charts ("" when they do not apply).
type viewCharts struct {
	LLR, Elo, SPSA template.HTML
}

func viewChartsOf(r *rundb.Run) viewCharts {
	return viewCharts{LLR: llrChart(r), Elo: eloChart(r), SPSA: spsaChart(r)}
}

// viewChi2 is the chi-square test of a run's workers, for people.
type viewChi2 struct {
	Chi2, P float64
	DOF     int
	Workers int
	Known   bool
}

func newViewChi2(c stats.Chi2) viewChi2 {
	return viewChi2{Chi2: c.Chi2, P: c.P, DOF: c.DOF, Workers: len(c.Workers), Known: !math.IsNaN(c.Chi2)}
}

// viewPageData is a run's page. The parts live.js replaces are blocks of view.html rendered
// with the same data.
type viewPageData struct {
	ui.Page
	Run      *rundb.Run
	ID       string
	RunTitle string
	Status   string
	Result   runsResult
	Args     []viewArg
	DiffURL  string
	// HasPatch: the page shows the run's patch (Patch), with the approval under it.
	HasPatch bool
	Patch    viewPatch
	// BuildStop is how many workers' build failures stop a run, StopHours the CPU hours their
	// users must have contributed for their reports to count.
	BuildStop, StopHours int
	Warnings             []string
	Notes                []string
	Perms                viewPerms
	Charts               viewCharts
	Chi2                 viewChi2
	Tasks                viewTasks
	SPSAParams           []rundb.SPSAParam
	OG                   viewOG
	LiveSrc              string
}

// viewSPRTElo is the Elo line of an SPRT run: its SPRT Elo estimate and LOS.
func viewSPRTElo(r *rundb.Run) string {
	sp := r.Args.SPRT
	if sp == nil || r.Results.Games() == 0 {
		return "" // before any game the estimate is 0 with an interval of ±1000: noise
	}
	e, err := sprtEloOf(sp, scheduler.ToStatsResults(r.Results))
	if err != nil {
		return ""
	}
	return fmt.Sprintf("Elo: %.2f [%.2f, %.2f] (95%%) LOS: %.1f%%", e.Elo, e.CI[0], e.CI[1], 100*e.LOS)
}

// viewLiveQuery is the page query an event stream needs to render the page's live parts as
// the page shows them (the task table's sort, filter and page).
func viewLiveQuery(q url.Values) string {
	keep := url.Values{}
	for _, k := range []string{"sort", "order", "q", "page", "show_task"} {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	return keep.Encode()
}

// viewDataOf makes the data of a run's page (or of its live parts) for a page request with
// query q. The page field is left to the caller, and so are the charts unless withCharts (they
// cost the most: tens of milliseconds for a long run).
//
// hasPatch says whether the page shows the run's patch (Server.hasPatch); the patch itself is
// the caller's to read.
func viewDataOf(r *rundb.Run, q url.Values, user *rundb.User, primary bool, csrf string, withCharts, hasPatch bool) viewPageData {
	id := r.ID.Hex()
	d := viewPageData{Run: r, ID: id, RunTitle: runTitle(r), Status: runStatus(r), Result: runResults(r),
		Args: viewArgs(r), Perms: viewPermsFor(r, user, primary, csrf), HasPatch: hasPatch,
		BuildStop: scheduler.BuildFailuresToStop, StopHours: scheduler.MinCPUHoursToStop}
	if d.Result.LLR != "" {
		d.Result.Elo = viewSPRTElo(r)
	}
	if repo := viewRepo(r); repo != "" && r.Args.ResolvedBase != "" && r.Args.ResolvedNew != "" {
		d.DiffURL = fmt.Sprintf("%s/compare/%s...%s", repo, runsClip10(r.Args.ResolvedBase), runsClip10(r.Args.ResolvedNew))
	}
	d.Warnings, d.Notes = viewWarnings(r)
	if withCharts {
		d.Charts = viewChartsOf(r)
	}
	chi2 := viewChi2Of(r)
	d.Chi2 = newViewChi2(chi2)
	d.Tasks = viewTasksOf(r, chi2, q, "/tests/view/"+id, "#tasks", user)
	if r.Args.SPSA != nil {
		d.SPSAParams = r.Args.SPSA.Params
	}
	if !r.Finished {
		d.LiveSrc = "/tests/view/" + id + "/events"
		if lq := viewLiveQuery(q); lq != "" {
			d.LiveSrc += "?" + lq
		}
	}
	return d
}

func runsClip10(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

// ViewPage is GET /tests/view/:id: a run's arguments, results, charts, patch, warnings, build
// failures, actions and tasks; 404 for a run that does not exist.
func (s *Server) ViewPage(c *gin.Context) {
	r, ok := s.viewLoad(c)
	if !ok {
		return
	}
	p := s.ui.Page(c, runTitle(r))
	d := viewDataOf(r, c.Request.URL.Query(), p.User, p.Primary, p.CSRF, true, s.hasPatch(r))
	d.Page = p
	if d.HasPatch {
		var warnings []string
		d.Patch, warnings = s.patchOf(c.Request.Context(), r)
		d.Warnings = append(d.Warnings, warnings...)
		if d.Patch.NotGitHub {
			d.Notes = append(d.Notes, "the repository is not on GitHub: only Shoal's worker, which gets the sources from this server, can play this test (fishtest's worker downloads them from GitHub)")
		}
	}
	lines := []string{}
	for _, l := range []string{d.Result.LLR, d.Result.Elo, d.Result.SPSA, d.Result.Games, d.Result.Ptnml} {
		if l != "" {
			lines = append(lines, l)
		}
	}
	d.OG = viewOG{Title: d.RunTitle, Description: strings.Join(lines, "\n"),
		URL: ui.SiteURL(c, "/tests/view/"+d.ID)}
	s.ui.Render(c, http.StatusOK, "view", d)
}

// tasksPageData is /tests/tasks/:id.
type tasksPageData struct {
	ui.Page
	ID       string
	RunTitle string
	Tasks    viewTasks
}

// TasksPage is GET /tests/tasks/:id: a run's task table alone, sortable, searchable (q), 25 a
// page, with show_task highlighted.
func (s *Server) TasksPage(c *gin.Context) {
	r, ok := s.viewLoad(c)
	if !ok {
		return
	}
	p := s.ui.Page(c, "Tasks - "+runTitle(r))
	d := tasksPageData{Page: p, ID: r.ID.Hex(), RunTitle: runTitle(r),
		Tasks: viewTasksOf(r, viewChi2Of(r), c.Request.URL.Query(), c.Request.URL.Path, "", p.User)}
	s.ui.Render(c, http.StatusOK, "tasks", d)
}
