package people_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tuningValue returns the text of the element with the given id on the tuning page.
func tuningValue(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `">([^<]*)<`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no element %q on the tuning page:\n%s", id, page)
	}
	return m[1]
}

// tuningNumber is tuningValue read as a number ("1,234" -> 1234).
func tuningNumber(t *testing.T, page, id string) uint64 {
	t.Helper()
	v := tuningValue(t, page, id)
	n, err := strconv.ParseUint(strings.ReplaceAll(v, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("%s = %q, not a number", id, v)
	}
	return n
}

func TestUIAdminTuningPermissions(t *testing.T) {
	env := newUIEnv(t)

	w := env.anon().Get("/admin/tuning")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next=%2Fadmin%2Ftuning" {
		t.Errorf("anonymous: %d to %q, want 303 to the login page coming back here", w.Code, w.Header().Get("Location"))
	}

	alice := env.as("alice")
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := alice.Do(httptest.NewRequest(method, "/admin/tuning", nil))
		if w.Code != http.StatusForbidden {
			t.Errorf("%s by a user who is not an approver: %d, want 403", method, w.Code)
		}
	}
	if b := body(alice.Get("/admin/tuning")); strings.Contains(b, "kill -HUP") || strings.Contains(b, `id="tokens-size"`) {
		t.Error("the 403 page shows the tuning page's content")
	}

	bob := env.as("bob")
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if w := bob.Do(httptest.NewRequest(method, "/admin/tuning", nil)); w.Code != http.StatusOK {
			t.Errorf("%s by an approver: %d, want 200", method, w.Code)
		}
	}
	if w := bob.PostRaw("/admin/tuning", nil); w.Code != http.StatusMethodNotAllowed && w.Code != http.StatusForbidden {
		t.Errorf("POST: %d, want 405 (or 403 for the missing CSRF token): the page changes nothing", w.Code)
	}
}

func TestUIAdminTuningShowsTheValuesInForce(t *testing.T) {
	env := newUIEnv(t)
	bob := env.as("bob")
	pool := env.Deps.Tokens
	pid := fmt.Sprintf("kill -HUP %d", os.Getpid())

	w := bob.Get("/admin/tuning")
	b := body(w)
	if w.Code != http.StatusOK {
		t.Fatalf("tuning page: %d\n%s", w.Code, b)
	}
	if got := tuningNumber(t, b, "tokens-size"); got != 8 {
		t.Errorf("token pool size shown %d, want the configured 8", got)
	}
	if got := tuningNumber(t, b, "semaphore-size"); got != 5 {
		t.Errorf("semaphore size shown %d, want the configured 5", got)
	}
	if !strings.Contains(b, `class="badge blue">primary</span>`) || !strings.Contains(b, "SIGHUP") || tuningValue(t, b, "reload-command") != pid {
		t.Errorf("the page does not name the role and the reload command %q:\n%s", pid, b)
	}
	if got := tuningValue(t, b, "tokens-avg-wait"); got != "-" {
		t.Errorf("average wait %q before anything waited, want -", got)
	}

	// Change both sizes while serving; give the pool some history: one acquire that gives up,
	// one that waits, and two tokens held while the page is read.
	ctx := context.Background()
	if err := pool.Resize(ctx, 3); err != nil {
		t.Fatal(err)
	}
	env.Sched.SetTaskSemaphoreSize(11)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := pool.Acquire(cancelled); err == nil {
		t.Fatal("acquire with a cancelled context succeeded")
	}
	for range 3 {
		if err := pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- pool.Acquire(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); pool.Waiting() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the acquire never queued")
		}
	}
	pool.Release() // to the waiter
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	pool.Release() // two left held
	defer func() { pool.Release(); pool.Release() }()

	before := pool.Stats()
	w = bob.Get("/admin/tuning")
	b = body(w)
	after := pool.Stats()
	if w.Code != http.StatusOK {
		t.Fatalf("tuning page: %d\n%s", w.Code, b)
	}
	for _, c := range []struct {
		id   string
		want uint64
	}{
		{"tokens-size", 3},
		{"tokens-in-use", 2},
		{"tokens-waiting", 0},
		{"tokens-waited", before.Waited},
		{"tokens-cancelled", before.Cancelled},
		{"semaphore-size", 11},
	} {
		if got := tuningNumber(t, b, c.id); got != c.want {
			t.Errorf("%s shown %d, want %d", c.id, got, c.want)
		}
	}
	if before.Waited != 1 || before.Cancelled != 1 {
		t.Fatalf("test setup: %+v, want one acquire that waited and one that gave up", before)
	}
	if got := tuningNumber(t, b, "tokens-acquired"); got < before.Acquired || got > after.Acquired {
		t.Errorf("acquired shown %d, want between %d and %d", got, before.Acquired, after.Acquired)
	}
	for _, id := range []string{"tokens-wait-time", "tokens-avg-wait"} {
		if d, err := time.ParseDuration(tuningValue(t, b, id)); err != nil || d <= 0 {
			t.Errorf("%s = %q, want a positive duration", id, tuningValue(t, b, id))
		}
	}

	// And back up: the page follows.
	if err := pool.Resize(ctx, 17); err != nil {
		t.Fatal(err)
	}
	env.Sched.SetTaskSemaphoreSize(2)
	b = body(bob.Get("/admin/tuning"))
	if got := tuningNumber(t, b, "tokens-size"); got != 17 {
		t.Errorf("token pool size shown %d after growing, want 17", got)
	}
	if got := tuningNumber(t, b, "semaphore-size"); got != 2 {
		t.Errorf("semaphore size shown %d after shrinking, want 2", got)
	}
}

func TestUIAdminTuningOnASecondary(t *testing.T) {
	env := newUIEnv(t)
	sec := env.as("bob").onSecondary(t)
	w := sec.Get("/admin/tuning")
	b := body(w)
	if w.Code != http.StatusOK {
		t.Fatalf("tuning page on a secondary: %d\n%s", w.Code, b)
	}
	if !strings.Contains(b, `class="badge">secondary</span>`) || !strings.Contains(b, "hands out no tasks") {
		t.Errorf("the secondary's page does not say it has no request_task semaphore:\n%s", b)
	}
	if got := tuningNumber(t, b, "tokens-size"); got != 4 {
		t.Errorf("token pool size shown %d, want the secondary's own 4", got)
	}
	if w := env.as("alice").onSecondary(t).Get("/admin/tuning"); w.Code != http.StatusForbidden {
		t.Errorf("a user who is not an approver on a secondary: %d, want 403", w.Code)
	}
}
