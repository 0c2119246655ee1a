package people_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui/people"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

func TestUIAccountsLogin(t *testing.T) {
	env := newUIEnv(t)

	t.Run("the form", func(t *testing.T) {
		w := env.anon().Get("/login?next=/tests/run")
		page := body(w)
		if w.Code != http.StatusOK || !strings.Contains(page, `name="username"`) ||
			!strings.Contains(page, `name="next" value="/tests/run"`) {
			t.Fatalf("GET /login: %d\n%s", w.Code, page)
		}
	})

	tests := []struct {
		name, user, password string
		status               int
		message              string
	}{
		{"wrong password", "alice", "not-the-password", http.StatusBadRequest, "Invalid username or password."},
		{"unknown user", "zoe", uiPassword, http.StatusBadRequest, "Invalid username or password."},
		{"empty form", "", "", http.StatusBadRequest, "Invalid username or password."},
		{"pending user", "dave", uiPassword, http.StatusForbidden, "Your account is pending approval."},
		{"blocked user", "eve", uiPassword, http.StatusForbidden, "Your account is blocked."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := env.anon()
			w := b.Post("/login", url.Values{"username": {tc.user}, "password": {tc.password}})
			page := body(w)
			if w.Code != tc.status || !strings.Contains(page, tc.message) {
				t.Fatalf("status %d, want %d with %q:\n%s", w.Code, tc.status, tc.message, page)
			}
			if tc.user != "" && !strings.Contains(page, `value="`+tc.user+`"`) {
				t.Errorf("the form lost the username")
			}
			if got := b.LoggedInAs(); got != "" {
				t.Errorf("logged in as %q after a refused login", got)
			}
		})
	}

	t.Run("success opens a session ending with the browser", func(t *testing.T) {
		b := env.anon()
		w := b.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests" {
			t.Fatalf("status %d to %q, want 303 to /tests", w.Code, w.Header().Get("Location"))
		}
		if c := uitest.SessionSetCookie(w); c == nil || c.MaxAge != 0 || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
			t.Errorf("session cookie %+v: want a browser-session, HttpOnly, SameSite=Lax cookie", c)
		}
		if got := b.LoggedInAs(); got != "alice" {
			t.Errorf("logged in as %q, want alice", got)
		}
	})

	t.Run("remember me keeps the session 30 days", func(t *testing.T) {
		w := env.anon().Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}, "remember": {"1"}})
		c := uitest.SessionSetCookie(w)
		if c == nil || c.MaxAge != 30*24*3600 {
			t.Fatalf("session cookie %+v: want Max-Age %d", c, 30*24*3600)
		}
	})

	for _, tc := range []struct{ next, want string }{
		{"/tests/run", "/tests/run"},
		{"/user?x=1", "/user?x=1"},
		{"//evil.example", "/tests"},
		{"/\\evil.example", "/tests"},
		{"https://evil.example/", "/tests"},
		{"javascript:alert(1)", "/tests"},
	} {
		t.Run("next "+tc.next, func(t *testing.T) {
			w := env.anon().Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}, "next": {tc.next}})
			if got := w.Header().Get("Location"); w.Code != http.StatusSeeOther || got != tc.want {
				t.Fatalf("status %d to %q, want 303 to %q", w.Code, got, tc.want)
			}
		})
	}

	t.Run("a logged-in user may log in as someone else", func(t *testing.T) {
		b := env.as("alice")
		if w := b.Get("/login"); w.Code != http.StatusOK || !strings.Contains(body(w), "logged in as") {
			t.Fatalf("GET /login when logged in: %d", w.Code)
		}
		b.Post("/login", url.Values{"username": {"bob"}, "password": {uiPassword}})
		if got := b.LoggedInAs(); got != "bob" {
			t.Fatalf("logged in as %q, want bob", got)
		}
	})

	t.Run("without the CSRF token nothing happens", func(t *testing.T) {
		b := env.anon()
		b.Get("/login")
		w := b.PostRaw("/login", url.Values{"username": {"alice"}, "password": {uiPassword}})
		if w.Code != http.StatusForbidden {
			t.Fatalf("status %d, want 403", w.Code)
		}
		if got := b.LoggedInAs(); got != "" {
			t.Errorf("logged in as %q", got)
		}
	})
}

