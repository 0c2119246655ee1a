package people_test

import (
	"context"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui/people"
)

// rowsOf returns the table rows of a page (the <tr> elements of its <tbody>).
func rowsOf(page string) []string {
	i := strings.Index(page, "<tbody>")
	j := strings.Index(page, "</tbody>")
	if i < 0 || j < i {
		return nil
	}
	rows := strings.Split(page[i:j], "<tr")
	return rows[1:]
}

func TestUIPeopleUserManagement(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()

	w := env.anon().Get("/user_management")
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
		t.Errorf("anonymous: %d to %q, want the login page", w.Code, w.Header().Get("Location"))
	}
	if w := env.as("alice").Get("/user_management"); w.Code != http.StatusForbidden {
		t.Errorf("a user: %d, want 403", w.Code)
	}

	bob := env.as("bob")
	page := body(bob.Get("/user_management"))
	rows := rowsOf(page)
	if len(rows) != 1 || !strings.Contains(rows[0], `href="/user/dave"`) {
		t.Errorf("pending group (the default): %d rows, want dave alone:\n%s", len(rows), page)
	}
	if !strings.Contains(page, `Pending <span class="badge yellow">1</span>`) {
		t.Errorf("no pending count badge:\n%s", page)
	}
	for group, want := range map[string][]string{
		"blocked":   {"eve"},
		"approvers": {"bob", "carol"},
		"all":       {"alice", "bob", "carol", "dave", "eve"},
		"idle":      {"bob", "carol", "dave", "eve"},
	} {
		if group == "idle" {
			if err := env.DB.UserCache.Put(ctx, &rundb.UserStats{Username: "alice", CPUHours: 3}); err != nil {
				t.Fatal(err)
			}
		}
		rows := rowsOf(body(bob.Get("/user_management?group=" + group + "&sort=username")))
		if len(rows) != len(want) {
			t.Errorf("group %s: %d rows, want %v", group, len(rows), want)
			continue
		}
		for i, name := range want {
			if !strings.Contains(rows[i], `href="/user/`+name+`"`) {
				t.Errorf("group %s row %d is not %s: %s", group, i, name, rows[i])
			}
		}
	}
	rows = rowsOf(body(bob.Get("/user_management?group=all&sort=email&order=desc")))
	if len(rows) != 5 || !strings.Contains(rows[0], "eve@") || !strings.Contains(rows[4], "alice@") {
		t.Errorf("sorted by email, descending: %v", rows)
	}
	rows = rowsOf(body(bob.Get("/user_management?group=all&q=AR")))
	if len(rows) != 1 || !strings.Contains(rows[0], "carol") {
		t.Errorf("search AR: %v", rows)
	}

	// 25 a page.
	for i := range 30 {
		if _, err := env.DB.Users.Create(ctx, rundb.NewUser{Username: fmt.Sprintf("new%02d", i), Password: "pw"}); err != nil {
			t.Fatal(err)
		}
	}
	page = body(bob.Get("/user_management?sort=username"))
	if n := len(rowsOf(page)); n != 25 {
		t.Errorf("page 1 of 31 pending: %d rows, want 25", n)
	}
	if !strings.Contains(page, `Pending <span class="badge yellow">31</span>`) {
		t.Errorf("the badge does not count 31")
	}
	if n := len(rowsOf(body(bob.Get("/user_management?sort=username&page=2")))); n != 6 {
		t.Errorf("page 2: %d rows, want 6", n)
	}
	if n := len(rowsOf(body(bob.Get("/user_management?sort=username&page=99")))); n != 6 {
		t.Errorf("a page past the end shows the last: %d rows, want 6", n)
	}
	if w := bob.Get("/user_management?group=nonsense&sort=password"); w.Code != http.StatusOK {
		t.Errorf("unknown group and sort fall back to defaults: %d", w.Code)
	}
}

