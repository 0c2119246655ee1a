package runs

import (
	"cmp"
	"context"
	"errors"
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

// The run lists: the homepage (/tests), the finished runs (/tests/finished), one user's runs
// (/tests/user/:username) and the machines at work (/tests/machines). Run pages are in
// view.go, their live updates in live.go.

// Page sizes and caps of the run lists, fishtest's values.
const (
	runsPageSize     = 25   // finished runs per page
	machinesPageSize = 500  // rows of /tests/machines
	homeMachines     = 20   // rows of the homepage's workers panel
	finishedCapAnon  = 1000 // most runs a search finds for an anonymous visitor
	finishedCapUser  = 10000
	// runsUserMatches is the most usernames a user search on /tests/finished looks in.
	runsUserMatches = 100
	// runsLTCRatio is the TC ratio above which a run counts as long time control (an SMP STC
	// run is exactly 4).
	runsLTCRatio = 4
	// runsNormalThroughput is the throughput above which the run page warns.
	runsNormalThroughput = 100
)

// plural writes a count of word: "1 test", "2 tests".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// TemplateFuncs are the template functions of the run pages, which ui.New is given.
func TemplateFuncs() template.FuncMap {
	return template.FuncMap{
		// runsPlural writes "1 test", "2 tests".
		"runsPlural": plural,
		// runsMillions writes nodes per second in millions: "12.34".
		"runsMillions": func(x float64) string { return strconv.FormatFloat(x/1e6, 'f', 2, 64) },
		// runsRatio is a/b.
		"runsRatio": func(a, b float64) float64 { return a / b },
		// runsPercent writes a fraction as a percentage with d decimals.
		"runsPercent": func(d int, x float64) string {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "-"
			}
			return strconv.FormatFloat(100*x, 'f', d, 64) + "%"
		},
	}
}

// errNoDatabase is the error of a page asked for on a server built without a database.
var errNoDatabase = errors.New("no database")

// runStores are the stores the run lists read.
type runStores struct {
	Runs  Runs
	Users Users
}

// runsDB returns the database's runs and users, or an error a page turns into "try again
// shortly".
func (s *Server) runsDB() (runStores, error) {
	if s.deps.Runs == nil {
		return runStores{}, errNoDatabase
	}
	return runStores{Runs: s.deps.Runs, Users: s.deps.Users}, nil
}

// runsResult is what a run's results say, line by line, as fishtest's run tables and run page
// show them. Empty lines are left out.
type runsResult struct {
	// Style colours the results: green (accepted), blue (accepted, a test for a loss), yellow
	// (rejected but more wins than losses), red (rejected), or "" (undecided).
	Style string
	LLR   string // SPRT: "LLR: 1.23 (-2.94,2.94) <0.00,2.00>"
	Elo   string // fixed games: "Elo: 1.20 ± 3.4 (95%) LOS: 75.3%"
	Games string // "Total: 1000 W: 300 L: 280 D: 420"
	Ptnml string // "Ptnml(0-2): 1, 2, 3, 4, 5"
	SPSA  string // "120/1000 iterations"
}

// runsFixedElo is the Elo estimate of a run from its pentanomial (its trinomial for old runs).
func runsFixedElo(res rundb.Results) (stats.Elo, error) {
	if len(res.Pentanomial) == 5 {
		return stats.GetElo(res.Pentanomial)
	}
	return stats.GetElo([]int{res.Losses, res.Draws, res.Wins})
}

