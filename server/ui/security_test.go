package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui"
)

// The tests named TestSecurity... perform one finding of the security audit each (docs/SECURITY.md)
// and assert that it is refused, or harmless, and that nothing changed: `go test -run Security
// ./...` runs them all.

// bigBody streams n filler bytes between a head and a tail without holding them, and counts
// what the server read of it.
type bigBody struct {
	r    io.Reader
	read atomic.Int64
}

func newBigBody(head string, n int64, tail string) *bigBody {
	filler := io.LimitReader(repeatByte('x'), n)
	return &bigBody{r: io.MultiReader(strings.NewReader(head), filler, strings.NewReader(tail))}
}

func (b *bigBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

type repeatByte byte

func (c repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

// Finding 1: a UI POST that carries the CSRF token in the X-CSRF-Token header, with a
// multipart body, must not be parsed (nor spooled to disk) before anyone is known, whatever its
// content type's case; a large form with the header token meets the same cap as one with the
// token in a field. The audit made an anonymous client write a 1 GiB multipart-* file.
func TestSecurityMultipartBodyWithHeaderTokenIsNotParsed(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where mime/multipart would spool the file
	env := newUIEnv(t)
	const size = 40 << 20 // beyond any in-memory allowance: a parse would spool it
	for _, path := range []string{"/login", "/signup", "/tests/run", "/user"} {
		for _, ctype := range []string{"multipart/form-data", "Multipart/Form-Data"} {
			t.Run(path+" "+ctype, func(t *testing.T) {
				b := env.anon()
				token := b.CSRF()
				const boundary = "xyzzy"
				head := "--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"username\"\r\n\r\nmallory\r\n" +
					"--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"password\"\r\n\r\nmallory-password\r\n" +
					"--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"blob\"; filename=\"blob.bin\"\r\n" +
					"Content-Type: application/octet-stream\r\n\r\n"
				payload := newBigBody(head, size, "\r\n--"+boundary+"--\r\n")
				req := httptest.NewRequest(http.MethodPost, path, payload)
				req.Header.Set("Content-Type", ctype+"; boundary="+boundary)
				req.Header.Set("X-CSRF-Token", token)
				w := b.Do(req)
				if w.Code != http.StatusUnsupportedMediaType {
					t.Errorf("multipart POST %s with the header token = %d, want 415\n%s", path, w.Code, body(w))
				}
				if n := payload.read.Load(); n > 1<<20 {
					t.Errorf("the server read %d bytes of a body it refuses", n)
				}
				assertNoSpooledFiles(t, tmp)
			})
		}
	}
	if _, err := env.DB.Users.Get(context.Background(), "mallory"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a refused signup made an account: err = %v", err)
	}
}

// Finding 1, the form side: a URL-encoded form beyond the cap is refused with 413 whether the
// token travels in a field or in the header, after reading at most the cap.
func TestSecurityOversizedFormWithHeaderTokenIsRefused(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	token := b.CSRF()
	head := "username=mallory&password=mallory-password&email=m%40example.org&padding="
	payload := newBigBody(head, 64<<20, "")
	req := httptest.NewRequest(http.MethodPost, "/signup", payload)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", token)
	w := b.Do(req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 64 MiB form with the header token = %d, want 413\n%s", w.Code, body(w))
	}
	if n := payload.read.Load(); n > ui.MaxFormBody+64<<10 {
		t.Errorf("the server read %d bytes of a form capped at %d", n, ui.MaxFormBody)
	}
	if _, err := env.DB.Users.Get(context.Background(), "mallory"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a refused signup made an account: err = %v", err)
	}
	// The header token still works for a form of a normal size.
	form := url.Values{"username": {"alice"}, "password": {uiPassword}}
	req = httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", token)
	if w := b.Do(req); w.Code != http.StatusSeeOther {
		t.Errorf("a login with the header token = %d, want 303\n%s", w.Code, body(w))
	}
}

// assertNoSpooledFiles fails if a multipart parse left a file in dir.
func assertNoSpooledFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "multipart-") {
			info, _ := e.Info()
			t.Errorf("a multipart body was spooled to %s (%s)", e.Name(), fmt.Sprint(info.Size()))
		}
	}
}

// Finding 14: every reply says nosniff; every HTML page, error pages outside the UI included,
// carries the UI's content security policy and refuses to be framed.
func TestSecurityHeadersOnEveryReply(t *testing.T) {
	env := newUIEnv(t)
	for _, c := range []struct {
		method, path string
		html         bool
	}{
		{http.MethodGet, "/no/such/page", true},
		{http.MethodDelete, "/tests", true},
		{http.MethodGet, "/tests", true},
		{http.MethodGet, "/api/no_such_endpoint", false},
		{http.MethodGet, "/api/active_runs", false},
		{http.MethodPost, "/api/request_task", false},
		{http.MethodGet, "/healthz", false},
		{http.MethodGet, "/static/shoal.css", false},
	} {
		w := httptest.NewRecorder()
		env.Server.Handler().ServeHTTP(w, httptest.NewRequest(c.method, c.path, strings.NewReader("{}")))
		h := w.Header()
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (%d): no nosniff", c.method, c.path, w.Code)
		}
		if !c.html {
			continue
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s %s (%d): CSP %q", c.method, c.path, w.Code, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s (%d): X-Frame-Options %q", c.method, c.path, w.Code, h.Get("X-Frame-Options"))
		}
	}
}

// copyBrowser is another browser holding copies of b's cookies: a stolen or left-behind
// session cookie.
func copyBrowser(b *browser) *browser {
	c := &browser{b.Env.Anon()}
	maps.Copy(c.Cookies, b.Cookies)
	return c
}