func TestUIPeopleWorkers(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	const worker = "alice-8cores-1a2b3c4d"

	t.Run("who may open the form", func(t *testing.T) {
		if w := env.anon().Get("/workers/" + worker); w.Code != http.StatusSeeOther {
			t.Errorf("anonymous: %d, want the login page", w.Code)
		}
		if w := env.as("carol").Get("/workers/" + worker); w.Code != http.StatusOK {
			t.Errorf("an approver: %d", w.Code)
		}
		if w := env.as("alice").Get("/workers/" + worker); w.Code != http.StatusOK || !strings.Contains(body(w), `name="message"`) {
			t.Errorf("the owner: %d", w.Code)
		}
		if w := env.as("bob").Get("/workers/nobody"); w.Code != http.StatusNotFound {
			t.Errorf("not a worker name: %d, want 404", w.Code)
		}
	})

	t.Run("a stranger may not block", func(t *testing.T) {
		if _, err := env.DB.Users.Create(ctx, rundb.NewUser{Username: "mallory", Password: uiPassword, Accepted: true}); err != nil {
			t.Fatal(err)
		}
		m := env.as("mallory")
		if w := m.Get("/workers/" + worker); w.Code != http.StatusForbidden {
			t.Errorf("GET: %d, want 403", w.Code)
		}
		if w := m.Post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {"mine now"}}); w.Code != http.StatusForbidden {
			t.Errorf("POST: %d, want 403", w.Code)
		}
		if _, err := env.DB.Workers.Get(ctx, worker); err == nil {
			t.Errorf("a refused block wrote the worker")
		}
	})

	t.Run("without the CSRF token nothing happens", func(t *testing.T) {
		b := env.as("bob")
		if w := b.PostRaw("/workers/"+worker, url.Values{"blocked": {"1"}}); w.Code != http.StatusForbidden {
			t.Errorf("status %d, want 403", w.Code)
		}
		if _, err := env.DB.Workers.Get(ctx, worker); err == nil {
			t.Errorf("a refused block wrote the worker")
		}
	})

	t.Run("a message over 500 characters", func(t *testing.T) {
		long := strings.Repeat("é", 501)
		w := env.as("bob").Post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {long}})
		page := body(w)
		if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-message"`) || !strings.Contains(page, long) {
			t.Errorf("status %d, want 400 with the message kept and marked", w.Code)
		}
		if _, err := env.DB.Workers.Get(ctx, worker); err == nil {
			t.Errorf("a refused block wrote the worker")
		}
		// 500 accented letters are 500 characters, and fine.
		if w := env.as("bob").Post("/workers/"+worker, url.Values{"message": {long[:1000]}}); w.Code != http.StatusSeeOther {
			t.Errorf("500 characters: %d", w.Code)
		}
	})

	t.Run("an approver blocks, only an approver unblocks", func(t *testing.T) {
		w := env.as("bob").Post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {"Too many time losses.\r\nCheck the clock."}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/workers/show" {
			t.Fatalf("block: %d to %q", w.Code, w.Header().Get("Location"))
		}
		got, err := env.DB.Workers.Get(ctx, worker)
		if err != nil || !got.Blocked || got.Message != "Too many time losses.\nCheck the clock." {
			t.Fatalf("after the block: %+v, %v", got, err)
		}
		// Saving again without a change writes no action.
		env.as("bob").Post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {"Too many time losses."}})

		page := body(env.as("bob").Get("/workers/show"))
		if !strings.Contains(page, `href="/workers/`+worker+`"`) || !strings.Contains(page, `href="mailto:alice@example.org?subject=`) {
			t.Errorf("an approver's blocked list lacks the worker or the owner's mailto:\n%s", page)
		}
		page = body(env.anon().Get("/workers/show"))
		if !strings.Contains(page, worker) || strings.Contains(page, "alice@example.org") {
			t.Errorf("an anonymous blocked list: the worker missing or the email shown")
		}

		// The owner may not lift an approver's block (security finding 13)...
		if w := env.as("alice").Post("/workers/"+worker, url.Values{"message": {"fixed"}}); w.Code != http.StatusForbidden {
			t.Fatalf("unblock by the owner: %d, want 403", w.Code)
		}
		if got, _ := env.DB.Workers.Get(ctx, worker); !got.Blocked || got.BlockedBy != "bob" {
			t.Errorf("after the owner's attempt: %+v, want still blocked by bob", got)
		}
		// ...another approver may.
		if w := env.as("carol").Post("/workers/"+worker, url.Values{"message": {"fixed"}}); w.Code != http.StatusSeeOther {
			t.Fatalf("unblock by an approver: %d", w.Code)
		}
		if got, _ := env.DB.Workers.Get(ctx, worker); got.Blocked || got.BlockedBy != "" {
			t.Errorf("after the approver's unblock: %+v", got)
		}
		acts, err := env.DB.Actions.Find(ctx, rundb.ActionFilter{Action: "block_worker"}, 0)
		if err != nil || len(acts) != 2 || acts[0].Username != "carol" || acts[0].Message != "unblocked" ||
			acts[1].Username != "bob" || acts[1].Message != "blocked" || acts[1].Worker != worker {
			t.Errorf("block_worker actions: %+v, %v", acts, err)
		}
	})

	t.Run("the owner blocks and unblocks their own worker", func(t *testing.T) {
		for _, blocked := range []string{"1", ""} {
			if w := env.as("alice").Post("/workers/"+worker, url.Values{"blocked": {blocked}, "message": {"mine"}}); w.Code != http.StatusSeeOther {
				t.Fatalf("owner sets blocked=%q: %d", blocked, w.Code)
			}
			if got, _ := env.DB.Workers.Get(ctx, worker); got.Blocked != (blocked != "") {
				t.Errorf("owner set blocked=%q: %+v", blocked, got)
			}
		}
	})

	t.Run("the filters by age", func(t *testing.T) {
		for _, name := range []string{"bob-4cores-aaaa", "carol-2cores-bbbb"} {
			if err := env.DB.Workers.Put(ctx, &rundb.Worker{WorkerName: name, Blocked: true, Message: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		setWorkerTime(t, env, "carol-2cores-bbbb", time.Now().Add(-6*24*time.Hour))
		for filter, want := range map[string][]string{
			"":            {"bob-4cores-aaaa"},
			"le-5days":    {"bob-4cores-aaaa"},
			"gt-5days":    {"carol-2cores-bbbb"},
			"all-workers": {"bob-4cores-aaaa", "carol-2cores-bbbb"},
		} {
			rows := rowsOf(body(env.anon().Get("/workers/show?filter=" + filter)))
			if len(rows) != len(want) {
				t.Errorf("filter %q: %d rows, want %v", filter, len(rows), want)
				continue
			}
			for i, name := range want {
				if !strings.Contains(rows[i], name) {
					t.Errorf("filter %q row %d: want %s", filter, i, name)
				}
			}
		}
	})
}

// withCollection runs fn on a collection of the test database, for what the stores do not
// offer: setting a worker's time of change, inserting many documents at once.
func withCollection(t *testing.T, env *uiEnv, name string, fn func(*mongo.Collection) error) {
	t.Helper()
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(env.DB.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	if err := fn(client.Database(env.DB.Name()).Collection(name)); err != nil {
		t.Fatal(err)
	}
}

// setWorkerTime moves a worker's last change back in time, as if it were blocked long ago
// (WorkerStore.Put stamps the present).
func setWorkerTime(t *testing.T, env *uiEnv, name string, when time.Time) {
	t.Helper()
	withCollection(t, env, "workers", func(coll *mongo.Collection) error {
		_, err := coll.UpdateOne(context.Background(), bson.D{{Key: "worker_name", Value: name}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "last_updated", Value: when.UTC()}}}})
		return err
	})
}