// runResults describes a run's results (fishtest's format_results).
func runResults(r *rundb.Run) runsResult {
	res := r.Results
	var out runsResult
	games := fmt.Sprintf("Total: %d W: %d L: %d D: %d", res.Games(), res.Wins, res.Losses, res.Draws)
	if sp := r.Args.SPSA; sp != nil {
		out.SPSA = fmt.Sprintf("%d/%d iterations", sp.Iter, sp.NumIter)
		out.Games = fmt.Sprintf("%d/%d games played", res.Games(), r.Args.NumGames)
		return out
	}
	state := ""
	if sp := r.Args.SPRT; sp != nil {
		state = sp.State
		out.LLR = fmt.Sprintf("LLR: %.2f (%.2f,%.2f) %s", sp.LLR, sp.LowerBound, sp.UpperBound,
			stats.FormatBounds(chartSPRTModel(sp), sp.Elo0, sp.Elo1))
	} else if e, err := runsFixedElo(res); err == nil {
		out.Elo = fmt.Sprintf("Elo: %.2f ± %.1f (95%%) LOS: %.1f%%", e.Elo, e.Elo95, 100*e.LOS)
		switch {
		case e.LOS < 0.05:
			state = "rejected"
		case e.LOS > 0.95:
			state = "accepted"
		}
	}
	out.Games = games
	if len(res.Pentanomial) == 5 {
		p := res.Pentanomial
		out.Ptnml = fmt.Sprintf("Ptnml(0-2): %d, %d, %d, %d, %d", p[0], p[1], p[2], p[3], p[4])
	}
	switch state {
	case "rejected":
		out.Style = "red"
		if res.Wins > res.Losses {
			out.Style = "yellow"
		}
	case "accepted":
		out.Style = "green"
		if sp := r.Args.SPRT; sp != nil && sp.Elo0+sp.Elo1 < 0 {
			out.Style = "blue"
		}
	}
	return out
}

// runStatus is a run's state in one word: finished, failed, active (has workers), paused
// (approved, waiting for workers) or pending (waiting for approval).
func runStatus(r *rundb.Run) string {
	switch {
	case r.Finished && r.Failed:
		return "failed"
	case r.Finished:
		return "finished"
	case r.Workers > 0:
		return "active"
	case r.Approved:
		return "paused"
	}
	return "pending"
}

// runTitle is a run's title: "SPRT patch vs master", "SPSA tune" or "20000 games - patch vs master".
func runTitle(r *rundb.Run) string {
	switch {
	case r.Args.SPRT != nil:
		return fmt.Sprintf("SPRT %s vs %s", r.Args.NewTag, r.Args.BaseTag)
	case r.Args.SPSA != nil:
		return "SPSA " + r.Args.NewTag
	}
	return fmt.Sprintf("%d games - %s vs %s", r.Args.NumGames, r.Args.NewTag, r.Args.BaseTag)
}

// runKind is "sprt", "spsa" or "numgames".
func runKind(r *rundb.Run) string {
	switch {
	case r.Args.SPSA != nil:
		return "spsa"
	case r.Args.SPRT != nil:
		return "sprt"
	}
	return "numgames"
}

// runTCClass is "ltc" for runs whose TC ratio is above runsLTCRatio, else "stc".
func runTCClass(r *rundb.Run) string {
	if ratio, err := stats.TCRatio(r.Args.TC, r.Args.Threads); err == nil && ratio > runsLTCRatio {
		return "ltc"
	}
	return "stc"
}

// runThreadsClass is "smp" for runs on more than one thread, else "st".
func runThreadsClass(r *rundb.Run) string {
	if r.Args.Threads > 1 {
		return "smp"
	}
	return "st"
}

// runsRow is one run in a run table.
type runsRow struct {
	ID       string
	Start    time.Time
	Username string
	NewTag   string
	BaseTag  string
	TC       string
	Threads  int
	Cores    int
	Workers  int
	Finished bool
	Approved bool
	Status   string
	Info     string
	Kind     string // sprt, spsa or numgames: the type filter
	TCClass  string // stc or ltc: the time control filter
	SMP      string // st or smp: the threads filter
	Result   runsResult
	// Hidden marks an active run the homepage's filters leave out; it stays in the table so
	// that the filters can show it again without a reload.
	Hidden bool
}

func newRunsRow(r *rundb.Run) runsRow {
	return runsRow{
		ID: r.ID.Hex(), Start: r.StartTime, Username: r.Args.Username, NewTag: r.Args.NewTag,
		BaseTag: r.Args.BaseTag, TC: r.Args.TC, Threads: max(r.Args.Threads, 1), Cores: r.Cores,
		Workers: r.Workers, Finished: r.Finished, Approved: r.Approved, Status: runStatus(r),
		Info: r.Args.Info, Kind: runKind(r), TCClass: runTCClass(r), SMP: runThreadsClass(r),
		Result: runResults(r),
	}
}

func runsRows(runs []*rundb.Run) []runsRow {
	out := make([]runsRow, 0, len(runs))
	for _, r := range runs {
		out = append(out, newRunsRow(r))
	}
	return out
}

// runsSummary is the homepage's line of numbers.
type runsSummary struct {
	Machines       int
	Cores          int
	NPS            float64
	GamesPerMinute float64
	PendingHours   float64
}

