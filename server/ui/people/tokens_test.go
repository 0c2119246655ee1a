package people_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// newTokenText finds the token a page shows once.
var newTokenText = regexp.MustCompile(`<code class="token">([^<]+)</code>`)

// makeToken makes a token through the profile page and returns it as the page shows it.
func (b *browser) makeToken(t *testing.T, name, scope string) string {
	t.Helper()
	w := b.Post("/tokens", url.Values{"token_name": {name}, "token_scope": {scope}, "token_password": {uiPassword}})
	m := newTokenText.FindStringSubmatch(body(w))
	if w.Code != http.StatusOK || m == nil {
		t.Fatalf("make a token: %d\n%s", w.Code, body(w))
	}
	return m[1]
}

// workerCall sends request_version, the first call of fishtest's worker, with secret in the
// password field, and returns the status.
func (e *uiEnv) workerCall(username, secret string) int {
	req := httptest.NewRequest(http.MethodPost, "/api/request_version",
		strings.NewReader(`{"password": "`+secret+`", "worker_info": {"username": "`+username+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.Server.Handler().ServeHTTP(w, req)
	return w.Code
}

func TestUITokensMadeShownOnceListedAndRevoked(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	tok := alice.makeToken(t, "my-box", "worker")
	if code := env.workerCall("alice", tok); code != http.StatusOK {
		t.Fatalf("the new token on the worker API: %d", code)
	}
	page := body(alice.Get("/user"))
	if strings.Contains(page, tok) {
		t.Error("the profile shows the token again")
	}
	if !strings.Contains(page, "<td>my-box</td><td>worker</td>") || !strings.Contains(page, "from 192.0.2.1") {
		t.Errorf("the token is not listed with its last use:\n%s", page)
	}
	if w := env.as("bob").Get("/user/alice"); strings.Contains(body(w), "my-box") {
		t.Error("an approver's view of alice lists her tokens")
	}

	// Revoked while a fleet calls: every call from the revocation on is refused.
	var revoking, revoked atomic.Bool
	var okAfter, failedBefore atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				before, after := !revoking.Load(), revoked.Load()
				code := env.workerCall("alice", tok)
				switch {
				case after && code == http.StatusOK:
					okAfter.Add(1)
				case before && code != http.StatusOK:
					failedBefore.Add(1)
					return
				case code != http.StatusOK:
					return // fishtest's worker stops on a wrong password
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	revoking.Store(true)
	w := alice.Post("/tokens/revoke", url.Values{"name": {"my-box"}})
	revoked.Store(true)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d\n%s", w.Code, body(w))
	}
	wg.Wait()
	if okAfter.Load() != 0 || failedBefore.Load() != 0 {
		t.Errorf("%d calls let in after the revocation, %d refused before it", okAfter.Load(), failedBefore.Load())
	}
	if code := env.workerCall("alice", tok); code != http.StatusUnauthorized {
		t.Errorf("the revoked token: %d, want 401", code)
	}
	if page := body(alice.Get("/user")); strings.Contains(page, "<td>my-box</td>") || !strings.Contains(page, "is revoked") {
		t.Errorf("after the revocation:\n%s", page)
	}
}

func TestUITokensBadInputChangesNothing(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	alice.makeToken(t, "taken", "api")
	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
	}{
		{"a name with a space", url.Values{"token_name": {"my box"}, "token_scope": {"worker"}}, "token_name"},
		{"no name", url.Values{"token_name": {""}, "token_scope": {"worker"}}, "token_name"},
		{"a name in use", url.Values{"token_name": {"taken"}, "token_scope": {"worker"}}, "token_name"},
		{"a bad scope", url.Values{"token_name": {"x"}, "token_scope": {"admin"}}, "token_scope"},
		{"an expiry over a year", url.Values{"token_name": {"x"}, "token_scope": {"worker"}, "token_expires_days": {"367"}}, "token_expires_days"},
		{"an expiry that is no number", url.Values{"token_name": {"x"}, "token_scope": {"worker"}, "token_expires_days": {"soon"}}, "token_expires_days"},
		{"a wrong password", url.Values{"token_name": {"x"}, "token_scope": {"worker"}, "token_password": {"nope-nope"}}, "token_password"},
		{"no password", url.Values{"token_name": {"x"}, "token_scope": {"worker"}, "token_password": {""}}, "token_password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.form["token_password"]; !ok {
				tc.form.Set("token_password", uiPassword)
			}
			w := alice.Post("/tokens", tc.form)
			page := body(w)
			if w.Code != http.StatusBadRequest || !strings.Contains(page, `id="err-`+tc.field+`"`) || newTokenText.MatchString(page) {
				t.Fatalf("status %d, want 400 with %s marked and no token:\n%s", w.Code, tc.field, page)
			}
			if list, _ := env.DB.Users.Tokens(context.Background(), "alice"); len(list) != 1 {
				t.Fatalf("tokens now: %+v", list)
			}
		})
	}
	for i := range 19 {
		alice.makeToken(t, "t"+string(rune('a'+i)), "worker")
	}
	w := alice.Post("/tokens", url.Values{"token_name": {"one-more"}, "token_scope": {"worker"}, "token_password": {uiPassword}})
	if w.Code != http.StatusBadRequest || !strings.Contains(body(w), "the most one may hold") {
		t.Errorf("a 21st token: %d\n%s", w.Code, body(w))
	}
	if w := alice.Post("/tokens/revoke", url.Values{"name": {"nothing"}}); w.Code != http.StatusSeeOther {
		t.Errorf("revoking a token that does not exist: %d", w.Code)
	}
	if w := env.anon().Post("/tokens", url.Values{"token_name": {"x"}, "token_scope": {"worker"}}); w.Code == http.StatusOK {
		t.Errorf("a token made without logging in: %d", w.Code)
	}
}