func TestUIAccountsLogout(t *testing.T) {
	env := newUIEnv(t)
	b := env.as("alice")

	w := b.PostRaw("/logout", url.Values{})
	if w.Code != http.StatusForbidden {
		t.Fatalf("logout without the token: %d, want 403", w.Code)
	}
	if got := b.LoggedInAs(); got != "alice" {
		t.Fatalf("a refused logout logged out (now %q)", got)
	}

	w = b.Post("/logout", nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests" {
		t.Fatalf("logout: %d to %q", w.Code, w.Header().Get("Location"))
	}
	if got := b.LoggedInAs(); got != "" {
		t.Fatalf("still logged in as %q", got)
	}
}

func TestUIAccountsLoginRateLimit(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	fail := url.Values{"username": {"alice"}, "password": {"wrong-password"}}
	for i := range guard.LoginPerUserIPBurst {
		if w := b.Post("/login", fail); w.Code != http.StatusBadRequest {
			t.Fatalf("failed attempt %d: %d, want 400", i+1, w.Code)
		}
	}
	// Over the limit, even the right password is not checked.
	w := b.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("after the burst: %d (Retry-After %q), want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	page := body(w)
	if !strings.Contains(page, "Too many failed logins") || !strings.Contains(page, `value="alice"`) {
		t.Errorf("the 429 page should say why and keep the form:\n%s", page)
	}
	if got := b.LoggedInAs(); got != "" {
		t.Errorf("logged in as %q while limited", got)
	}

	// The client's address is now over its limit too, for another user: bob from the same
	// address is refused...
	w = env.anon().Post("/login", url.Values{"username": {"bob"}, "password": {uiPassword}})
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("another user from the same address: %d, want 429", w.Code)
	}
	// ...while from another address both log in: failures from one address do not lock the
	// account (TestAuthLimitNoLockoutFromOtherAddresses has more).
	other := func(user string) int {
		a := env.anon()
		form := url.Values{"username": {user}, "password": {uiPassword}, "csrf_token": {a.CSRF()}}
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "198.51.100.7:4321"
		return a.Do(req).Code
	}
	if code := other("alice"); code != http.StatusSeeOther {
		t.Errorf("alice from another address: %d, want 303", code)
	}
	if code := other("bob"); code != http.StatusSeeOther {
		t.Errorf("bob from another address: %d, want 303", code)
	}
}

func TestUIAccountsSuccessfulLoginsAreNotLimited(t *testing.T) {
	env := newUIEnv(t)
	for i := range 3 * guard.LoginPerIPBurst {
		env.as([]string{"alice", "bob", "carol"}[i%3])
	}
}

