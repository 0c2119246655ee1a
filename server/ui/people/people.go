package people

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui"
)

// --- User management ---

const userManagementPageSize = 25

// userGroups are the tabs of the user management page, in order.
var userGroups = []struct{ Key, Label string }{
	{rundb.UsersPending, "Pending"}, {rundb.UsersBlocked, "Blocked"}, {rundb.UsersIdle, "Idle"},
	{rundb.UsersApprovers, "Approvers"}, {rundb.UsersAll, "All"},
}

type userTab struct {
	Key, Label, URL string
	Count           int
	Current         bool
}

type userManagementData struct {
	ui.Page
	Group  string
	Tabs   []userTab
	Search string
	Users  []*rundb.User
	Sort   ui.Sorting
	Pager  ui.Pager
}

// UserManagementPage lists accounts by group for approvers: pending (the default, what needs
// doing), blocked, idle (never contributed), approvers, everyone.
func (s *Server) UserManagementPage(c *gin.Context) {
	if _, ok := s.ui.RequireApprover(c); !ok {
		return
	}
	group := c.Query("group")
	if !slices.ContainsFunc(userGroups, func(g struct{ Key, Label string }) bool { return g.Key == group }) {
		group = rundb.UsersPending
	}
	d := userManagementData{Group: group, Search: strings.TrimSpace(c.Query("q"))}
	d.Sort = ui.SortParam(c, []string{"username", "registration", "groups", "email"}, "registration", true)
	d.Sort.AscendingUnlessAsked(c, "username", "groups", "email")
	var n map[string]int
	if !s.ui.Do(c, func(ctx context.Context) error {
		counts, err := s.deps.People.CountUserGroups(ctx)
		if err != nil {
			return err
		}
		n = map[string]int{rundb.UsersPending: counts.Pending, rundb.UsersBlocked: counts.Blocked,
			rundb.UsersIdle: counts.Idle, rundb.UsersApprovers: counts.Approvers, rundb.UsersAll: counts.All}
		// The page's size: the group's count, already known, unless a search narrows it.
		total := n[group]
		if d.Search != "" {
			if _, total, err = s.deps.People.ListUsers(ctx, rundb.UserQuery{Group: group, Search: d.Search, Limit: 1}); err != nil {
				return err
			}
		}
		d.Pager = ui.NewPager(c, total, userManagementPageSize)
		q := rundb.UserQuery{Group: group, Search: d.Search, Sort: d.Sort.Key, Desc: d.Sort.Desc,
			Skip: d.Pager.Skip(), Limit: userManagementPageSize}
		d.Users, _, err = s.deps.People.ListUsers(ctx, q)
		return err
	}) {
		return
	}
	for _, g := range userGroups {
		u := url.URL{Path: "/user_management", RawQuery: url.Values{"group": {g.Key}}.Encode()}
		d.Tabs = append(d.Tabs, userTab{Key: g.Key, Label: g.Label, URL: u.String(), Count: n[g.Key], Current: g.Key == group})
	}
	d.Page = s.ui.Page(c, "Users")
	s.ui.Render(c, http.StatusOK, "user_management", d)
}

// --- Workers ---

const (
	workersPageSize = 25
	// blockedRecently splits the blocked-workers list: changed within it, or before.
	blockedRecently = 5 * 24 * time.Hour
)

// shortWorkerName is a worker's short name, "USER-Ncores-ID": the user who runs it, its
// cores and the first part of its unique key.
var shortWorkerName = regexp.MustCompile(`^([A-Za-z0-9]+)-[0-9]+cores-[A-Za-z0-9]{2,8}$`)

// workerOwner returns the user who runs a worker, from its short name, or "" if name is not a
// short worker name.
func workerOwner(name string) string {
	m := shortWorkerName.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	return m[1]
}

type blockedWorkerRow struct {
	Name        string
	Message     string
	LastUpdated time.Time
	// QuarantinedSince is when the quarantine rule blocked it; zero for a block by a person.
	QuarantinedSince time.Time
	// OwnerEmail and Mailto are for approvers only: a prefilled message to the owner.
	OwnerEmail string
	Mailto     string
}

