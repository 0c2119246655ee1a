package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// uiEnv is a primary server over a fresh database with the UI's usual cast, each with the
// password "secret-password":
//   - alice: a user; bob and carol: approvers; dave: pending; eve: blocked.
type uiEnv struct {
	t     *testing.T
	s     *server.Server
	deps  server.Deps // what s was built with
	db    *rundb.DB
	sched *scheduler.Scheduler
	runs  *runcache.Cache
}

const uiPassword = "secret-password"

// The web UI's handlers are tested through the whole server (server.New), which routes to
// them.

func TestMain(m *testing.M) { rundbtest.Main(m) }

func newUIEnv(t *testing.T) *uiEnv {
	t.Helper()
	return newUIEnvWith(t, nil)
}

// newUIEnvWith is newUIEnv with the server's dependencies adjusted by change first, if not nil.
func newUIEnvWith(t *testing.T, change func(*server.Deps)) *uiEnv {
	t.Helper()
	return newUIEnvSched(t, scheduler.Config{}, change)
}

// newUIEnvSched is newUIEnvWith whose scheduler has cfg (and a semaphore of five).
func newUIEnvSched(t *testing.T, cfg scheduler.Config, change func(*server.Deps)) *uiEnv {
	t.Helper()
	ctx := context.Background()
	db := rundbtest.Open(t)
	for _, u := range []rundb.NewUser{
		{Username: "alice", Password: uiPassword, Accepted: true, Email: "alice@example.org"},
		{Username: "bob", Password: uiPassword, Accepted: true, Approver: true, Email: "bob@example.org"},
		{Username: "carol", Password: uiPassword, Accepted: true, Approver: true, Email: "carol@example.org"},
		{Username: "dave", Password: uiPassword, Email: "dave@example.org"},
		{Username: "eve", Password: uiPassword, Accepted: true, Email: "eve@example.org"},
	} {
		if _, err := db.Users.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Users.SetBlocked(ctx, "eve", true); err != nil {
		t.Fatal(err)
	}
	logger := servertest.DiscardLogger()
	runs := runcache.New(db.Runs, runcache.Options{Logger: logger})
	cfg.TaskSemaphoreSize = 5
	sch := scheduler.New(cfg, db, runs, logger)
	deps := server.Deps{
		Logger: logger, Tokens: tokenpool.New(8), Version: "test",
		DB: db, Runs: sch, Scheduler: sch, DataDir: t.TempDir(), Changed: runs.Changed,
		// Set, rather than left to New to pick, so that a secondary can share it.
		SessionSecret: []byte(guard.NewToken()),
	}
	if change != nil {
		change(&deps)
	}
	s, err := server.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	return &uiEnv{t: t, s: s, deps: deps, db: db, sched: sch, runs: runs}
}

// browser is a client with a cookie jar, like a person's browser.
type browser struct {
	env     *uiEnv
	cookies map[string]*http.Cookie
}

// anon returns a browser that is not logged in.
func (e *uiEnv) anon() *browser { return &browser{env: e, cookies: map[string]*http.Cookie{}} }

// as returns a browser logged in as username, through the login form.
func (e *uiEnv) as(username string) *browser {
	e.t.Helper()
	b := e.anon()
	w := b.post("/login", url.Values{"username": {username}, "password": {uiPassword}})
	if w.Code != http.StatusSeeOther && w.Code != http.StatusFound {
		e.t.Fatalf("log in as %s: %d\n%s", username, w.Code, w.Body)
	}
	return b
}

func (b *browser) do(req *http.Request) *httptest.ResponseRecorder {
	for _, c := range b.cookies {
		req.AddCookie(c)
	}
	w := httptest.NewRecorder()
	b.env.s.Handler().ServeHTTP(w, req)
	for _, c := range w.Result().Cookies() {
		if c.MaxAge < 0 {
			delete(b.cookies, c.Name)
			continue
		}
		b.cookies[c.Name] = c
	}
	return w
}

// get fetches a page.
func (b *browser) get(path string) *httptest.ResponseRecorder {
	return b.do(httptest.NewRequest(http.MethodGet, path, nil))
}

var csrfInput = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrf returns the browser's CSRF token, read from a page's form as a browser would.
func (b *browser) csrf() string {
	b.env.t.Helper()
	w := b.get("/login")
	m := csrfInput.FindStringSubmatch(w.Body.String())
	if m == nil {
		b.env.t.Fatalf("no csrf_token on /login (%d):\n%s", w.Code, w.Body)
	}
	return m[1]
}

// post sends a form with the browser's CSRF token (unless form already has one).
func (b *browser) post(path string, form url.Values) *httptest.ResponseRecorder {
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", b.csrf())
	}
	return b.postRaw(path, form)
}

// postRaw sends a form exactly as given (no token added).
func (b *browser) postRaw(path string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// body returns a reply's body as a string.
func body(w *httptest.ResponseRecorder) string {
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}