func TestUIAccountsSignup(t *testing.T) {
	env := newUIEnv(t)

	t.Run("the form", func(t *testing.T) {
		w := env.anon().Get("/signup")
		page := body(w)
		for _, f := range []string{"username", "password", "password2", "email", "tests_repo"} {
			if !strings.Contains(page, `name="`+f+`"`) {
				t.Errorf("no field %s", f)
			}
		}
		if w.Code != http.StatusOK {
			t.Fatalf("GET /signup: %d", w.Code)
		}
	})

	good := url.Values{"username": {"frank"}, "password": {"Kxq7-vent-lamp"}, "password2": {"Kxq7-vent-lamp"},
		"email": {"Frank@Example.ORG"}, "tests_repo": {""}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for key, vals := range good {
			f[key] = append([]string(nil), vals...)
		}
		f.Set(k, v)
		return f
	}
	invalid := []struct {
		name  string
		form  url.Values
		field string
	}{
		{"no username", with("username", ""), "username"},
		{"username with a space", with("username", "fr ank"), "username"},
		{"username with a dash", with("username", "fr-ank"), "username"},
		{"one-letter username", with("username", "f"), "username"},
		{"short password", url.Values{"username": {"frank"}, "password": {"a1B!"}, "password2": {"a1B!"}, "email": {"f@example.org"}}, "password"},
		{"common password", url.Values{"username": {"frank"}, "password": {"password123"}, "password2": {"password123"}, "email": {"f@example.org"}}, "password"},
		{"password with the username", url.Values{"username": {"frank"}, "password": {"frank-is-here-1"}, "password2": {"frank-is-here-1"}, "email": {"f@example.org"}}, "password"},
		{"short password of one kind", url.Values{"username": {"frank"}, "password": {"abcdefghk"}, "password2": {"abcdefghk"}, "email": {"f@example.org"}}, "password"},
		{"passwords differ", with("password2", "Kxq7-vent-lamq"), "password2"},
		{"no email", with("email", ""), "email"},
		{"bad email", with("email", "frank@"), "email"},
		{"email without a domain name", with("email", "frank@localhost"), "email"},
		{"repo not on GitHub", with("tests_repo", "https://gitlab.com/frank/Stockfish"), "tests_repo"},
		{"repo not a repo", with("tests_repo", "https://github.com/frank"), "tests_repo"},
		{"username taken", with("username", "Alice"), "username"},
		{"email taken", with("email", "alice@example.org"), "email"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			w := env.anon().Post("/signup", tc.form)
			page := body(w)
			if w.Code != http.StatusBadRequest && w.Code != http.StatusConflict {
				t.Fatalf("status %d, want 400 or 409:\n%s", w.Code, page)
			}
			if !strings.Contains(page, `id="err-`+tc.field+`"`) || !strings.Contains(page, `aria-describedby="err-`+tc.field+`"`) {
				t.Errorf("field %s not marked:\n%s", tc.field, page)
			}
			if u := tc.form.Get("username"); u != "" && !strings.Contains(page, `value="`+u+`"`) {
				t.Errorf("typed username %q lost", u)
			}
			if e := tc.form.Get("email"); e != "" && !strings.Contains(page, `value="`+e+`"`) {
				t.Errorf("typed email %q lost", e)
			}
			if strings.Contains(page, tc.form.Get("password")) && tc.form.Get("password") != "" {
				t.Errorf("the page repeats the password")
			}
		})
	}
	if _, err := env.DB.Users.Get(context.Background(), "frank"); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("a refused signup created the user: %v", err)
	}

	t.Run("without the CSRF token nothing is created", func(t *testing.T) {
		b := env.anon()
		b.Get("/signup")
		if w := b.PostRaw("/signup", good); w.Code != http.StatusForbidden {
			t.Fatalf("status %d, want 403", w.Code)
		}
		if _, err := env.DB.Users.Get(context.Background(), "frank"); !errors.Is(err, rundb.ErrNotFound) {
			t.Fatalf("created the user: %v", err)
		}
	})

	t.Run("a pending user waits for an approver", func(t *testing.T) {
		b := env.anon()
		form := with("tests_repo", "https://github.com/frank/Stockfish.git")
		w := b.Post("/signup", form)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
			t.Fatalf("signup: %d to %q\n%s", w.Code, w.Header().Get("Location"), body(w))
		}
		if page := body(b.Get("/login")); !strings.Contains(page, "an approver must accept your account") {
			t.Errorf("the login page does not say what happens next:\n%s", page)
		}
		u, err := env.DB.Users.Get(context.Background(), "frank")
		if err != nil {
			t.Fatal(err)
		}
		if !u.Pending || u.Blocked || u.IsApprover() || u.Email != "Frank@example.org" ||
			u.TestsRepo != "https://github.com/frank/Stockfish" {
			t.Errorf("new user %+v", u)
		}

		w = b.Post("/login", url.Values{"username": {"frank"}, "password": {"Kxq7-vent-lamp"}})
		if w.Code != http.StatusForbidden || !strings.Contains(body(w), "Your account is pending approval.") {
			t.Fatalf("a pending user logging in: %d", w.Code)
		}

		// alice may not accept anyone.
		if w := env.as("alice").Post("/user/frank", url.Values{"pending": {"0"}}); w.Code != http.StatusForbidden {
			t.Errorf("alice accepting: %d, want 403", w.Code)
		}
		w = env.as("bob").Post("/user/frank", url.Values{"pending": {"0"}})
		if w.Code != http.StatusSeeOther {
			t.Fatalf("bob accepting: %d\n%s", w.Code, body(w))
		}
		w = b.Post("/login", url.Values{"username": {"frank"}, "password": {"Kxq7-vent-lamp"}})
		if w.Code != http.StatusSeeOther || b.LoggedInAs() != "frank" {
			t.Fatalf("an accepted user logging in: %d", w.Code)
		}
		acts, err := env.DB.Actions.Find(context.Background(), rundb.ActionFilter{Action: "accept_user"}, 0)
		if err != nil || len(acts) != 1 || acts[0].Username != "bob" || acts[0].User != "frank" || acts[0].Message != "accepted" {
			t.Errorf("accept_user actions %+v (%v)", acts, err)
		}
	})

	t.Run("a logged-in user has no signup form", func(t *testing.T) {
		if w := env.as("alice").Get("/signup"); w.Code != http.StatusFound {
			t.Errorf("status %d, want 302", w.Code)
		}
	})
}