func TestUIPeopleActions(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	task := 2
	// A day ago, within the event log's default window; the seconds below count from base.
	base := float64(time.Now().Unix()/1000*1000) - 86400 - 1000
	add := func(sec float64, a rundb.Action) {
		t.Helper()
		a.Time = base + sec
		if err := env.DB.Actions.Insert(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	const run = "0123456789abcdef01234567"
	add(1000, rundb.Action{Action: "new_run", Username: "alice", RunID: run, Run: "tweak-1234567", Message: "SPRT<0,2>"})
	add(1001, rundb.Action{Action: "system_event", Username: "fishtest.system", Message: "start"})
	add(1002, rundb.Action{Action: "dead_task", Username: "alice", Worker: "alice-8cores-1a2b3c4d-5e6f", RunID: run, Run: "tweak-1234567", TaskID: &task})
	add(1003, rundb.Action{Action: "approve_run", Username: "bob", RunID: run, Run: "tweak-1234567", Message: "approved"})
	add(1004, rundb.Action{Action: "block_user", Username: "bob", User: "eve", Message: "blocked"})
	add(1005, rundb.Action{Action: "failed_task", Username: "alice", Worker: "alice-8cores-1a2b3c4d-5e6f", RunID: run, Run: "tweak-1234567", TaskID: &task, Message: "Engine crashed"})
	add(1006, rundb.Action{Action: "block_worker", Username: "bob", Worker: "alice-8cores-1a2b3c4d", Message: "blocked"})
	add(1007, rundb.Action{Action: "upload_nn", Username: "carol", NN: "nn-0123456789ab.nnue"})

	events := func(b *browser, query string) []string {
		t.Helper()
		w := b.Get("/actions" + query)
		if w.Code != http.StatusOK {
			t.Fatalf("/actions%s: %d", query, w.Code)
		}
		var out []string
		for _, r := range rowsOf(body(w)) {
			cells := strings.Split(r, "<td")
			out = append(out, cells[2][strings.Index(cells[2], ">")+1:strings.Index(cells[2], "<")])
		}
		return out
	}
	anon, user := env.anon(), env.as("carol")
	before1004 := "?before=" + strconv.FormatFloat(base+1004, 'f', -1, 64)
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", "upload_nn block_worker failed_task block_user approve_run new_run"},
		{"?action=system_event", "system_event"},
		{"?action=dead_task", "dead_task"},
		{"?user=ALI", "failed_task new_run"},
		{"?user=nobody", ""},
		{"?text=crash", "failed_task"},
		{"?text=alice-8cores-1a2b3c4d", "block_worker failed_task"},
		{"?run_id=" + run, "failed_task approve_run new_run"},
		{before1004, "block_user approve_run new_run"},
		{"?max_count=2", "upload_nn block_worker"},
		{"?sort=event", "approve_run block_user block_worker failed_task new_run upload_nn"},
		{"?sort=time&order=asc", "new_run approve_run block_user failed_task block_worker upload_nn"},
		{"?before=nonsense&max_count=-4", "upload_nn block_worker failed_task block_user approve_run new_run"},
	} {
		b := anon
		if strings.Contains(tc.query, "text=") { // a text search needs a login
			b = user
		}
		if got := strings.Join(events(b, tc.query), " "); got != tc.want {
			t.Errorf("/actions%s: %q, want %q", tc.query, got, tc.want)
		}
	}

	t.Run("links", func(t *testing.T) {
		page := body(env.as("bob").Get("/actions"))
		for _, link := range []string{
			`href="/tests/view/` + run + `?show_task=2">tweak-1234567/2</a>`,
			`href="/workers/alice-8cores-1a2b3c4d">alice-8cores-1a2b3c4d-5e6f</a>`,
			`href="/workers/alice-8cores-1a2b3c4d">alice-8cores-1a2b3c4d</a>`,
			`href="/user/eve">eve</a>`,
			`href="/api/nn/nn-0123456789ab.nnue"`,
			`href="/user/bob">bob</a>`,
		} {
			if !strings.Contains(page, link) {
				t.Errorf("no link %s", link)
			}
		}
		if page := body(anon.Get("/actions")); strings.Contains(page, `href="/user/eve"`) {
			t.Errorf("anonymous visitors get links to user pages they may not see")
		}
	})

	t.Run("max_count caps", func(t *testing.T) {
		for i := range 30 {
			add(2000+float64(i), rundb.Action{Action: "log_message", Username: "carol", Message: "m"})
		}
		countOf := regexp.MustCompile(`name="max_count" min="1" max="(\d+)" value="(\d+)"`)
		for _, tc := range []struct {
			b         *browser
			query     string
			max, capV string
		}{
			{anon, "", "5000", "5000"},
			{anon, "?max_count=999999", "5000", "5000"},
			{anon, "?max_count=7", "5000", "7"},
			{env.as("alice"), "", "50000", "50000"},
			{env.as("alice"), "?max_count=999999", "50000", "50000"},
		} {
			m := countOf.FindStringSubmatch(body(tc.b.Get("/actions" + tc.query)))
			if m == nil || m[1] != tc.max || m[2] != tc.capV {
				t.Errorf("/actions%s: cap/value %v, want %s/%s", tc.query, m, tc.max, tc.capV)
			}
		}
		// 25 a page; max_count bounds the pages.
		if n := len(events(anon, "?action=log_message")); n != 25 {
			t.Errorf("page 1: %d rows, want 25", n)
		}
		if n := len(events(anon, "?action=log_message&page=2")); n != 5 {
			t.Errorf("page 2: %d rows, want 5", n)
		}
		if n := len(events(anon, "?action=log_message&max_count=26&page=2")); n != 1 {
			t.Errorf("page 2 of 26: %d rows, want 1", n)
		}
	})
}

func TestUIPeopleContributors(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	// 250 contributors: c000 has the most CPU hours, c249 the fewest; alice is 150th.
	var docs []any
	for i := range 250 {
		name := fmt.Sprintf("c%03d", i)
		if i == 149 {
			name = "alice"
		}
		docs = append(docs, &rundb.UserStats{Username: name, CPUHours: float64(10000 - i), Games: 10 * i, Tests: i % 7,
			LastUpdated: time.Now().Add(-time.Duration(i) * time.Minute)})
	}
	withCollection(t, env, "user_cache", func(coll *mongo.Collection) error {
		_, err := coll.InsertMany(ctx, docs)
		return err
	})
	if err := env.DB.MonthlyContributors().Put(ctx, &rundb.UserStats{Username: "bob", CPUHours: 5}); err != nil {
		t.Fatal(err)
	}
	anon := env.anon()

	rows := rowsOf(body(anon.Get("/contributors")))
	if len(rows) != 100 || !strings.Contains(rows[0], ">c000<") || !strings.Contains(rows[99], ">c099<") {
		t.Fatalf("page 1: %d rows", len(rows))
	}
	rows = rowsOf(body(anon.Get("/contributors?page=3")))
	if len(rows) != 50 || !strings.Contains(rows[0], `<td class="num">201</td>`) {
		t.Errorf("page 3: %d rows, first %v", len(rows), rows[:1])
	}
	if n := len(rowsOf(body(anon.Get("/contributors?view=all")))); n != 250 {
		t.Errorf("view=all: %d rows, want 250", n)
	}
	rows = rowsOf(body(anon.Get("/contributors?sort=cpu_hours&order=asc")))
	if !strings.Contains(rows[0], ">c249<") {
		t.Errorf("ascending: first row %s", rows[0])
	}
	rows = rowsOf(body(anon.Get("/contributors?sort=username")))
	if !strings.Contains(rows[0], ">alice<") {
		t.Errorf("by name: first row %s", rows[0])
	}

	t.Run("findme", func(t *testing.T) {
		alice := env.as("alice")
		w := alice.Get("/contributors?findme=1")
		loc := w.Header().Get("Location")
		if w.Code != http.StatusFound || !strings.Contains(loc, "page=2") || !strings.Contains(loc, "highlight=alice") ||
			!strings.HasSuffix(loc, "#me") {
			t.Fatalf("findme: %d to %q", w.Code, loc)
		}
		page := body(alice.Get(strings.TrimSuffix(loc, "#me")))
		if !strings.Contains(page, `<tr class="highlight" id="me">`+"\n"+`<td class="num">150</td>`) {
			t.Errorf("alice's row is not highlighted at rank 150")
		}
		// Anonymous visitors have no "me".
		if w := anon.Get("/contributors?findme=1"); w.Code != http.StatusOK {
			t.Errorf("anonymous findme: %d, want the page", w.Code)
		}
		// bob has no totals.
		if page := body(env.as("bob").Get("/contributors?findme=1")); !strings.Contains(page, "no contributions here yet") {
			t.Errorf("findme without totals says nothing")
		}
	})

	t.Run("search goes to the row", func(t *testing.T) {
		w := anon.Get("/contributors?search=C2&sort=cpu_hours&order=desc")
		loc := w.Header().Get("Location")
		if w.Code != http.StatusFound || !strings.Contains(loc, "highlight=c200") || !strings.Contains(loc, "page=3") {
			t.Fatalf("search c2: %d to %q", w.Code, loc)
		}
		if page := body(anon.Get("/contributors?search=zzz")); !strings.Contains(page, "No contributor") {
			t.Errorf("a search without a match says nothing")
		}
	})

	t.Run("monthly", func(t *testing.T) {
		rows := rowsOf(body(anon.Get("/contributors/monthly")))
		if len(rows) != 1 || !strings.Contains(rows[0], ">bob<") {
			t.Errorf("monthly: %v", rows)
		}
	})
}

// mailtoHref finds the href of the mailto link in page and parses it.
func mailtoHref(t *testing.T, page string) *url.URL {
	t.Helper()
	m := regexp.MustCompile(`href="(mailto:[^"]*)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no mailto link:\n%s", page)
	}
	u, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil {
		t.Fatalf("mailto link %q: %v", m[1], err)
	}
	return u
}

// checkMailto asserts that a mailto URL goes to addr only, with only the given headers.
func checkMailto(t *testing.T, u *url.URL, addr string, headers ...string) {
	t.Helper()
	to, err := url.PathUnescape(u.Opaque)
	if u.Scheme != "mailto" || err != nil || to != addr || strings.ContainsAny(u.Opaque, "?&=,") {
		t.Errorf("mailto %q: recipient %q (%v), want exactly %q, escaped", u, to, err, addr)
	}
	q := u.Query()
	if len(q) != len(headers) {
		t.Errorf("mailto %q: headers %v, want only %v", u, q, headers)
	}
	for _, h := range headers {
		if len(q[h]) != 1 {
			t.Errorf("mailto %q: header %s given %d times", u, h, len(q[h]))
		}
	}
	if strings.Contains(u.RawQuery, "+") {
		t.Errorf("mailto %q: a + in the query, which mail clients show as is", u)
	}
}

func TestUIPeopleMailtoEscapes(t *testing.T) {
	const evil = "owner?cc=x@evil.example"
	if got, msg := people.NormaliseEmail(evil); got != evil || msg != "" {
		t.Fatalf("signup refuses %q (%q): then this test guards nothing", evil, msg)
	}

	t.Run("blocked workers", func(t *testing.T) {
		env := newUIEnv(t)
		ctx := context.Background()
		if _, err := env.DB.Users.Create(ctx, rundb.NewUser{Username: "zed", Password: uiPassword, Accepted: true, Email: evil}); err != nil {
			t.Fatal(err)
		}
		const worker = "zed-8cores-1a2b3c4d"
		msg := "Too many losses & time-outs; see body=x&cc=y@evil.example + more"
		if err := env.DB.Workers.Put(ctx, &rundb.Worker{WorkerName: worker, Blocked: true, Message: msg}); err != nil {
			t.Fatal(err)
		}
		page := body(env.as("bob").Get("/workers/show"))
		u := mailtoHref(t, page)
		if strings.Contains(page, `mailto:owner?cc`) {
			t.Errorf("the owner's address is not escaped:\n%s", page)
		}
		checkMailto(t, u, evil, "subject", "body")
		q := u.Query()
		if q.Get("subject") != "Your Shoal worker "+worker || !strings.Contains(q.Get("body"), msg) {
			t.Errorf("subject %q, body %q: want the worker's name and the message intact", q.Get("subject"), q.Get("body"))
		}
	})

	t.Run("mailtoAddr", func(t *testing.T) {
		tmpl := template.Must(template.New("").Funcs(people.TemplateFuncs()).Parse(`<a href="{{mailtoAddr .}}">{{.}}</a>`))
		var b strings.Builder
		if err := tmpl.Execute(&b, evil); err != nil {
			t.Fatal(err)
		}
		checkMailto(t, mailtoHref(t, b.String()), evil)
		if got := people.MailtoURL("a.b+tag@example.org", "hi there", ""); got != "mailto:a.b%2Btag@example.org?subject=hi%20there" {
			t.Errorf("a plain address: %q", got)
		}
	})
}