// runsSplit sorts unfinished runs into pending (no workers: waiting for approval or for
// workers), by priority then internal throughput, and active, SPRT runs first and the closest
// to a decision first (fishtest's order), and sums the homepage's numbers.
func runsSplit(unfinished []*rundb.Run) (pending, active []*rundb.Run, sum runsSummary) {
	for _, r := range unfinished {
		if r.Workers > 0 {
			active = append(active, r)
		} else {
			pending = append(pending, r)
		}
	}
	slices.SortStableFunc(pending, func(a, b *rundb.Run) int {
		return cmp.Or(cmp.Compare(a.Args.Priority, b.Args.Priority), cmp.Compare(a.Args.ITP, b.Args.ITP))
	})
	// Descending by (is SPRT, LLR, is not SPSA, games).
	key := func(r *rundb.Run) (sprt int, llr float64, notSPSA int, games int) {
		if r.Args.SPRT != nil {
			sprt, llr = 1, r.Args.SPRT.LLR
		}
		if r.Args.SPSA == nil {
			notSPSA = 1
		}
		return sprt, llr, notSPSA, r.Results.Games()
	}
	slices.SortStableFunc(active, func(a, b *rundb.Run) int {
		as, al, an, ag := key(a)
		bs, bl, bn, bg := key(b)
		return cmp.Or(cmp.Compare(bs, as), cmp.Compare(bl, al), cmp.Compare(bn, an), cmp.Compare(bg, ag))
	})
	for _, r := range active {
		sum.Machines += r.Workers
		sum.Cores += r.Cores
		sum.NPS += r.NPS
		sum.GamesPerMinute += r.GamesPerMinute
	}
	if sum.Cores > 0 {
		for _, r := range unfinished {
			if h, err := runRemainingHours(r); err == nil {
				sum.PendingHours += h / float64(sum.Cores)
			}
		}
	}
	return pending, active, sum
}

// runRemainingHours estimates the core-hours a run still needs.
func runRemainingHours(r *rundb.Run) (float64, error) {
	in := stats.RemainingInput{Pentanomial: r.Results.Pentanomial, Wins: r.Results.Wins,
		Losses: r.Results.Losses, Draws: r.Results.Draws, NumGames: r.Args.NumGames, TC: r.Args.TC,
		Threads: r.Args.Threads}
	if sp := r.Args.SPRT; sp != nil {
		in.SPRT = &stats.SPRT{Alpha: sp.Alpha, Beta: sp.Beta, LLR: sp.LLR}
		if o := sp.Overshoot; o != nil {
			in.SPRT.Overshoot = &stats.Overshoot{M0: o.M0, Sq0: o.Sq0, M1: o.M1, Sq1: o.Sq1}
		}
	}
	return stats.RemainingHours(in)
}

// The homepage's filters of the active runs: each group is a query parameter that may be
// repeated, one value per ticked box. A group left out of the query shows every value, unless
// the filter form was sent (runsFilterSent), in which case it shows none.
var runsFilterGroups = []struct {
	Param, Label string
	Values       [][2]string // value, label
}{
	{"type", "Type", [][2]string{{"sprt", "SPRT"}, {"spsa", "SPSA"}, {"numgames", "NumGames"}}},
	{"tc", "TC", [][2]string{{"stc", "STC"}, {"ltc", "LTC"}}},
	{"threads", "Threads", [][2]string{{"st", "ST"}, {"smp", "SMP"}}},
}

// runsFilterSent is the hidden field of the filter form: with it, an unticked group is empty.
const runsFilterSent = "filter"

// runsFilterOption is one checkbox of the homepage's filters.
type runsFilterOption struct {
	Value, Label string
	On           bool
}

// runsFilterGroup is one group of the homepage's filters.
type runsFilterGroup struct {
	Param, Label string
	Options      []runsFilterOption
}

// runsFilters reads the homepage's filters from the query.
func runsFilters(q url.Values) []runsFilterGroup {
	sent := q.Get(runsFilterSent) != ""
	out := make([]runsFilterGroup, 0, len(runsFilterGroups))
	for _, g := range runsFilterGroups {
		on := q[g.Param]
		grp := runsFilterGroup{Param: g.Param, Label: g.Label}
		for _, v := range g.Values {
			grp.Options = append(grp.Options, runsFilterOption{Value: v[0], Label: v[1],
				On: slices.Contains(on, v[0]) || (!sent && len(on) == 0)})
		}
		out = append(out, grp)
	}
	return out
}