func TestUIAccountsSignupRateLimit(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	signup := func(name string) *httptest.ResponseRecorder {
		return b.Post("/signup", url.Values{"username": {name}, "password": {"Kxq7-vent-lamp"},
			"password2": {"Kxq7-vent-lamp"}, "email": {name + "@example.org"}})
	}
	// Invalid forms cost nothing.
	for range 2 * guard.SignupPerIPBurst {
		if w := b.Post("/signup", url.Values{"username": {"x y"}}); w.Code != http.StatusBadRequest {
			t.Fatalf("invalid form: %d", w.Code)
		}
	}
	for i := range guard.SignupPerIPBurst {
		if w := signup("user" + string(rune('a'+i))); w.Code != http.StatusSeeOther {
			t.Fatalf("signup %d: %d", i+1, w.Code)
		}
	}
	w := signup("userz")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("signup after the burst: %d, want 429 with Retry-After", w.Code)
	}
	if page := body(w); !strings.Contains(page, "Too many accounts") || !strings.Contains(page, `value="userz"`) {
		t.Errorf("the 429 page should say why and keep the form:\n%s", page)
	}
	if _, err := env.DB.Users.Get(context.Background(), "userz"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a limited signup created the user: %v", err)
	}
}

func TestUIAccountsPasswordRule(t *testing.T) {
	tests := []struct {
		password, username, email string
		ok                        bool
	}{
		{"Kxq7-vent-lamp", "frank", "f@example.org", true},
		{"correct horse battery staple", "frank", "f@example.org", true},
		{"longlowercasewords", "frank", "f@example.org", true},
		{"shortone", "frank", "f@example.org", false},
		{"Short1!", "frank", "f@example.org", false},
		{"aaaaaaaaaaaaaaaa", "frank", "f@example.org", false},
		{"Password123", "frank", "f@example.org", false},
		{"myFRANKpassword9", "frank", "f@example.org", false},
		{"jdoe-secret-99", "frank", "jdoe@example.org", false},
		{strings.Repeat("Ab1-", 19), "frank", "f@example.org", false},
	}
	for _, tc := range tests {
		if got := people.CheckPassword(tc.password, tc.username, tc.email) == ""; got != tc.ok {
			t.Errorf("checkPassword(%q, %q, %q) accepted %v, want %v", tc.password, tc.username, tc.email, got, tc.ok)
		}
	}
}

