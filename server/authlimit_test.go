package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-chess/shoal/server/guard"
)

// postFrom sends a form from address ip (with the browser's CSRF token unless form has one).
func (b *browser) postFrom(ip, path string, form url.Values) *httptest.ResponseRecorder {
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", b.csrf())
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = ip + ":4321"
	return b.do(req)
}

// parallel runs n calls of fn at once (released together) and counts the statuses they return.
func parallel(n int, fn func(i int) int) map[int]int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		codes = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			<-start
			code := fn(i)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return codes
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
			"csrf_token": {browsers[i].csrf()}}
	}
	codes := parallel(n, func(i int) int { return browsers[i].postRaw("/login", forms[i]).Code })
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
	if got := alice.loggedInAs(); got != "alice" {
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
			"csrf_token": {browsers[i].csrf()}}
	}
	codes := parallel(n, func(i int) int { return browsers[i].postRaw("/user", forms[i]).Code })
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
			"email": {name + "@example.org"}, "csrf_token": {browsers[i].csrf()}}
	}
	codes := parallel(n, func(i int) int { return browsers[i].postRaw("/signup", forms[i]).Code })
	if codes[http.StatusSeeOther] != guard.SignupPerIPBurst || codes[http.StatusTooManyRequests] != n-guard.SignupPerIPBurst {
		t.Errorf("%d parallel signups: statuses %v, want %d created (303) and the rest 429", n, codes, guard.SignupPerIPBurst)
	}
	created := 0
	for i := range n {
		if _, err := env.db.Users.Get(context.Background(), fmt.Sprint("racer", i)); err == nil {
			created++
		}
	}
	if created != guard.SignupPerIPBurst {
		t.Errorf("%d accounts created, want %d", created, guard.SignupPerIPBurst)
	}
	// The "email exists" answer is as limited: the limit holds for a taken email too.
	w := env.anon().post("/signup", url.Values{"username": {"probe"}, "password": {"Kxq7-vent-lamp"},
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

	w := alice.post("/user", url.Values{"email": {"bob@example.org"}, "old_password": {"wrong-password"}})
	page := body(w)
	if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-old_password"`) {
		t.Fatalf("wrong current password: %d, want 400 with old_password marked", w.Code)
	}
	if strings.Contains(page, another) || strings.Contains(page, taken) || strings.Contains(page, `id="err-email"`) {
		t.Errorf("with a wrong current password the page tells whether bob's email has an account:\n%s", page)
	}

	// No current password: refused, and not counted as a wrong one.
	for i := range 2 * loginBurst {
		w := alice.post("/user", url.Values{"email": {"bob@example.org"}})
		page := body(w)
		if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-old_password"`) || strings.Contains(page, another) {
			t.Fatalf("no current password (%d): %d, want 400 with old_password marked and nothing about the email", i+1, w.Code)
		}
	}

	// With the right password the user learns the address is taken, and nothing changes.
	w = alice.post("/user", url.Values{"email": {"bob@example.org"}, "old_password": {uiPassword}})
	page = body(w)
	if w.Code != http.StatusBadRequest || !strings.Contains(page, another) || !strings.Contains(page, `id="err-email"`) {
		t.Errorf("a taken email with the right password: %d, want 400 saying so", w.Code)
	}
	if u, _ := env.db.Users.Get(context.Background(), "alice"); u.Email != "alice@example.org" {
		t.Errorf("a refused edit changed the email to %q", u.Email)
	}
}

// --- The worker and submission API ---

// apiFrom sends a JSON body to the fleet's handler from address ip, returning the status, the
// Retry-After header and the decoded reply.
func (f *fleet) apiFrom(ip, path string, body any) (int, string, map[string]any) {
	f.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = ip + ":5555"
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		f.t.Fatalf("%s: reply is not a JSON object: %d %s", path, w.Code, w.Body)
	}
	if _, ok := out["duration"].(float64); !ok {
		f.t.Errorf("%s: reply without a duration: %s", path, w.Body)
	}
	return w.Code, w.Header().Get("Retry-After"), out
}

func versionCall(password string) map[string]any {
	return map[string]any{"password": password, "worker_info": map[string]any{"username": "wrk"}}
}

var apiLimitedText = regexp.MustCompile(`^(/api/[a-z_]+): too many failed logins from this address; retry in (\d+) s$`)

// checkAPILimited asserts that a reply is the API's 429: the JSON error shape naming the path
// and the wait, which Retry-After repeats.
func checkAPILimited(t *testing.T, path string, code int, retry string, out map[string]any) {
	t.Helper()
	msg, _ := out["error"].(string)
	m := apiLimitedText.FindStringSubmatch(msg)
	if code != http.StatusTooManyRequests || m == nil || m[1] != path {
		t.Errorf("%s: %d %v, want 429 %q", path, code, out, apiTooManyLoginsText)
		return
	}
	if secs, err := strconv.Atoi(retry); err != nil || secs < 1 || strconv.Itoa(secs) != m[2] {
		t.Errorf("%s: Retry-After %q, message %q", path, retry, msg)
	}
}