// runsFilterMatch reports whether the filters show row.
func runsFilterMatch(filters []runsFilterGroup, row runsRow) bool {
	for _, g := range filters {
		val := map[string]string{"type": row.Kind, "tc": row.TCClass, "threads": row.SMP}[g.Param]
		for _, o := range g.Options {
			if o.Value == val && !o.On {
				return false
			}
		}
	}
	return true
}

// runsMachine is one worker at work: a row of the machines table.
type runsMachine struct {
	Username    string
	Concurrency int
	Worker      string // short name, for /workers/{name}
	UniqueKey   string // its first segment
	NPS         float64
	MaxMemory   int
	Uname       string
	Arch        string
	Compiler    string
	Python      string
	Version     string
	Country     string
	RunID       string
	TaskID      int
	RunLabel    string
	LastUpdated time.Time
}

// runsDotted writes a version as "1.2.3".
func runsDotted(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
}

// runsClip cuts s to n bytes with "...".
func runsClip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// runsMachinesOf lists the active tasks of the unfinished runs as machines: from the
// scheduler on the primary (reading each run in place; unfinished is not used there), else by
// reading each run that may have workers from the database (active runs are few).
func (s *Server) runsMachinesOf(ctx context.Context, unfinished []*rundb.Run) ([]runsMachine, error) {
	if sched := s.ui.Scheduler(); sched != nil {
		tasks, err := sched.ActiveTasks(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]runsMachine, len(tasks))
		for i, t := range tasks {
			out[i] = runsMachineOf(t)
		}
		return out, nil
	}
	var out []runsMachine
	for _, lr := range unfinished {
		if !lr.Approved && lr.Workers == 0 {
			continue // never handed out a task
		}
		r, err := s.ui.Runs().Snapshot(ctx, lr.ID)
		if errors.Is(err, rundb.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, err
		}
		for i, t := range r.Tasks {
			if t.Active {
				out = append(out, runsMachineOf(scheduler.ActiveTask{RunID: r.ID, NewTag: r.Args.NewTag,
					TaskID: i, Worker: t.WorkerInfo, LastUpdated: t.LastUpdated}))
			}
		}
	}
	return out, nil
}

// runsMachineOf is one row of the machines table.
func runsMachineOf(t scheduler.ActiveTask) runsMachine {
	w := t.Worker
	version := strconv.Itoa(w.Version)
	if w.Modified {
		version += "*"
	}
	compiler := w.Compiler
	if compiler == "" {
		compiler = "g++"
	}
	return runsMachine{
		Username: w.Username, Concurrency: w.Concurrency, Worker: w.ShortName(),
		UniqueKey: strings.SplitN(w.UniqueKey, "-", 2)[0], NPS: w.NPS, MaxMemory: w.MaxMemory,
		Uname: w.Uname, Arch: w.WorkerArch, Compiler: strings.TrimSpace(compiler + " " + runsDotted(w.GCCVersion)),
		Python: runsDotted(w.PythonVersion), Version: version, Country: strings.ToLower(w.CountryCode),
		RunID: t.RunID.Hex(), TaskID: t.TaskID, RunLabel: runsClip(t.NewTag, 20) + "/" + strconv.Itoa(t.TaskID),
		LastUpdated: t.LastUpdated,
	}
}

// machinesSortKeys are the columns /tests/machines sorts by; last_active is the default.
var machinesSortKeys = []string{"last_active", "machine", "cores", "uuid", "mnps", "ram", "system",
	"arch", "compiler", "python", "worker", "running_on"}

// sortMachines orders machines by a column, ties broken by worker name.
func sortMachines(ms []runsMachine, key string, desc bool) {
	lower := strings.ToLower
	slices.SortStableFunc(ms, func(a, b runsMachine) int {
		var c int
		switch key {
		case "machine":
			c = cmp.Compare(lower(a.Username), lower(b.Username))
		case "cores":
			c = cmp.Compare(a.Concurrency, b.Concurrency)
		case "uuid":
			c = cmp.Compare(lower(a.UniqueKey), lower(b.UniqueKey))
		case "mnps":
			c = cmp.Compare(a.NPS, b.NPS)
		case "ram":
			c = cmp.Compare(a.MaxMemory, b.MaxMemory)
		case "system":
			c = cmp.Compare(lower(a.Uname), lower(b.Uname))
		case "arch":
			c = cmp.Compare(lower(a.Arch), lower(b.Arch))
		case "compiler":
			c = cmp.Compare(lower(a.Compiler), lower(b.Compiler))
		case "python":
			c = cmp.Compare(a.Python, b.Python)
		case "worker":
			c = cmp.Compare(a.Version, b.Version)
		case "running_on":
			c = cmp.Compare(lower(a.RunLabel), lower(b.RunLabel))
		default:
			c = a.LastUpdated.Compare(b.LastUpdated)
		}
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a.Worker, b.Worker))
	})
}