type workersData struct {
	ui.Page
	// Worker is the worker the form is about; "" on the list alone.
	Worker  string
	Blocked bool
	Message string
	Changed time.Time
	// BlockedBy is who blocked it, if known; Locked says the viewer may not change the block
	// (an approver's, and the viewer is its owner).
	BlockedBy string
	Locked    bool
	// Quarantined says the block is the quarantine rule's, since QuarantinedSince; Quarantines
	// is how many times the machine was ever quarantined.
	Quarantined      bool
	QuarantinedSince time.Time
	Quarantines      int
	// Offenders are, for approvers, the users whose machines were quarantined more than once.
	Offenders []offenderRow
	Errors    map[string]string
	Approver  bool
	Filter    string
	Filters   []userTab
	Search    string
	Rows      []blockedWorkerRow
	Sort      ui.Sorting
	Pager     ui.Pager
}

// WorkerPage shows the blocked workers (/workers/show) or, for one worker, the form its owner
// or an approver uses to block or unblock it, above the same list.
func (s *Server) WorkerPage(c *gin.Context) {
	name := c.Param("name")
	d := workersData{Errors: map[string]string{}}
	if name != "show" {
		if _, ok := s.mayBlockWorker(c, name); !ok {
			return
		}
		d.Worker = name
		if !s.ui.Do(c, func(ctx context.Context) error {
			w, err := s.deps.Workers.Get(ctx, name)
			switch {
			case errors.Is(err, rundb.ErrNotFound):
				return nil
			case err != nil:
				return err
			}
			d.Blocked, d.Message, d.Changed, d.BlockedBy = w.Blocked, w.Message, w.LastUpdated, w.BlockedBy
			d.Quarantined, d.QuarantinedSince, d.Quarantines = w.Blocked && w.Quarantined, w.QuarantinedSince, w.Quarantines
			d.Locked = w.ApproverBlock() && !ui.CurrentUser(c).IsApprover()
			return nil
		}) {
			return
		}
	}
	s.showWorkers(c, http.StatusOK, &d)
}

// mayBlockWorker checks that name is a short worker name and that the viewer runs that worker
// or is an approver; otherwise it answers the request and returns false.
func (s *Server) mayBlockWorker(c *gin.Context, name string) (*rundb.User, bool) {
	owner := workerOwner(name)
	if owner == "" {
		s.ui.PageError(c, http.StatusNotFound, "“"+name+"” is not a worker's short name (USER-Ncores-ID).")
		return nil, false
	}
	u, ok := s.ui.RequireUser(c)
	if !ok {
		return nil, false
	}
	if u.Username != owner && !u.IsApprover() {
		s.ui.PageError(c, http.StatusForbidden, "Only the worker's owner ("+owner+") and approvers may block or unblock it.")
		return nil, false
	}
	return u, true
}

