package people_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

// The tests named TestSecurity... perform one finding of the security audit each (docs/SECURITY.md)
// and assert that it is refused, or harmless, and that nothing changed: `go test -run Security
// ./...` runs them all.

// Finding 13: a worker's owner cannot lift, or reword, a block that an approver set (nor one
// recorded before Shoal noted who blocked), and nothing changes when they try.
func TestSecurityOwnerCannotLiftAnApproversBlock(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	const worker = "alice-4cores-abcd1234"
	if w := env.as("bob").Post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {"Time losses."}}); w.Code != http.StatusSeeOther {
		t.Fatalf("approver's block: %d", w.Code)
	}
	const legacy = "alice-8cores-0000ffff"
	if err := env.DB.Workers.Put(ctx, &rundb.Worker{WorkerName: legacy, Blocked: true, Message: "old block"}); err != nil {
		t.Fatal(err)
	}
	before, err := env.DB.Actions.Find(ctx, rundb.ActionFilter{Action: "block_worker"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	alice := env.as("alice")
	for _, attempt := range []struct {
		worker string
		form   url.Values
	}{
		{worker, url.Values{"message": {"all fixed"}}},
		{worker, url.Values{"blocked": {"1"}, "message": {"nothing wrong here"}}},
		{legacy, url.Values{"message": {"all fixed"}}},
	} {
		if w := alice.Post("/workers/"+attempt.worker, attempt.form); w.Code != http.StatusForbidden {
			t.Errorf("owner's change %v of %s = %d, want 403", attempt.form, attempt.worker, w.Code)
		}
	}
	if page := body(alice.Get("/workers/" + worker)); strings.Contains(page, `<form method="post" action="/workers/`) ||
		!strings.Contains(page, "only an approver may") {
		t.Errorf("the owner's page offers a form for an approver's block")
	}
	if got, err := env.DB.Workers.Get(ctx, worker); err != nil || !got.Blocked || got.Message != "Time losses." || got.BlockedBy != "bob" {
		t.Errorf("the approver's block changed: %+v %v", got, err)
	}
	if got, err := env.DB.Workers.Get(ctx, legacy); err != nil || !got.Blocked || got.Message != "old block" {
		t.Errorf("the recorded block changed: %+v %v", got, err)
	}
	if after, _ := env.DB.Actions.Find(ctx, rundb.ActionFilter{Action: "block_worker"}, 0); len(after) != len(before) {
		t.Errorf("refused changes logged %d block_worker actions", len(after)-len(before))
	}
}

// loginFrom posts the login form from a client at ip, in a session of its own.
func loginFrom(env *uiEnv, ip, username, password string) int {
	b := env.anon()
	token := b.CSRF()
	form := url.Values{"csrf_token": {token}, "username": {username}, "password": {password}}
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = ip + ":40000"
	return b.Do(req).Code
}

// Finding 8, the form: guesses for one account from many addresses are limited per username,
// and they do not lock out the owner, who logged in from his address before; a stranger's
// right password waits like a guess.
func TestSecurityLoginGuessesFromManyAddressesDoNotLockOutTheOwner(t *testing.T) {
	env := newUIEnv(t)
	const owner = "198.51.100.10"
	if code := loginFrom(env, owner, "alice", uiPassword); code != http.StatusSeeOther {
		t.Fatalf("the owner's first login = %d", code)
	}
	before := env.DB.Users.SlowChecks()
	refused := 0
	for a := range 7 { // 35 guesses from 7 addresses, as in the audit
		for g := range 5 {
			switch loginFrom(env, fmt.Sprintf("203.0.113.%d", a+1), "alice", fmt.Sprintf("guess-%d-%d", a, g)) {
			case http.StatusTooManyRequests:
				refused++
			case http.StatusBadRequest:
			default:
				t.Fatal("a guess got neither 400 nor 429")
			}
		}
	}
	if checked := env.DB.Users.SlowChecks() - before; checked > guard.LoginPerUserBurst+1 {
		t.Errorf("%d guesses were checked, want at most the username's burst of %d", checked, guard.LoginPerUserBurst)
	}
	if refused == 0 {
		t.Error("no guess was refused: the username's limit did not hold")
	}
	if code := loginFrom(env, owner, "alice", uiPassword); code != http.StatusSeeOther {
		t.Errorf("the owner's right password from his own address after the guesses = %d, want 303", code)
	}
	if code := loginFrom(env, "192.0.2.200", "alice", uiPassword); code != http.StatusTooManyRequests {
		t.Errorf("the right password from a new address while the username is over its limit = %d, want 429", code)
	}
}

// Finding 17: failed and refused logins are logged at WARN, a line a minute per user and client
// however many there are; a live stream refused by its limits is logged at DEBUG, not ERROR.
func TestSecurityLoginFailuresAreLoggedQuietly(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&uitest.LockedWriter{W: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env := newUIEnvWith(t, func(d *server.Deps) { d.Logger = logger })
	for g := range 20 {
		loginFrom(env, "203.0.113.9", "alice", fmt.Sprintf("guess-%d", g))
	}
	log := buf.String()
	if n := strings.Count(log, `msg="failed login"`); n != 1 || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "user=alice") {
		t.Errorf("20 failed logins from one client wrote %d warnings, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "login refused: too many failures"); n != 1 {
		t.Errorf("the refused logins wrote %d warnings, want 1:\n%s", n, log)
	}
}
