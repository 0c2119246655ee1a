package ui_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

// Behind the local proxy (nginx sends X-Forwarded-For and X-Forwarded-Proto), a browser on
// HTTPS gets Secure cookies; a client talking to Shoal directly cannot ask for them, and every
// cookie is HttpOnly and SameSite=Lax.
func TestUISessionCookieFlags(t *testing.T) {
	env := newUIEnv(t)
	get := func(remote string, headers map[string]string) *http.Cookie {
		req := httptest.NewRequest(http.MethodGet, "/login", nil)
		req.RemoteAddr = remote
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		env.Server.Handler().ServeHTTP(w, req)
		c := uitest.SessionSetCookie(w)
		if c == nil {
			t.Fatalf("GET /login set no session cookie")
		}
		if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
			t.Errorf("cookie is not HttpOnly and SameSite=Lax: %+v", c)
		}
		return c
	}
	https := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
	if c := get("127.0.0.1:4321", https); !c.Secure {
		t.Error("a request through the local proxy over HTTPS got a cookie without Secure")
	}
	if c := get("198.51.100.9:4321", https); c.Secure {
		t.Error("a remote client's own X-Forwarded-Proto was believed")
	}
	if c := get("127.0.0.1:4321", nil); c.Secure {
		t.Error("plain HTTP got a Secure cookie (the browser would drop it)")
	}
}

// A remembered login keeps its lifetime (and Secure) on every later save of the session, not
// just on the login's.
func TestUIRememberedSessionKeepsItsLifetime(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	w := b.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}, "remember": {"1"}})
	if c := uitest.SessionSetCookie(w); c == nil || c.MaxAge != 30*24*3600 {
		t.Fatalf("remember me: cookie %+v, want a 30-day Max-Age", c)
	}
	// Blocking her own worker saves the session again (a flash message).
	w = b.Post("/workers/alice-4cores-abcd1234", url.Values{"blocked": {"1"}, "message": {"testing"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("block own worker = %d\n%s", w.Code, body(w))
	}
	c := uitest.SessionSetCookie(w)
	if c == nil {
		t.Fatal("the flash message did not save the session: the test proves nothing")
	}
	if c.MaxAge != 30*24*3600 {
		t.Errorf("a later save changed the remembered session's Max-Age to %d", c.MaxAge)
	}
}

// Only the upload takes a multipart body: elsewhere it is refused before anything reads it, so
// nobody can make the server spool large bodies to disk.
func TestUIMultipartOnlyOnUpload(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	token := b.CSRF()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("username", "alice")
	_ = mw.WriteField("password", uiPassword)
	_ = mw.Close()
	req := httptest.NewRequest(http.MethodPost, "/login?csrf_token="+url.QueryEscape(token), &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	w := b.Do(req)
	if w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("multipart POST /login = %d, want 415", w.Code)
	}
	if strings.Contains(w.Header().Get("Location"), "/tests") {
		t.Error("the multipart login went through")
	}
}

// A form bigger than any real one is refused before it is parsed.
func TestUIOversizedFormIsRefused(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	form := url.Values{"csrf_token": {b.CSRF()}, "username": {"alice"}, "password": {uiPassword},
		"padding": {strings.Repeat("x", ui.MaxFormBody)}}
	if w := b.PostRaw("/login", form); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte form = %d, want 413", len(form.Encode()), w.Code)
	}
}

// Every state-changing UI route refuses a POST without the session's CSRF token.
func TestUIEveryPostNeedsTheCSRFToken(t *testing.T) {
	env := newUIEnv(t)
	b := env.as("bob")
	for _, r := range env.Server.Handler().(*gin.Engine).Routes() {
		if r.Method != http.MethodPost || strings.HasPrefix(r.Path, "/api/") {
			continue
		}
		path := strings.NewReplacer(":username", "alice", ":name", "alice-4cores-abcd1234").Replace(r.Path)
		w := b.PostRaw(path, url.Values{"run-id": {"0123456789abcdef01234567"}})
		if w.Code != http.StatusForbidden || !strings.Contains(body(w), "expired") {
			t.Errorf("POST %s without a token = %d, want 403", path, w.Code)
		}
	}
}

func TestUINavigationMarksOneItem(t *testing.T) {
	nav := ui.BaseFuncs["navClass"].(func(string, string) string)
	for _, c := range []struct {
		path, item string
		current    bool
	}{
		{"/tests", "/tests", true}, {"/tests/view/abc", "/tests", true},
		{"/tests/run", "/tests", false}, {"/tests/run", "/tests/run", true},
		{"/tests/finished", "/tests", false}, {"/contributors/monthly", "/contributors", true},
		{"/actions", "/tests", false},
	} {
		if got := nav(c.path, c.item) == "current"; got != c.current {
			t.Errorf("on %s, item %s current = %v, want %v", c.path, c.item, got, c.current)
		}
	}
}