// showWorkers fills in the blocked-workers list and renders the page.
func (s *Server) showWorkers(c *gin.Context, status int, d *workersData) {
	me := ui.CurrentUser(c)
	d.Approver = me != nil && me.IsApprover()
	d.Filter = c.Query("filter")
	if d.Filter != "gt-5days" && d.Filter != "all-workers" {
		d.Filter = "le-5days"
	}
	d.Search = strings.TrimSpace(c.Query("q"))
	allowed := []string{"worker", "last_changed"}
	if d.Approver {
		allowed = append(allowed, "email")
	}
	d.Sort = ui.SortParam(c, allowed, "last_changed", true)
	d.Sort.AscendingUnlessAsked(c, "worker", "email")
	for _, f := range []struct{ Key, Label string }{
		{"le-5days", "Changed in the last 5 days"}, {"gt-5days", "Older"}, {"all-workers", "All"},
	} {
		q := c.Request.URL.Query()
		q.Set("filter", f.Key)
		q.Del("page")
		u := url.URL{Path: "/workers/show", RawQuery: q.Encode()}
		d.Filters = append(d.Filters, userTab{Key: f.Key, Label: f.Label, URL: u.String(), Current: f.Key == d.Filter})
	}

	var workers []*rundb.Worker
	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		workers, err = s.deps.Workers.Blocked(ctx)
		return err
	}) {
		return
	}
	cut := time.Now().Add(-blockedRecently)
	var rows []blockedWorkerRow
	for _, w := range workers {
		recent := w.LastUpdated.IsZero() || !w.LastUpdated.Before(cut)
		if (d.Filter == "le-5days" && !recent) || (d.Filter == "gt-5days" && recent) {
			continue
		}
		if d.Search != "" && !strings.Contains(strings.ToLower(w.WorkerName), strings.ToLower(d.Search)) {
			continue
		}
		row := blockedWorkerRow{Name: w.WorkerName, Message: w.Message, LastUpdated: w.LastUpdated}
		if w.Quarantined {
			row.QuarantinedSince = w.QuarantinedSince
		}
		rows = append(rows, row)
	}
	if d.Approver && !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		d.Offenders, err = s.offenders(ctx)
		return err
	}) {
		return
	}
	// Owners' addresses are looked up for every row only when sorting by them; otherwise for
	// the page shown.
	withEmails := func(rows []blockedWorkerRow) bool {
		return s.ui.Do(c, func(ctx context.Context) error {
			for i := range rows {
				u, err := s.deps.Users.Get(ctx, workerOwner(rows[i].Name))
				switch {
				case errors.Is(err, rundb.ErrNotFound):
					continue
				case err != nil:
					return err
				}
				rows[i].OwnerEmail = u.Email
			}
			return nil
		})
	}
	if d.Approver && d.Sort.Key == "email" && !withEmails(rows) {
		return
	}
	slices.SortStableFunc(rows, func(a, b blockedWorkerRow) int {
		var r int
		switch d.Sort.Key {
		case "worker":
			r = strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
		case "email":
			r = strings.Compare(strings.ToLower(a.OwnerEmail), strings.ToLower(b.OwnerEmail))
		default:
			r = a.LastUpdated.Compare(b.LastUpdated)
		}
		if r == 0 {
			r = strings.Compare(a.Name, b.Name)
		}
		if d.Sort.Desc {
			r = -r
		}
		return r
	})
	d.Pager = ui.NewPager(c, len(rows), workersPageSize)
	d.Rows = rows[d.Pager.Skip():min(len(rows), d.Pager.Skip()+workersPageSize)]
	if d.Approver {
		if d.Sort.Key != "email" && !withEmails(d.Rows) {
			return
		}
		for i := range d.Rows {
			d.Rows[i].Mailto = workerMailto(c, me.Username, d.Rows[i])
		}
	}
	title := "Blocked workers"
	if d.Worker != "" {
		title = "Worker " + d.Worker
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, status, "workers_blocked", d)
}

// workerMailto is a mailto link with a message from an approver to a blocked worker's owner.
func workerMailto(c *gin.Context, approver string, r blockedWorkerRow) string {
	if r.OwnerEmail == "" {
		return ""
	}
	events := ui.SiteURL(c, "/actions?text="+url.QueryEscape(r.Name))
	body := "Hello " + workerOwner(r.Name) + ",\r\n\r\n" +
		"thank you for running a worker for Shoal. Your worker " + r.Name + " is blocked for now, because:\r\n\r\n" +
		strings.ReplaceAll(r.Message, "\n", "\r\n") + "\r\n\r\n" +
		"The event log may tell you more: " + events + "\r\n\r\n" +
		"Reply to this email if we can help.\r\n\r\n" + approver + " (Shoal approver)\r\n"
	return mailtoURL(r.OwnerEmail, "Your Shoal worker "+r.Name, body)
}