func TestAuthLimitWorkerAPI(t *testing.T) {
	f := newFleet(t)
	const a, b = "203.0.113.5", "198.51.100.7"

	// Right passwords cost nothing, however many.
	for i := range 2 * guard.APILoginPerIPBurst {
		if code, _, out := f.apiFrom(a, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK {
			t.Fatalf("good call %d: %d %v", i+1, code, out)
		}
	}
	for i := range guard.APILoginPerIPBurst {
		if code, _, out := f.apiFrom(a, "/api/request_version", versionCall(fmt.Sprint("guess-", i))); code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d %v, want 401", i+1, code, out)
		}
	}
	code, retry, out := f.apiFrom(a, "/api/request_version", versionCall("guess-x"))
	checkAPILimited(t, "/api/request_version", code, retry, out)

	// While the address is limited, credentials that just succeeded still work (the fleet
	// behind that address keeps playing), but any other login from it is refused: the limit
	// cannot know a new password is right without checking it, and checking would answer
	// the guess.
	if code, _, out := f.apiFrom(a, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK {
		t.Errorf("known-good credentials from the limited address: %d %v, want 200", code, out)
	}
	code, retry, out = f.apiFrom(a, "/api/create_run", map[string]any{"username": "wrk", "password": "not-yet-seen", "run": map[string]any{}})
	checkAPILimited(t, "/api/create_run", code, retry, out)
	code, retry, out = f.apiFrom(a, "/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": map[string]any{}})
	checkAPILimited(t, "/api/create_run", code, retry, out)
	code, retry, out = f.apiFrom(a, "/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": strings.Repeat("a", 24)})
	checkAPILimited(t, "/api/approve_run", code, retry, out)

	// Another address is not affected.
	if code, _, out := f.apiFrom(b, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK || out["version"] == nil {
		t.Errorf("a right password from another address: %d %v", code, out)
	}
	// A malformed body is not a login and costs nothing.
	if code, _, _ := f.apiFrom(b, "/api/request_version", map[string]any{"worker_info": map[string]any{"username": "wrk"}}); code != http.StatusBadRequest {
		t.Errorf("no password: %d, want 400", code)
	}
}

func TestAuthLimitWorkerAPIParallelGuesses(t *testing.T) {
	f := newFleet(t)
	n := 3 * guard.APILoginPerIPBurst
	// A fleet starting up behind one address: every right password gets through, however
	// many are checked at once (the checks over the burst wait for those in flight).
	good := parallel(n, func(int) int {
		code, _, _ := f.apiFrom("203.0.113.9", "/api/request_version", versionCall("wrkpw"))
		return code
	})
	if good[http.StatusOK] != n {
		t.Errorf("%d parallel right passwords: statuses %v, want all 200", n, good)
	}
	codes := parallel(n, func(i int) int {
		code, _, _ := f.apiFrom("203.0.113.9", "/api/request_version", versionCall(fmt.Sprint("guess-", i)))
		return code
	})
	if codes[http.StatusUnauthorized] != guard.APILoginPerIPBurst || codes[http.StatusTooManyRequests] != n-guard.APILoginPerIPBurst {
		t.Errorf("%d parallel guesses: statuses %v, want %d checked (401) and the rest 429", n, codes, guard.APILoginPerIPBurst)
	}
}

func TestAuthLimitSubmitAPICounts(t *testing.T) {
	f := newFleet(t)
	const ip = "203.0.113.77"
	half := guard.APILoginPerIPBurst / 2
	for i := range half {
		code, _, out := f.apiFrom(ip, "/api/create_run", map[string]any{"username": "alice", "password": "nope", "run": map[string]any{}})
		if code != http.StatusUnauthorized {
			t.Fatalf("create_run with a wrong password %d: %d %v", i+1, code, out)
		}
	}
	// Failures after a right password (here: not an approver; the run does not exist) do not
	// count; failed logins do, on every API path alike.
	for range guard.APILoginPerIPBurst {
		code, _, out := f.apiFrom(ip, "/api/approve_run", map[string]any{"username": "alice", "password": "alicepw", "run_id": strings.Repeat("a", 24)})
		if code != http.StatusForbidden {
			t.Fatalf("approve_run by a non-approver: %d %v, want 403", code, out)
		}
	}
	for i := range guard.APILoginPerIPBurst - half {
		code, _, out := f.apiFrom(ip, "/api/approve_run", map[string]any{"username": "bob", "password": "nope", "run_id": strings.Repeat("a", 24)})
		if code != http.StatusUnauthorized {
			t.Fatalf("approve_run with a wrong password %d: %d %v", i+1, code, out)
		}
	}
	code, retry, out := f.apiFrom(ip, "/api/request_version", versionCall("guess"))
	checkAPILimited(t, "/api/request_version", code, retry, out)
}