func TestUIAccountsEmail(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a@Example.ORG", "a@example.org"},
		{"Jo.Doe+x@sub.example.com", "Jo.Doe+x@sub.example.com"},
		{"Jo <jo@example.org>", ""},
		{"jo@example", ""},
		{"jo", ""},
		{"jo@@example.org", ""},
		{"", ""},
	}
	for _, tc := range tests {
		got, msg := people.NormaliseEmail(tc.in)
		if got != tc.want || (tc.want == "") != (msg != "") {
			t.Errorf("normaliseEmail(%q) = %q, %q; want %q", tc.in, got, msg, tc.want)
		}
	}
}

func TestUIAccountsProfilePermissions(t *testing.T) {
	env := newUIEnv(t)

	w := env.anon().Get("/user")
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login?next=") {
		t.Errorf("anonymous /user: %d to %q, want the login page", w.Code, w.Header().Get("Location"))
	}
	page := body(env.as("alice").Get("/user"))
	if !strings.Contains(page, `name="old_password"`) || !strings.Contains(page, "alice@example.org") {
		t.Errorf("own profile lacks the form or the email:\n%s", page)
	}
	if strings.Contains(page, `name="blocked"`) {
		t.Errorf("a user sees approver actions on their own profile")
	}
	if w := env.as("alice").Get("/user/bob"); w.Code != http.StatusForbidden {
		t.Errorf("alice looking at bob: %d, want 403", w.Code)
	}
	if w := env.as("bob").Get("/user/nobody"); w.Code != http.StatusNotFound {
		t.Errorf("a missing user: %d, want 404", w.Code)
	}
	w = env.as("bob").Get("/user/dave")
	page = body(w)
	if w.Code != http.StatusOK || !strings.Contains(page, `name="pending" value="0"`) ||
		!strings.Contains(page, `name="blocked" value="1"`) || !strings.Contains(page, "dave@example.org") {
		t.Errorf("an approver on a pending user: %d\n%s", w.Code, page)
	}
	if strings.Contains(page, `name="old_password"`) {
		t.Errorf("an approver sees another user's profile form")
	}

	// Nobody but alice edits alice's profile, approvers included.
	w = env.as("bob").Post("/user/alice", url.Values{"email": {"bob-owns@example.org"}, "old_password": {uiPassword}})
	if w.Code != http.StatusForbidden {
		t.Errorf("bob editing alice's profile: %d, want 403", w.Code)
	}
	// A user cannot block, accept or set limits, not even on themselves.
	for _, form := range []url.Values{{"blocked": {"1"}}, {"pending": {"0"}}, {"machine_limit": {"100"}}} {
		if w := env.as("alice").Post("/user/dave", form); w.Code != http.StatusForbidden {
			t.Errorf("alice posting %v on dave: %d, want 403", form, w.Code)
		}
		if w := env.as("alice").Post("/user", form); w.Code != http.StatusForbidden {
			t.Errorf("alice posting %v on herself: %d, want 403", form, w.Code)
		}
	}
	u, _ := env.DB.Users.Get(context.Background(), "dave")
	a, _ := env.DB.Users.Get(context.Background(), "alice")
	if !u.Pending || u.Blocked || a.EffectiveMachineLimit() != rundb.DefaultMachineLimit || a.Email != "alice@example.org" {
		t.Errorf("refused posts changed something: dave %+v, alice %+v", u, a)
	}
}

