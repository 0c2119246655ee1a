// Package uitest is what the web UI's tests share: a primary server over a fresh database with
// the UI's usual cast of accounts (Env), and a browser with a cookie jar that logs in through
// the form and posts with the session's CSRF token (Browser). The UI's pages are tested
// through the whole server (server.New), which routes to them.
package uitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
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

// Env is a primary server over a fresh database with the UI's usual cast, each with the
// password Password:
//   - alice: a user; bob and carol: approvers; dave: pending; eve: blocked.
type Env struct {
	T      *testing.T
	Server *server.Server
	Deps   server.Deps // what Server was built with
	DB     *rundb.DB
	Sched  *scheduler.Scheduler
	Runs   *runcache.Cache
}

// Password is every account's password.
const Password = "secret-password"

// New is NewSched with the scheduler's default configuration (and a semaphore of five), the
// server's dependencies adjusted by change first, if not nil.
func New(t *testing.T, change func(*server.Deps)) *Env {
	t.Helper()
	return NewSched(t, scheduler.Config{}, change)
}

// NewSched builds the Env whose scheduler has cfg (and a semaphore of five), the server's
// dependencies adjusted by change first, if not nil.
func NewSched(t *testing.T, cfg scheduler.Config, change func(*server.Deps)) *Env {
	t.Helper()
	ctx := context.Background()
	db := rundbtest.Open(t)
	for _, u := range []rundb.NewUser{
		{Username: "alice", Password: Password, Accepted: true, Email: "alice@example.org"},
		{Username: "bob", Password: Password, Accepted: true, Approver: true, Email: "bob@example.org"},
		{Username: "carol", Password: Password, Accepted: true, Approver: true, Email: "carol@example.org"},
		{Username: "dave", Password: Password, Email: "dave@example.org"},
		{Username: "eve", Password: Password, Accepted: true, Email: "eve@example.org"},
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
	return &Env{T: t, Server: s, Deps: deps, DB: db, Sched: sch, Runs: runs}
}

// Browser is a client with a cookie jar, like a person's browser.
type Browser struct {
	Env     *Env
	Cookies map[string]*http.Cookie
}

// Anon returns a browser that is not logged in.
func (e *Env) Anon() *Browser { return &Browser{Env: e, Cookies: map[string]*http.Cookie{}} }

// As returns a browser logged in as username, through the login form.
func (e *Env) As(username string) *Browser {
	e.T.Helper()
	b := e.Anon()
	w := b.Post("/login", url.Values{"username": {username}, "password": {Password}})
	if w.Code != http.StatusSeeOther && w.Code != http.StatusFound {
		e.T.Fatalf("log in as %s: %d\n%s", username, w.Code, w.Body)
	}
	return b
}

// Do sends req with the browser's cookies and keeps the cookies of the reply.
func (b *Browser) Do(req *http.Request) *httptest.ResponseRecorder {
	for _, c := range b.Cookies {
		req.AddCookie(c)
	}
	w := httptest.NewRecorder()
	b.Env.Server.Handler().ServeHTTP(w, req)
	for _, c := range w.Result().Cookies() {
		if c.MaxAge < 0 {
			delete(b.Cookies, c.Name)
			continue
		}
		b.Cookies[c.Name] = c
	}
	return w
}

// Get fetches a page.
func (b *Browser) Get(path string) *httptest.ResponseRecorder {
	return b.Do(httptest.NewRequest(http.MethodGet, path, nil))
}

// CSRFInput is a form's CSRF token field; its submatch is the token.
var CSRFInput = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// CSRF returns the browser's CSRF token, read from a page's form as a browser would.
func (b *Browser) CSRF() string {
	b.Env.T.Helper()
	w := b.Get("/login")
	m := CSRFInput.FindStringSubmatch(w.Body.String())
	if m == nil {
		b.Env.T.Fatalf("no csrf_token on /login (%d):\n%s", w.Code, w.Body)
	}
	return m[1]
}

// Post sends a form with the browser's CSRF token (unless form already has one).
func (b *Browser) Post(path string, form url.Values) *httptest.ResponseRecorder {
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", b.CSRF())
	}
	return b.PostRaw(path, form)
}

// PostRaw sends a form exactly as given (no token added).
func (b *Browser) PostRaw(path string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.Do(req)
}

// OnSecondary returns a browser with b's session on a secondary instance sharing env's database.
func (b *Browser) OnSecondary(t *testing.T) *Browser {
	t.Helper()
	env := b.Env
	sec, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
		DB: env.DB, Runs: env.Sched, SessionSecret: env.Deps.SessionSecret, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := *env
	e.Server = sec
	return &Browser{Env: &e, Cookies: b.Cookies}
}

// LoggedInAs returns the username the browser's session shows in the page header, or "".
func (b *Browser) LoggedInAs() string {
	b.Env.T.Helper()
	page := Body(b.Get("/actions"))
	const marker = `class="user-name">`
	i := strings.Index(page, marker)
	if i < 0 {
		return ""
	}
	rest := page[i+len(marker):]
	return rest[:strings.Index(rest, "<")]
}

// SessionSetCookie returns the session cookie (shoal_session) a reply sets, or nil.
func SessionSetCookie(w *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range w.Result().Cookies() {
		if c.Name == "shoal_session" {
			return c
		}
	}
	return nil
}

// Body returns a reply's body as a string.
func Body(w *httptest.ResponseRecorder) string {
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}

// LockedWriter serialises writes to W: a log that handlers of several requests write at once.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}