// mailtoURL is a mailto link (RFC 6068) to addr with a subject and body, each omitted when
// empty. Everything is percent-encoded but the address's "@", so that an address such as
// "x?cc=y@evil.example" (valid: "?" and "=" may appear before the "@") stays one recipient,
// and a body with "&" or "=" adds no header.
func mailtoURL(addr, subject, body string) string {
	var q []string
	if subject != "" {
		q = append(q, "subject="+mailtoEscape(subject))
	}
	if body != "" {
		q = append(q, "body="+mailtoEscape(body))
	}
	u := url.URL{Scheme: "mailto", Opaque: strings.ReplaceAll(mailtoEscape(addr), "%40", "@"),
		RawQuery: strings.Join(q, "&")}
	return u.String()
}

// mailtoEscape percent-encodes s as a mailto URL's query value: url.QueryEscape, with spaces as
// %20, since mail clients show a "+" as is. The only "+" QueryEscape leaves is a space's.
func mailtoEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// WorkerSubmit blocks or unblocks a worker with a message for its owner. The worker's owner
// and approvers may; the change is logged as a block_worker action when the state changes.
func (s *Server) WorkerSubmit(c *gin.Context) {
	name := c.Param("name")
	u, ok := s.mayBlockWorker(c, name)
	if !ok || !s.ui.RequirePrimary(c) {
		return
	}
	if c.PostForm("lift_quarantine") != "" {
		s.liftQuarantine(c, u, name)
		return
	}
	blocked := c.PostForm("blocked") != ""
	message := strings.TrimRight(strings.ReplaceAll(strings.ReplaceAll(c.PostForm("message"), "\r\n", "\n"), "\r", "\n"), " \t\n")
	if n := len([]rune(message)); n > maxWorkerMessageRunes {
		d := workersData{Worker: name, Blocked: blocked, Message: message, Errors: map[string]string{
			"message": "At most 500 characters (this has " + strconv.Itoa(n) + "); nothing was changed."}}
		if !s.ui.Do(c, func(ctx context.Context) error {
			w, err := s.deps.Workers.Get(ctx, name)
			if err == nil {
				d.Changed = w.LastUpdated
			}
			if errors.Is(err, rundb.ErrNotFound) {
				return nil
			}
			return err
		}) {
			return
		}
		s.showWorkers(c, http.StatusBadRequest, &d)
		return
	}
	changed := false
	var approverBlock *rundb.Worker // set when only an approver may change the block
	if !s.ui.Do(c, func(ctx context.Context) error {
		was := false
		next := &rundb.Worker{WorkerName: name, Blocked: blocked, Message: message}
		w, err := s.deps.Workers.Get(ctx, name)
		switch {
		case err == nil:
			was = w.Blocked
			// The machine's quarantines stay counted; one in force stays with a kept block.
			next.Quarantines = w.Quarantines
			if blocked && was {
				next.Quarantined, next.QuarantinedSince = w.Quarantined, w.QuarantinedSince
			}
			if w.ApproverBlock() && !u.IsApprover() {
				approverBlock = w
				return nil
			}
			if blocked && was { // a new message: the block stays whose it was
				next.BlockedBy, next.BlockedByApprover = w.BlockedBy, w.BlockedByApprover
			}
		case !errors.Is(err, rundb.ErrNotFound):
			return err
		}
		if blocked && !was {
			next.BlockedBy, next.BlockedByApprover = u.Username, u.IsApprover()
		}
		if err := s.deps.Workers.Put(ctx, next); err != nil {
			return err
		}
		if changed = blocked != was; !changed {
			return nil
		}
		return s.deps.Actions.Insert(ctx, &rundb.Action{Action: "block_worker", Username: u.Username,
			Worker: name, Message: map[bool]string{true: "blocked", false: "unblocked"}[blocked]})
	}) {
		return
	}
	if approverBlock != nil {
		by := "An approver"
		if approverBlock.BlockedBy != "" {
			by = "An approver (" + approverBlock.BlockedBy + ")"
		}
		s.ui.PageError(c, http.StatusForbidden, by+" blocked this worker: only an approver may change or lift the block. Nothing was changed.")
		return
	}
	switch {
	case changed && blocked:
		s.ui.Flash(c, "success", "Worker "+name+" is blocked.")
	case changed:
		s.ui.Flash(c, "success", "Worker "+name+" is unblocked.")
	default:
		s.ui.Flash(c, "success", "The message of worker "+name+" is saved.")
	}
	s.ui.Redirect(c, "/workers/show")
}