func TestUIAccountsBlockEndsSession(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	bob := env.as("bob")

	// Without the token nothing happens.
	bob.Get("/user/alice")
	if w := bob.PostRaw("/user/alice", url.Values{"blocked": {"1"}}); w.Code != http.StatusForbidden {
		t.Fatalf("block without the token: %d", w.Code)
	}
	if alice.LoggedInAs() != "alice" {
		t.Fatal("alice lost her session to a refused block")
	}

	w := bob.Post("/user/alice", url.Values{"blocked": {"1"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("block: %d\n%s", w.Code, body(w))
	}
	w = alice.Get("/tests/run")
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/tests" {
		t.Fatalf("alice's next click: %d to %q, want 302 to /tests", w.Code, w.Header().Get("Location"))
	}
	if got := alice.LoggedInAs(); got != "" {
		t.Fatalf("a blocked user is still logged in as %q", got)
	}
	w = alice.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}})
	if w.Code != http.StatusForbidden || !strings.Contains(body(w), "Your account is blocked.") {
		t.Errorf("a blocked user logging in: %d", w.Code)
	}
	if w := bob.Post("/user/bob", url.Values{"blocked": {"1"}}); w.Code != http.StatusBadRequest {
		t.Errorf("an approver blocking himself: %d, want 400", w.Code)
	}

	w = bob.Post("/user/alice", url.Values{"blocked": {"0"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("unblock: %d", w.Code)
	}
	if w := alice.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}}); w.Code != http.StatusSeeOther {
		t.Errorf("an unblocked user logging in: %d", w.Code)
	}
	acts, err := env.DB.Actions.Find(context.Background(), rundb.ActionFilter{Action: "block_user"}, 0)
	if err != nil || len(acts) != 2 || acts[0].Message != "unblocked" || acts[1].Message != "blocked" ||
		acts[1].Username != "bob" || acts[1].User != "alice" {
		t.Errorf("block_user actions: %+v (%v)", acts, err)
	}
}