// filterMachines keeps the machines whose fields contain q (ignoring case) and, with mine, the
// machines of username.
func filterMachines(ms []runsMachine, q string, mine bool, username string) []runsMachine {
	q = strings.ToLower(strings.TrimSpace(q))
	out := ms[:0:0]
	for _, m := range ms {
		if mine && m.Username != username {
			continue
		}
		if q != "" {
			fields := []string{m.Username, strconv.Itoa(m.Concurrency), m.UniqueKey, m.Worker,
				fmt.Sprintf("%.2f", m.NPS/1e6), strconv.Itoa(m.MaxMemory), m.Uname, m.Arch, m.Compiler,
				m.Python, m.Version, m.RunLabel}
			if !slices.ContainsFunc(fields, func(f string) bool { return strings.Contains(strings.ToLower(f), q) }) {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// testsPageData is the homepage.
type testsPageData struct {
	ui.Page
	// First is page 1: the unfinished runs, the numbers and the workers panel come only there.
	First     bool
	Summary   runsSummary
	Pending   []runsRow
	Active    []runsRow
	Shown     int // active runs the filters show
	Filters   []runsFilterGroup
	Failed    []runsRow
	Finished  []runsRow
	Pager     ui.Pager
	Machines  []runsMachine
	MachinesN int
	// LiveSrc is the event stream the page's live.js listens to ("" for none).
	LiveSrc string
}

// unfinishedRuns lists the unfinished runs without their tasks: from the scheduler's run cache
// on the primary (the database lags it by the write-behind), from the database on a secondary.
func (s *Server) unfinishedRuns(ctx context.Context, db runStores) ([]*rundb.Run, error) {
	if sched := s.ui.Scheduler(); sched != nil {
		return sched.UnfinishedRuns(ctx)
	}
	return db.Runs.Active(ctx)
}

// homeUnfinished reads the unfinished runs (without tasks), the homepage's and the live
// stream's source.
func (s *Server) homeUnfinished(ctx context.Context, db runStores, username string) ([]*rundb.Run, error) {
	runs, err := s.unfinishedRuns(ctx, db)
	if err != nil || username == "" {
		return runs, err
	}
	mine := runs[:0]
	for _, r := range runs {
		if r.Args.Username == username {
			mine = append(mine, r)
		}
	}
	return mine, nil
}

// fillUnfinished puts the unfinished runs into the page: pending, active (with the filters
// applied) and the numbers.
func (d *testsPageData) fillUnfinished(unfinished []*rundb.Run, q url.Values) {
	pending, active, sum := runsSplit(unfinished)
	d.Summary, d.Pending, d.Active = sum, runsRows(pending), runsRows(active)
	d.Filters = runsFilters(q)
	d.Shown = 0
	for i := range d.Active {
		d.Active[i].Hidden = !runsFilterMatch(d.Filters, d.Active[i])
		if !d.Active[i].Hidden {
			d.Shown++
		}
	}
}

// TestsPage is GET /tests, the homepage: the numbers of the fleet, the pending, active and
// failed runs, the workers panel and the finished runs, 25 a page. Pages after the first show
// only finished runs.
func (s *Server) TestsPage(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.ui.Error(c, err)
		return
	}
	d := testsPageData{First: ui.PageParam(c) == 1}
	var unfinished, finished []*rundb.Run
	var total int
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var err error
		if total, err = db.Runs.CountFinished(ctx, rundb.RunSearch{}, 0); err != nil {
			return err
		}
		d.Pager = ui.NewPager(c, total, runsPageSize)
		d.First = d.Pager.Page == 1
		if finished, err = db.Runs.SearchFinished(ctx, rundb.RunSearch{}, d.Pager.Skip(), runsPageSize); err != nil {
			return err
		}
		if !d.First {
			return nil
		}
		if unfinished, err = s.homeUnfinished(ctx, db, ""); err != nil {
			return err
		}
		machines, err := s.runsMachinesOf(ctx, unfinished)
		if err != nil {
			return err
		}
		sortMachines(machines, "last_active", true)
		d.MachinesN = len(machines)
		d.Machines = machines[:min(len(machines), homeMachines)]
		return nil
	})
	if !ok {
		return
	}
	d.Finished = runsRows(finished)
	title := "Tests"
	if d.First {
		d.fillUnfinished(unfinished, c.Request.URL.Query())
		for _, r := range d.Finished {
			if r.Status == "failed" {
				d.Failed = append(d.Failed, r)
			}
		}
		d.LiveSrc = "/tests/events"
	} else {
		title = fmt.Sprintf("Finished tests - page %d", d.Pager.Page)
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, http.StatusOK, "tests", d)
}

// finishedTab is one tab of /tests/finished.
type finishedTab struct {
	Param, Label, URL string
	Current           bool
}

// finishedPageData is /tests/finished.
type finishedPageData struct {
	ui.Page
	Tabs []finishedTab
	// UserQuery and Text are the search; Search is true when either is set.
	UserQuery, Text string
	Search          bool
	// Usernames are the users a user search found.
	Usernames []string
	// MaxCount is the most runs a search counts, and Capped whether it reached it.
	MaxCount int
	Capped   bool
	Runs     []runsRow
	Pager    ui.Pager
}

// finishedTabs are the tabs of /tests/finished: their query flag and label.
var finishedTabs = [][2]string{{"", "All"}, {"success_only", "Greens"}, {"yellow_only", "Yellows"}, {"ltc_only", "LTC"}}

// finishedMaxCount is the cap on the runs a search counts: what max_count asks for, within the
// visitor's limit (1000 anonymous, 10000 logged in), which is also the default.
func finishedMaxCount(c *gin.Context) int {
	limit := finishedCapAnon
	if ui.CurrentUser(c) != nil {
		limit = finishedCapUser
	}
	if n, err := strconv.Atoi(c.Query("max_count")); err == nil && n > 0 && n < limit {
		return n
	}
	return limit
}

// FinishedPage is GET /tests/finished: finished, undeleted runs, 25 a page, newest first, with
// tabs for green, yellow and LTC runs and a search by user (a part of the name) and by text in
// the info. A search counts at most max_count runs.
func (s *Server) FinishedPage(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.ui.Error(c, err)
		return
	}
	q := c.Request.URL.Query()
	d := finishedPageData{UserQuery: strings.TrimSpace(q.Get("user")), Text: strings.TrimSpace(q.Get("text"))}
	d.Search = d.UserQuery != "" || d.Text != ""
	search := rundb.RunSearch{Text: d.Text}
	tab := ""
	for _, t := range finishedTabs[1:] {
		if q.Get(t[0]) != "" {
			tab = t[0]
			break
		}
	}
	switch tab {
	case "success_only":
		search.SuccessOnly = true
	case "yellow_only":
		search.YellowOnly = true
	case "ltc_only":
		search.LTCOnly = true
	}
	for _, t := range finishedTabs {
		tq := url.Values{}
		for _, k := range []string{"user", "text", "max_count"} {
			if v := q.Get(k); v != "" {
				tq.Set(k, v)
			}
		}
		if t[0] != "" {
			tq.Set(t[0], "1")
		}
		u := url.URL{Path: "/tests/finished", RawQuery: tq.Encode()}
		d.Tabs = append(d.Tabs, finishedTab{Param: t[0], Label: t[1], URL: u.String(), Current: t[0] == tab})
	}
	if d.Search {
		d.MaxCount = finishedMaxCount(c)
	}
	var runs []*rundb.Run
	ok := s.ui.Do(c, func(ctx context.Context) error {
		if d.UserQuery != "" {
			names, err := db.Users.UsernamesContaining(ctx, d.UserQuery, runsUserMatches)
			if err != nil {
				return err
			}
			d.Usernames = names
			search.Usernames = append([]string{}, names...) // none found matches nothing
		}
		total, err := db.Runs.CountFinished(ctx, search, d.MaxCount)
		if err != nil {
			return err
		}
		d.Capped = d.MaxCount > 0 && total >= d.MaxCount
		d.Pager = ui.NewPager(c, total, runsPageSize)
		limit := runsPageSize
		if d.MaxCount > 0 {
			limit = min(limit, d.MaxCount-d.Pager.Skip())
		}
		if limit < 1 {
			return nil
		}
		runs, err = db.Runs.SearchFinished(ctx, search, d.Pager.Skip(), limit)
		return err
	})
	if !ok {
		return
	}
	d.Runs = runsRows(runs)
	title := "Finished tests"
	if d.Search {
		title = "Search finished tests"
	}
	for _, t := range d.Tabs {
		if t.Current && t.Label != "All" {
			title += " - " + t.Label
		}
	}
	if d.Pager.Page > 1 {
		title += fmt.Sprintf(" - page %d", d.Pager.Page)
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, http.StatusOK, "tests_finished", d)
}