// maxWorkerMessageRunes is the longest message kept for a blocked worker, as in fishtest.
const maxWorkerMessageRunes = 500

// --- The event log ---

const (
	actionsPageSize = 25
	// The event log considers at most this many of the newest matching actions: anonymous
	// visitors fewer, as in fishtest.
	actionsMaxAnonymous = 5000
	actionsMaxUser      = 50000
	// The event log searches a window of days before its "before" time (or now): a month by
	// default, at most a month for anonymous visitors and a year for users, so that a search
	// reads a bounded part of the log (through the time index on MongoDB).
	actionsDaysDefault   = 30
	actionsDaysAnonymous = 30
	actionsDaysUser      = 365
)

// actionKinds are the kinds of action the filter offers, hidden ones included.
var actionKinds = []string{"new_run", "modify_run", "approve_run", "stop_run", "finished_run", "purge_run",
	"delete_run", "failed_task", "crash_or_time", "dead_task", "block_user", "accept_user", "block_worker", "quarantine",
	"new_token", "revoke_token",
	"upload_nn", "log_message", "worker_log", "system_event"}

type actionRow struct {
	Time              float64
	TimeURL           string
	Event             string
	Source, SourceURL string
	Target, TargetURL string
	Message           string
}

type actionsData struct {
	ui.Page
	Kinds                       []string
	Action, Who, Text, RunID    string
	Before                      string
	MaxCount, Cap               int
	Rows                        []actionRow
	Sort                        ui.Sorting
	Pager                       ui.Pager
	Total                       int
	Capped                      bool
	NoSuchUser                  bool
	BeforeInvalid, CountInvalid bool
	// Days is the window searched, MaxDays the most this visitor may ask for.
	Days, MaxDays int
	DaysInvalid   bool
}

// ActionsPage is the event log with its filters. Sorting and paging happen within the newest
// max_count matching actions (5000 at most for anonymous visitors, 50000 for users).
func (s *Server) ActionsPage(c *gin.Context) {
	me := ui.CurrentUser(c)
	d := actionsData{Kinds: actionKinds, Action: strings.TrimSpace(c.Query("action")),
		Who: strings.TrimSpace(c.Query("user")), Text: strings.TrimSpace(c.Query("text")),
		RunID: strings.TrimSpace(c.Query("run_id")), Before: strings.TrimSpace(c.Query("before"))}
	d.Cap = actionsMaxAnonymous
	if me != nil {
		d.Cap = actionsMaxUser
	}
	d.MaxCount = d.Cap
	if raw := c.Query("max_count"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			d.CountInvalid = true
		} else {
			d.MaxCount = min(n, d.Cap)
		}
	}
	if d.Text != "" && me == nil {
		// A text search matches parts of every field: no index serves it.
		s.ui.PageError(c, http.StatusForbidden, "Searching the text of the event log needs a login: log in, or filter by event, user or run.")
		return
	}
	d.MaxDays, d.Days = actionsDaysAnonymous, actionsDaysDefault
	if me != nil {
		d.MaxDays = actionsDaysUser
	}
	if raw := c.Query("days"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			d.DaysInvalid = true
		} else {
			d.Days = min(n, d.MaxDays)
		}
	}
	d.Sort = ui.SortParam(c, []string{"time", "event", "source", "target", "comment"}, "time", true)
	d.Sort.AscendingUnlessAsked(c, "event", "source", "target", "comment")
	q := rundb.ActionQuery{Action: d.Action, Text: d.Text, RunID: d.RunID, Sort: d.Sort.Key, Desc: d.Sort.Desc,
		Max: d.MaxCount}
	end := float64(time.Now().UnixMicro()) / 1e6
	if d.Before != "" {
		b, err := strconv.ParseFloat(d.Before, 64)
		if err != nil {
			d.BeforeInvalid = true
		} else {
			q.Before, end = &b, b
		}
	}
	after := end - float64(d.Days)*86400
	q.After = &after
	if !s.ui.HeavyRead(c, func(ctx context.Context) error {
		if d.Who != "" {
			names, err := s.deps.Actions.Usernames(ctx)
			if err != nil {
				return err
			}
			q.Usernames = matchNames(names, d.Who)
			d.NoSuchUser = len(q.Usernames) == 0
		}
		total, err := s.deps.Actions.Count(ctx, q)
		if err != nil {
			return err
		}
		d.Total = total
		d.Pager = ui.NewPager(c, total, actionsPageSize)
		q.Skip, q.Limit = d.Pager.Skip(), actionsPageSize
		acts, err := s.deps.Actions.Query(ctx, q)
		for _, a := range acts {
			d.Rows = append(d.Rows, actionRowOf(c, a, me != nil && me.IsApprover()))
		}
		return err
	}) {
		return
	}
	d.Capped = d.Total >= d.MaxCount
	d.Page = s.ui.Page(c, "Events")
	s.ui.Render(c, http.StatusOK, "actions", d)
}

