package people_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/servertest"
)

// postFrom sends a form from address ip (with the browser's CSRF token unless form has one).
func (b *browser) postFrom(ip, path string, form url.Values) *httptest.ResponseRecorder {
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", b.CSRF())
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = ip + ":4321"
	return b.Do(req)
}

// loginBurst is how many failed logins for one user from one address are checked at once.
const loginBurst = min(guard.LoginPerIPBurst, guard.LoginPerUserIPBurst, guard.LoginPerUserBurst)

func TestAuthLimitParallelBadLogins(t *testing.T) {
	env := newUIEnv(t)
	n := 3 * loginBurst
	// Each attacker is its own browser (with its own CSRF token), all from one address.
	forms := make([]url.Values, n)
	browsers := make([]*browser, n)
	for i := range n {
		browsers[i] = env.anon()
		forms[i] = url.Values{"username": {"alice"}, "password": {fmt.Sprint("guess-", i)},
			"csrf_token": {browsers[i].CSRF()}}
	}
	codes := servertest.Parallel(n, func(i int) int { return browsers[i].PostRaw("/login", forms[i]).Code })
	// 400 is a checked, wrong password; 429 a refusal before any check.
	if codes[http.StatusBadRequest] != loginBurst || codes[http.StatusTooManyRequests] != n-loginBurst {
		t.Errorf("%d parallel wrong passwords: statuses %v, want %d checked (400) and the rest 429",
			n, codes, loginBurst)
	}
	// The limit is on alice from this address: bob logs in from another.
	if w := env.anon().postFrom("198.51.100.7", "/login", url.Values{"username": {"bob"}, "password": {uiPassword}}); w.Code != http.StatusSeeOther {
		t.Errorf("bob from another address after the attack: %d, want 303", w.Code)
	}
}

func TestAuthLimitNoLockoutFromOtherAddresses(t *testing.T) {
	env := newUIEnv(t)
	const a, b = "203.0.113.5", "198.51.100.7"
	bad := func() url.Values { return url.Values{"username": {"alice"}, "password": {"wrong-password"}} }
	for i := range guard.LoginPerUserIPBurst {
		if w := env.anon().postFrom(a, "/login", bad()); w.Code != http.StatusBadRequest {
			t.Fatalf("wrong password %d from A: %d, want 400", i+1, w.Code)
		}
	}
	if w := env.anon().postFrom(a, "/login", url.Values{"username": {"alice"}, "password": {uiPassword}}); w.Code != http.StatusTooManyRequests {
		t.Fatalf("alice from A after %d failures: %d, want 429", guard.LoginPerUserIPBurst, w.Code)
	}
	alice := env.anon()
	if w := alice.postFrom(b, "/login", url.Values{"username": {"alice"}, "password": {uiPassword}}); w.Code != http.StatusSeeOther {
		t.Fatalf("alice from B while A is limited: %d, want 303", w.Code)
	}
	if got := alice.LoggedInAs(); got != "alice" {
		t.Fatalf("alice from B: logged in as %q", got)
	}

	// The loose per-username backstop: one wrong guess from each of many addresses ends up
	// refused too (the bucket refills while the test runs, hence the slack).
	refusedAt := 0
	for i := range guard.LoginPerUserBurst + 20 {
		ip := fmt.Sprintf("192.0.2.%d", 10+i)
		if w := env.anon().postFrom(ip, "/login", bad()); w.Code == http.StatusTooManyRequests {
			refusedAt = i + 1
			break
		}
	}
	if refusedAt == 0 || refusedAt < guard.LoginPerUserBurst-guard.LoginPerUserIPBurst {
		t.Errorf("guesses from ever new addresses: first 429 at %d, want about %d",
			refusedAt, guard.LoginPerUserBurst-guard.LoginPerUserIPBurst)
	}
	if w := env.anon().postFrom("192.0.2.200", "/login", url.Values{"username": {"bob"}, "password": {uiPassword}}); w.Code != http.StatusSeeOther {
		t.Errorf("bob while alice's name is limited: %d, want 303", w.Code)
	}
}