// userTestsData is /tests/user/:username.
type userTestsData struct {
	ui.Page
	Username string
	First    bool
	Pending  []runsRow
	Active   []runsRow
	Shown    int // active runs shown: all of them, this page has no filters
	Finished []runsRow
	Pager    ui.Pager
	LiveSrc  string
}

// UserTestsPage is GET /tests/user/:username: the user's unfinished runs (on the first page)
// and finished runs, 25 a page; 404 for a user who does not exist.
func (s *Server) UserTestsPage(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.ui.Error(c, err)
		return
	}
	name := c.Param("username")
	d := userTestsData{Username: name}
	var unfinished, finished []*rundb.Run
	ok := s.ui.Do(c, func(ctx context.Context) error {
		if _, err := db.Users.Get(ctx, name); err != nil {
			return err
		}
		search := rundb.RunSearch{Usernames: []string{name}}
		total, err := db.Runs.CountFinished(ctx, search, 0)
		if err != nil {
			return err
		}
		d.Pager = ui.NewPager(c, total, runsPageSize)
		d.First = d.Pager.Page == 1
		if finished, err = db.Runs.SearchFinished(ctx, search, d.Pager.Skip(), runsPageSize); err != nil {
			return err
		}
		if d.First {
			unfinished, err = s.homeUnfinished(ctx, db, name)
		}
		return err
	})
	if !ok {
		return
	}
	pending, active, _ := runsSplit(unfinished)
	d.Pending, d.Active, d.Finished = runsRows(pending), runsRows(active), runsRows(finished)
	d.Shown = len(d.Active)
	if d.First {
		d.LiveSrc = "/tests/events?user=" + url.QueryEscape(name)
	}
	title := name + " - tests"
	if d.Pager.Page > 1 {
		title += fmt.Sprintf(" - page %d", d.Pager.Page)
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, http.StatusOK, "tests_user", d)
}