// Finding 5: a session ends on the server. After a logout a copy of its cookie is logged out;
// "log out everywhere" ends every session of the account; a block ends them all; a session
// opened without "remember me" lasts 12 hours on the server, a remembered one 30 days, and
// the login form's box is not ticked by default.
func TestSecuritySessionsAreRevocable(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()

	b := env.as("alice")
	stolen := copyBrowser(b)
	if stolen.LoggedInAs() != "alice" {
		t.Fatal("the copied cookie does not log in: the test proves nothing")
	}
	if w := b.Post("/logout", url.Values{}); w.Code != http.StatusSeeOther {
		t.Fatalf("logout = %d", w.Code)
	}
	if got := stolen.LoggedInAs(); got != "" {
		t.Errorf("a copy of the cookie is still logged in as %q after the logout", got)
	}

	laptop, phone := env.as("alice"), env.as("alice")
	phoneCopy := copyBrowser(phone)
	if w := laptop.Post("/logout", url.Values{"everywhere": {"1"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("log out everywhere = %d", w.Code)
	}
	for name, br := range map[string]*browser{"laptop": laptop, "phone": phone, "the phone's copied cookie": phoneCopy} {
		if got := br.LoggedInAs(); got != "" {
			t.Errorf("%s is still logged in as %q after logging out everywhere", name, got)
		}
	}
	if u, _ := env.DB.Users.Get(ctx, "alice"); len(u.Sessions) != 0 {
		t.Errorf("%d sessions still recorded after logging out everywhere", len(u.Sessions))
	}

	eve := env.as("carol")
	if err := env.DB.Users.SetBlocked(ctx, "carol", true); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Users.SetBlocked(ctx, "carol", false); err != nil {
		t.Fatal(err)
	}
	if got := eve.LoggedInAs(); got != "" {
		t.Errorf("a session opened before a block is still logged in as %q after it was lifted", got)
	}

	// Lifetimes, on the server: 12 hours, or 30 days remembered.
	if page := body(env.anon().Get("/login")); strings.Contains(page, `name="remember" value="1" checked`) {
		t.Error("remember me is ticked by default")
	}
	env.as("bob")
	u, _ := env.DB.Users.Get(ctx, "bob")
	if n := len(u.Sessions); n != 1 || time.Until(u.Sessions[0].Expires) > 12*time.Hour || time.Until(u.Sessions[0].Expires) < 11*time.Hour {
		t.Errorf("a session without remember me: %+v, want one ending in 12 hours", u.Sessions)
	}
	if !u.HasSession(u.Sessions[0].ID, time.Now()) || u.HasSession(u.Sessions[0].ID, time.Now().Add(13*time.Hour)) {
		t.Error("a session's end on the server is not enforced")
	}
}

// Finding 6: event-log searches are bounded. An anonymous text search (which no index serves)
// is refused; every search reads a window of days (a month by default, a year at most for
// users, a month for anonymous visitors); and searches run at most guard.HeavyReadSlots at once: the
// rest are told to come back, while the worker path goes on.
func TestSecuritySearchesAreBoundedAndKeptOffTheWorkerPath(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	now := float64(time.Now().Unix())
	for _, a := range []rundb.Action{
		{Action: "log_message", Username: "bob", Message: "recent needle", Time: now - 3600},
		{Action: "log_message", Username: "bob", Message: "old needle", Time: now - 60*86400},
	} {
		if err := env.DB.Actions.Insert(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	if w := env.anon().Get("/actions?text=needle"); w.Code != http.StatusForbidden || !strings.Contains(body(w), "needs a login") {
		t.Errorf("an anonymous text search = %d, want 403 asking for a login", w.Code)
	}
	shows := func(b *browser, query string) (recent, old bool) {
		t.Helper()
		w := b.Get("/actions" + query)
		if w.Code != http.StatusOK {
			t.Fatalf("/actions%s = %d", query, w.Code)
		}
		page := body(w)
		return strings.Contains(page, "recent needle"), strings.Contains(page, "old needle")
	}
	for _, c := range []struct {
		who         *browser
		query       string
		recent, old bool
	}{
		{env.anon(), "", true, false},
		{env.anon(), "?days=90", true, false}, // capped at a month
		{env.as("alice"), "?text=needle", true, false},
		{env.as("alice"), "?text=needle&days=90", true, true},
		{env.as("alice"), "?days=100000", true, true}, // capped at a year
	} {
		if recent, old := shows(c.who, c.query); recent != c.recent || old != c.old {
			t.Errorf("/actions%s: recent %v, 60 days old %v; want %v, %v", c.query, recent, old, c.recent, c.old)
		}
	}

	// Every search slot busy: a search is refused after heavyReadWait, the worker path answers.
	for range guard.HeavyReadSlots {
		if err := ui.HeavyReads(env.Server.UI()).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for range guard.HeavyReadSlots {
			ui.HeavyReads(env.Server.UI()).Release()
		}
	}()
	if w := env.anon().Get("/actions"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a search with every slot busy = %d, want 503 with Retry-After", w.Code)
	}
	w := httptest.NewRecorder()
	env.Server.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/actions", strings.NewReader(`{"action": "log_message"}`)))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("/api/actions with every slot busy = %d, want 503", w.Code)
	}
	b, _ := json.Marshal(map[string]any{"password": uiPassword, "worker_info": map[string]any{"username": "alice"}})
	w = httptest.NewRecorder()
	env.Server.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/request_version", bytes.NewReader(b)))
	if w.Code != http.StatusOK {
		t.Errorf("request_version while searches are busy = %d, want 200", w.Code)
	}
}