func TestUIAccountsRejectDeletes(t *testing.T) {
	env := newUIEnv(t)
	bob := env.as("bob")
	if w := bob.Post("/user/alice", url.Values{"pending": {"1"}}); w.Code != http.StatusBadRequest {
		t.Errorf("rejecting an accepted user: %d, want 400", w.Code)
	}
	if _, err := env.DB.Users.Get(context.Background(), "alice"); err != nil {
		t.Fatalf("alice is gone: %v", err)
	}
	w := bob.Post("/user/dave", url.Values{"pending": {"1"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/user_management" {
		t.Fatalf("reject: %d to %q", w.Code, w.Header().Get("Location"))
	}
	if _, err := env.DB.Users.Get(context.Background(), "dave"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a rejected user is still there: %v", err)
	}
}

func TestUIAccountsMachineLimit(t *testing.T) {
	env := newUIEnv(t)
	bob := env.as("bob")
	for _, bad := range []string{"0", "-3", "abc", "1001", ""} {
		w := bob.Post("/user/alice", url.Values{"machine_limit": {bad}})
		if w.Code != http.StatusBadRequest || !strings.Contains(body(w), `id="err-machine_limit"`) {
			t.Errorf("machine limit %q: %d, want 400 with the field marked", bad, w.Code)
		}
	}
	if w := bob.Post("/user/alice", url.Values{"machine_limit": {"40"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("machine limit 40: %d", w.Code)
	}
	u, _ := env.DB.Users.Get(context.Background(), "alice")
	if u.EffectiveMachineLimit() != 40 {
		t.Errorf("machine limit %d, want 40", u.EffectiveMachineLimit())
	}
	if page := body(bob.Get("/user/alice")); !strings.Contains(page, "<dd>40</dd>") {
		t.Errorf("the profile does not show the limit")
	}
}

func TestUIAccountsProfileShowsCPUHours(t *testing.T) {
	env := newUIEnv(t)
	if err := env.DB.UserCache.Put(context.Background(), &rundb.UserStats{Username: "alice", CPUHours: 1234.7, Games: 5000}); err != nil {
		t.Fatal(err)
	}
	page := body(env.as("alice").Get("/user"))
	if !strings.Contains(page, "<dt>CPU hours</dt><dd>1,234</dd>") || !strings.Contains(page, "<dd>5,000</dd>") {
		t.Errorf("CPU hours or games missing:\n%s", page)
	}
}

func TestUIAccountsEditProfile(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	alice := env.as("alice")

	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
	}{
		{"wrong current password", url.Values{"email": {"new@example.org"}, "old_password": {"nope-nope"}}, "old_password"},
		{"bad email", url.Values{"email": {"new@"}, "old_password": {uiPassword}}, "email"},
		{"email of another user", url.Values{"email": {"bob@example.org"}, "old_password": {uiPassword}}, "email"},
		{"bad repo", url.Values{"email": {"a@example.org"}, "tests_repo": {"ftp://x"}, "old_password": {uiPassword}}, "tests_repo"},
		{"weak new password", url.Values{"email": {"a@example.org"}, "password": {"password1"}, "password2": {"password1"}, "old_password": {uiPassword}}, "password"},
		{"new passwords differ", url.Values{"email": {"a@example.org"}, "password": {"Kxq7-vent-lamp"}, "password2": {"Kxq7-vent-lamq"}, "old_password": {uiPassword}}, "password2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := alice.Post("/user", tc.form)
			page := body(w)
			if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-`+tc.field+`"`) {
				t.Fatalf("status %d, want 400 with %s marked:\n%s", w.Code, tc.field, page)
			}
			if !strings.Contains(page, `value="`+tc.form.Get("email")+`"`) {
				t.Errorf("the typed email is lost")
			}
		})
	}
	u, _ := env.DB.Users.Get(ctx, "alice")
	if u.Email != "alice@example.org" || u.TestsRepo != "" {
		t.Fatalf("a refused edit changed the profile: %+v", u)
	}

	w := alice.Post("/user", url.Values{"email": {"Alice@New.Example"}, "tests_repo": {"https://github.com/alice/Stockfish/"},
		"old_password": {uiPassword}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", w.Code, body(w))
	}
	u, _ = env.DB.Users.Get(ctx, "alice")
	if u.Email != "Alice@new.example" || u.TestsRepo != "https://github.com/alice/Stockfish" {
		t.Errorf("after the edit: %+v", u)
	}
	if alice.LoggedInAs() != "alice" {
		t.Errorf("an edit without a new password ended the session")
	}
}

func TestUIAccountsPasswordChangeEndsOtherSessions(t *testing.T) {
	env := newUIEnv(t)
	here := env.anon()
	here.Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}, "remember": {"1"}})
	there := env.as("alice")

	w := here.Post("/user", url.Values{"email": {"alice@example.org"}, "password": {"Kxq7-vent-lamp"},
		"password2": {"Kxq7-vent-lamp"}, "old_password": {uiPassword}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("password change: %d\n%s", w.Code, body(w))
	}
	if c := uitest.SessionSetCookie(w); c == nil || c.MaxAge != 30*24*3600 {
		t.Errorf("the reopened session lost its remember-me lifetime: %+v", c)
	}
	if got := here.LoggedInAs(); got != "alice" {
		t.Errorf("the session that changed the password is logged out (%q)", got)
	}
	if got := there.LoggedInAs(); got != "" {
		t.Errorf("another session survived the password change (%q)", got)
	}
	if w := env.anon().Post("/login", url.Values{"username": {"alice"}, "password": {uiPassword}}); w.Code != http.StatusBadRequest {
		t.Errorf("the old password still works: %d", w.Code)
	}
	if w := env.anon().Post("/login", url.Values{"username": {"alice"}, "password": {"Kxq7-vent-lamp"}}); w.Code != http.StatusSeeOther {
		t.Errorf("the new password does not work: %d", w.Code)
	}
}
func TestUISafeNext(t *testing.T) {
	for next, want := range map[string]string{
		"/tests/view/abc?follow=1": "/tests/view/abc?follow=1",
		"/user":                    "/user",
		"":                         "/tests",
		"tests":                    "/tests",
		"//evil.example":           "/tests",
		"/\\evil.example":          "/tests",
		"/\t/evil.example":         "/tests",
		"/\n/evil.example":         "/tests",
		"https://evil.example/":    "/tests",
		"/%0a":                     "/%0a", // escaped: stays a path on this site
	} {
		if got := people.SafeNext(next, "/tests"); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}