// machinesPageData is /tests/machines.
type machinesPageData struct {
	ui.Page
	Machines []runsMachine
	Total    int // every machine at work, before the filters
	Sort     ui.Sorting
	Pager    ui.Pager
	Q        string
	Mine     bool
}

// MachinesPage is GET /tests/machines: every worker with an active task, 500 a page, sortable,
// filtered by a text (q) and, for a logged-in user, to their own workers (my_workers).
func (s *Server) MachinesPage(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.ui.Error(c, err)
		return
	}
	user := ui.CurrentUser(c)
	d := machinesPageData{Q: strings.TrimSpace(c.Query("q")), Sort: ui.SortParam(c, machinesSortKeys, "last_active", true)}
	switch c.Query("my_workers") {
	case "1", "true", "on", "yes":
		d.Mine = user != nil
	}
	var machines []runsMachine
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var unfinished []*rundb.Run
		var err error
		if s.ui.Scheduler() == nil { // the primary's scheduler lists the tasks without them
			if unfinished, err = s.unfinishedRuns(ctx, db); err != nil {
				return err
			}
		}
		machines, err = s.runsMachinesOf(ctx, unfinished)
		return err
	})
	if !ok {
		return
	}
	d.Total = len(machines)
	username := ""
	if user != nil {
		username = user.Username
	}
	machines = filterMachines(machines, d.Q, d.Mine, username)
	sortMachines(machines, d.Sort.Key, d.Sort.Desc)
	d.Pager = ui.NewPager(c, len(machines), machinesPageSize)
	d.Machines = machines[d.Pager.Skip():min(len(machines), d.Pager.Skip()+machinesPageSize)]
	d.Page = s.ui.Page(c, "Machines")
	s.ui.Render(c, http.StatusOK, "machines", d)
}