// matchNames returns the names containing part, in any case; an exact match (in any case)
// comes first.
func matchNames(names []string, part string) []string {
	p := strings.ToLower(part)
	out := []string{}
	for _, n := range names {
		if strings.Contains(strings.ToLower(n), p) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ea, eb := strings.EqualFold(a, part), strings.EqualFold(b, part)
		switch {
		case ea && !eb:
			return -1
		case eb && !ea:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// actionRowOf lays out one action: who did it (a worker for a worker's actions, else a user)
// and what it was done to (a network, a run or one of its tasks, a user, a worker), each with
// its page when it has one. Users' pages are linked for approvers only, who alone may see them.
func actionRowOf(c *gin.Context, a *rundb.Action, approver bool) actionRow {
	r := actionRow{Time: a.Time, Event: a.Action, Message: a.Message}
	q := c.Request.URL.Query()
	q.Set("before", strconv.FormatFloat(a.Time, 'f', -1, 64))
	q.Set("max_count", "1")
	q.Del("page")
	r.TimeURL = (&url.URL{Path: "/actions", RawQuery: q.Encode()}).String()

	if a.Worker != "" && a.Action != "block_worker" && a.Action != quarantineAction {
		r.Source = a.Worker
		parts := strings.SplitN(a.Worker, "-", 4)
		if len(parts) >= 3 {
			r.SourceURL = "/workers/" + url.PathEscape(strings.Join(parts[:3], "-"))
		}
	} else {
		r.Source = a.Username
		if approver || currentUserIs(c, a.Username) {
			r.SourceURL = "/user/" + url.PathEscape(a.Username)
		}
	}
	if a.Action == "system_event" || a.Action == "log_message" {
		r.SourceURL = ""
	}
	switch {
	case a.NN != "":
		r.Target, r.TargetURL = a.NN, "/api/nn/"+url.PathEscape(a.NN)
	case a.Run != "" && a.RunID != "":
		r.Target, r.TargetURL = a.Run, "/tests/view/"+url.PathEscape(a.RunID)
		if a.TaskID != nil {
			r.Target += "/" + strconv.Itoa(*a.TaskID)
			r.TargetURL += "?show_task=" + strconv.Itoa(*a.TaskID)
		}
	case a.Action == quarantineAction && a.Worker != "":
		r.Target, r.TargetURL = a.Worker, "/workers/"+url.PathEscape(a.Worker)
	case a.User != "":
		r.Target = a.User
		if approver {
			r.TargetURL = "/user/" + url.PathEscape(a.User)
		}
	case a.Action == "block_worker" && a.Worker != "":
		r.Target, r.TargetURL = a.Worker, "/workers/"+url.PathEscape(a.Worker)
	}
	return r
}

func currentUserIs(c *gin.Context, name string) bool {
	u := ui.CurrentUser(c)
	return u != nil && u.Username == name
}

// --- Contributors ---

const (
	contributorsPageSize = 100
	contributorsMaxAll   = 5000
)

type contributorRow struct {
	Rank int
	*rundb.UserStats
	Highlight bool
}

type contributorsData struct {
	ui.Page
	Monthly   bool
	Base      string // the page's path
	Rows      []contributorRow
	Totals    rundb.ContributorTotals
	Sort      ui.Sorting
	Pager     ui.Pager
	All       bool
	Truncated bool
	Search    string
	Highlight string
	// Notice says why a search or findme found nobody.
	Notice string
}

// ContributorsPage ranks contributors, overall (/contributors) or over the last month
// (/contributors/monthly). ?search= and ?findme=1 go to the page of a contributor (the first
// that matches, or oneself) and highlight the row.
func (s *Server) ContributorsPage(c *gin.Context) {
	monthly := strings.HasSuffix(c.Request.URL.Path, "/monthly")
	var store Contributors = s.deps.UserStats
	title := "Contributors"
	if monthly {
		store = s.deps.MonthlyContributors
		title = "Contributors of the month"
	}
	d := contributorsData{Monthly: monthly, Base: c.Request.URL.Path, All: c.Query("view") == "all",
		Search: strings.TrimSpace(c.Query("search")), Highlight: strings.TrimSpace(c.Query("highlight"))}
	d.Sort = ui.SortParam(c, []string{"username", "cpu_hours", "games", "games_per_hour", "tests", "tests_repo", "last_updated"},
		"cpu_hours", true)
	d.Sort.AscendingUnlessAsked(c, "username", "tests_repo")
	q := rundb.ContributorQuery{Sort: d.Sort.Key, Desc: d.Sort.Desc}
	me := ui.CurrentUser(c)
	findme := c.Query("findme") != ""

	// Going to someone's row: find them, and redirect to their page unless already there.
	if (findme && me != nil) || d.Search != "" {
		target, rank := "", 0
		err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			var err error
			if findme && me != nil {
				target = me.Username
			} else if target, err = store.Find(ctx, q, d.Search); err != nil {
				return err
			}
			rank, err = store.Rank(ctx, q, target)
			return err
		})
		switch {
		case errors.Is(err, rundb.ErrNotFound) && findme && me != nil:
			d.Notice = "You have no contributions here yet."
		case errors.Is(err, rundb.ErrNotFound):
			d.Notice = "No contributor's name contains “" + d.Search + "”."
		case err != nil:
			s.ui.Error(c, err)
			return
		default:
			page := rank/contributorsPageSize + 1
			if !strings.EqualFold(d.Highlight, target) || (!d.All && ui.PageParam(c) != page) {
				v := url.Values{"sort": {d.Sort.Key}, "order": {map[bool]string{true: "desc", false: "asc"}[d.Sort.Desc]},
					"highlight": {target}}
				if d.All {
					v.Set("view", "all")
				} else if page > 1 {
					v.Set("page", strconv.Itoa(page))
				}
				c.Redirect(http.StatusFound, d.Base+"?"+v.Encode()+"#me")
				return
			}
		}
	}

	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		if d.Totals, err = store.Totals(ctx); err != nil {
			return err
		}
		d.Pager = ui.NewPager(c, d.Totals.Contributors, contributorsPageSize)
		q.Skip, q.Limit = d.Pager.Skip(), contributorsPageSize
		if d.All {
			q.Skip, q.Limit = 0, contributorsMaxAll
			d.Truncated = d.Totals.Contributors > contributorsMaxAll
		}
		list, _, err := store.List(ctx, q)
		for i, st := range list {
			d.Rows = append(d.Rows, contributorRow{Rank: q.Skip + i + 1, UserStats: st,
				Highlight: d.Highlight != "" && strings.EqualFold(st.Username, d.Highlight)})
		}
		return err
	}) {
		return
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, http.StatusOK, "contributors", d)
}