func TestUITokensEndWithAPasswordChange(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	tok := alice.makeToken(t, "box", "worker")
	if code := env.workerCall("alice", tok); code != http.StatusOK {
		t.Fatalf("the token before: %d", code)
	}
	w := alice.Post("/user", url.Values{"email": {"alice@example.org"}, "password": {"Kxq7-vent-lamp"},
		"password2": {"Kxq7-vent-lamp"}, "old_password": {uiPassword}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("password change: %d\n%s", w.Code, body(w))
	}
	if code := env.workerCall("alice", tok); code != http.StatusUnauthorized {
		t.Errorf("the token after a password change: %d, want 401", code)
	}
	if list, _ := env.DB.Users.Tokens(context.Background(), "alice"); len(list) != 0 {
		t.Errorf("tokens left after a password change: %+v", list)
	}
}

// An approver's block on the web UI revokes every token of the user: they stay refused after
// the unblock, on both APIs. Making and revoking tokens is in the event log, the token never.
func TestUITokensEndWithABlockAndAreLogged(t *testing.T) {
	ctx := context.Background()
	env := newUIEnv(t)
	alice := env.as("alice")
	workerTok := alice.makeToken(t, "box", "worker")
	alice.makeToken(t, "script", "api")
	if w := alice.Post("/tokens/revoke", url.Values{"name": {"script"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d", w.Code)
	}
	apiTok := alice.makeToken(t, "script-2", "api")
	if code := env.workerCall("alice", workerTok); code != http.StatusOK {
		t.Fatalf("the worker token before the block: %d", code)
	}

	bob := env.as("bob")
	if w := bob.Post("/user/alice", url.Values{"blocked": {"1"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("block: %d\n%s", w.Code, body(w))
	}
	if w := bob.Post("/user/alice", url.Values{"blocked": {"0"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("unblock: %d", w.Code)
	}
	if list, err := env.DB.Users.Tokens(ctx, "alice"); err != nil || len(list) != 0 {
		t.Errorf("tokens left after a block: %+v, %v", list, err)
	}
	if code := env.workerCall("alice", workerTok); code != http.StatusUnauthorized {
		t.Errorf("the worker token after a block and an unblock: %d, want 401", code)
	}
	req := httptest.NewRequest(http.MethodPost, "/api/user_stop_run", strings.NewReader(`{"run_id": "0123456789abcdef01234567"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiTok)
	w := httptest.NewRecorder()
	env.Server.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("the api token after a block and an unblock: %d, want 401", w.Code)
	}
	if code := env.workerCall("alice", uiPassword); code != http.StatusOK {
		t.Errorf("the password after the unblock: %d", code)
	}

	var got []string
	for _, kind := range []string{"new_token", "revoke_token"} {
		acts, err := env.DB.Actions.Find(ctx, rundb.ActionFilter{Action: kind}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			got = append(got, a.Action+" "+a.Username+" "+a.User+": "+a.Message)
			if strings.Contains(a.Message, "shoal_") {
				t.Errorf("an action shows a token: %+v", a)
			}
		}
	}
	slices.Sort(got)
	want := []string{"new_token alice alice: api token script", "new_token alice alice: api token script-2",
		"new_token alice alice: worker token box", "revoke_token alice alice: token script"}
	if !slices.Equal(got, want) {
		t.Errorf("token actions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if page := body(env.anon().Get("/actions?action=new_token")); !strings.Contains(page, "worker token box") {
		t.Errorf("the event log page does not show the token made:\n%s", page)
	}
}