func TestAuthLimitProfileParallelWrongPasswords(t *testing.T) {
	env := newUIEnv(t)
	n := 3 * loginBurst
	browsers := make([]*browser, n)
	forms := make([]url.Values, n)
	for i := range n {
		browsers[i] = env.as("alice") // successful logins cost nothing
		forms[i] = url.Values{"email": {"alice@example.org"}, "old_password": {fmt.Sprint("guess-", i)},
			"csrf_token": {browsers[i].CSRF()}}
	}
	codes := servertest.Parallel(n, func(i int) int { return browsers[i].PostRaw("/user", forms[i]).Code })
	if codes[http.StatusBadRequest] != loginBurst || codes[http.StatusTooManyRequests] != n-loginBurst {
		t.Errorf("%d parallel wrong current passwords: statuses %v, want %d checked (400) and the rest 429",
			n, codes, loginBurst)
	}
}

func TestAuthLimitSignupParallel(t *testing.T) {
	env := newUIEnv(t)
	n := 3 * guard.SignupPerIPBurst
	browsers := make([]*browser, n)
	forms := make([]url.Values, n)
	for i := range n {
		browsers[i] = env.anon()
		name := fmt.Sprint("racer", i)
		forms[i] = url.Values{"username": {name}, "password": {"Kxq7-vent-lamp"}, "password2": {"Kxq7-vent-lamp"},
			"email": {name + "@example.org"}, "csrf_token": {browsers[i].CSRF()}}
	}
	codes := servertest.Parallel(n, func(i int) int { return browsers[i].PostRaw("/signup", forms[i]).Code })
	if codes[http.StatusSeeOther] != guard.SignupPerIPBurst || codes[http.StatusTooManyRequests] != n-guard.SignupPerIPBurst {
		t.Errorf("%d parallel signups: statuses %v, want %d created (303) and the rest 429", n, codes, guard.SignupPerIPBurst)
	}
	created := 0
	for i := range n {
		if _, err := env.DB.Users.Get(context.Background(), fmt.Sprint("racer", i)); err == nil {
			created++
		}
	}
	if created != guard.SignupPerIPBurst {
		t.Errorf("%d accounts created, want %d", created, guard.SignupPerIPBurst)
	}
	// The "email exists" answer is as limited: the limit holds for a taken email too.
	w := env.anon().Post("/signup", url.Values{"username": {"probe"}, "password": {"Kxq7-vent-lamp"},
		"password2": {"Kxq7-vent-lamp"}, "email": {"bob@example.org"}})
	if w.Code != http.StatusTooManyRequests || strings.Contains(body(w), "An account with this email") {
		t.Errorf("probing an email after the limit: %d", w.Code)
	}
}

func TestAuthLimitProfileEmailNeedsPassword(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	const taken = "An account with this email" // signup's text
	const another = "Another account has this email address."

	w := alice.Post("/user", url.Values{"email": {"bob@example.org"}, "old_password": {"wrong-password"}})
	page := body(w)
	if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-old_password"`) {
		t.Fatalf("wrong current password: %d, want 400 with old_password marked", w.Code)
	}
	if strings.Contains(page, another) || strings.Contains(page, taken) || strings.Contains(page, `id="err-email"`) {
		t.Errorf("with a wrong current password the page tells whether bob's email has an account:\n%s", page)
	}

	// No current password: refused, and not counted as a wrong one.
	for i := range 2 * loginBurst {
		w := alice.Post("/user", url.Values{"email": {"bob@example.org"}})
		page := body(w)
		if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-old_password"`) || strings.Contains(page, another) {
			t.Fatalf("no current password (%d): %d, want 400 with old_password marked and nothing about the email", i+1, w.Code)
		}
	}

	// With the right password the user learns the address is taken, and nothing changes.
	w = alice.Post("/user", url.Values{"email": {"bob@example.org"}, "old_password": {uiPassword}})
	page = body(w)
	if w.Code != http.StatusBadRequest || !strings.Contains(page, another) || !strings.Contains(page, `id="err-email"`) {
		t.Errorf("a taken email with the right password: %d, want 400 saying so", w.Code)
	}
	if u, _ := env.DB.Users.Get(context.Background(), "alice"); u.Email != "alice@example.org" {
		t.Errorf("a refused edit changed the email to %q", u.Email)
	}
}
