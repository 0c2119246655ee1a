//go:build !race

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// workerCall is one worker API call seen on its way to the server: when it was sent, where,
// and the status it got.
type workerCall struct {
	sent   time.Time
	path   string
	status int
}

// callRecorder is a reverse proxy in front of the server that records every POST to the API,
// which is every call a worker makes with its password. A call the worker gave up on (a beat
// in flight when its task ended) has no answer to check, and is left out.
type callRecorder struct {
	mu    sync.Mutex
	calls []workerCall
}

func (rec *callRecorder) start(t *testing.T, base string) string {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/api/") {
			proxy.ServeHTTP(w, r)
			return
		}
		sent := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		proxy.ServeHTTP(sw, r)
		if r.Context().Err() != nil {
			return
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, workerCall{sent, r.URL.Path, sw.status})
		rec.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (rec *callRecorder) snapshot() []workerCall {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]workerCall(nil), rec.calls...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// profileForm posts form to path as the logged-in client, with the CSRF token of the profile
// page, and returns the page it lands on.
func profileForm(t *testing.T, client *http.Client, base, path string, form url.Values) string {
	t.Helper()
	form.Set("csrf_token", csrfTokenOf(t, client, base+"/user"))
	resp, err := client.PostForm(base+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d\n%s", path, resp.StatusCode, page)
	}
	return string(page)
}

// A fleet plays with a worker token made on the profile page; the token is revoked there while
// the fleet plays. From the revocation on every call of the fleet gets the wrong password's
// 401 (on this instance, the bound is the next call), each worker quits at its request_version
// as fishtest's does, and every game the server acknowledged before is in the run, none more.
func TestE2ETokenRevokedOnTheProfilePageMidFleet(t *testing.T) {
	t.Parallel()
	const workers = 5 // few enough that their refused calls stay under the login limits
	s := startE2E(t, workers)
	id := s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 100000 })

	_, client := webLogin(t, s.base+"/", s.users.Workers.Name, s.users.Workers.Password)
	page := profileForm(t, client, s.base, "/tokens", url.Values{"token_name": {"fleet-box"}, "token_scope": {"worker"},
		"token_expires_days": {""}, "token_password": {s.users.Workers.Password}})
	m := regexp.MustCompile(`<code class="token">(shoal_[^<]+)</code>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no new token on the profile page:\n%s", page)
	}
	token := m[1]

	var rec callRecorder
	proxied := rec.start(t, s.base)
	type result struct {
		rep *fleet.Report
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var progress lockedBuffer
		rep, err := fleet.Run(context.Background(), fleet.Options{
			ServerURL: proxied, Username: s.users.Workers.Name, Password: token,
			Workers: workers, Concurrency: 4, Elo: 2, DrawRatio: 0.6, Seed: 39,
			TimeScale: e2eScale, Duration: 50 * time.Second, Progress: &progress, ProgressPeriod: 5 * time.Second,
		})
		done <- result{rep, err}
	}()

	// Revoke once the fleet has games acknowledged, in the middle of its tasks.
	deadline := time.Now().Add(30 * time.Second)
	for games(s.run(t, id).Results) < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet had %d games acknowledged after 30 s", games(s.run(t, id).Results))
		}
		time.Sleep(100 * time.Millisecond)
	}
	revoking := time.Now()
	page = profileForm(t, client, s.base, "/tokens/revoke", url.Values{"name": {"fleet-box"}})
	revoked := time.Now()
	if !strings.Contains(page, "The token fleet-box is revoked.") {
		t.Fatalf("the revocation's page:\n%s", page)
	}

	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	t.Logf("fleet of %d ran %v, token revoked after %v: %d games acknowledged, %d requests, stopped: %s",
		workers, time.Since(start).Round(100*time.Millisecond), revoking.Sub(start).Round(100*time.Millisecond),
		rep.GamesReported, rep.Requests, rep.StoppedBecause)

	// Every call sent once the revocation had returned got the 401; none before it started.
	var before, after, last time.Time
	var okAfter, refusedBefore, refusedAfter int
	for _, c := range rec.snapshot() {
		switch {
		case c.sent.Before(revoking):
			if c.status == http.StatusUnauthorized {
				refusedBefore++
			}
			before = c.sent
		case c.sent.After(revoked):
			if c.status == http.StatusUnauthorized {
				refusedAfter++
			} else {
				okAfter++
				t.Errorf("%s sent %v after the revocation: %d, want 401", c.path, c.sent.Sub(revoked), c.status)
			}
			after = c.sent
		}
		last = c.sent
	}
	if refusedBefore != 0 || refusedAfter == 0 || before.IsZero() || after.IsZero() {
		t.Errorf("%d calls refused before the revocation, %d after (%d let in); want none, then every one", refusedBefore, refusedAfter, okAfter)
	}
	t.Logf("%d calls refused after the revocation, the last %v after it", refusedAfter, last.Sub(revoked).Round(time.Millisecond))
	// Each worker quits at its first refused request_version, as fishtest's worker does on a
	// wrong password: the fleet ends well before its 50 s.
	if rep.StoppedBecause != "workers exited" || len(rep.WorkerExitErrors) == 0 || last.Sub(revoked) > 20*time.Second {
		t.Errorf("stopped because %q, %v after the revocation, exits %v; want every worker refused", rep.StoppedBecause, last.Sub(revoked), rep.WorkerExitErrors)
	}
	for msg := range rep.WorkerExitErrors {
		if !strings.Contains(msg, "Invalid username or password.") {
			t.Errorf("a worker quit with %q, want the wrong password's message", msg)
		}
	}

	// Nothing acknowledged is lost and nothing refused is counted.
	r := s.run(t, id)
	if rep.UpdatesInDoubt != 0 || !rep.ExactlyOnce || len(rep.Runs) != 1 || rep.Runs[0].FleetResults != r.Results ||
		int64(games(r.Results)) != rep.GamesReported {
		t.Errorf("the run has %+v (%d games), the fleet had %d games acknowledged (%+v); %d updates in doubt",
			r.Results, games(r.Results), rep.GamesReported, rep.Runs, rep.UpdatesInDoubt)
	}
	if sum := sumStats(s.tasks(t, id)); sum != r.Results {
		t.Errorf("the tasks' stats add up to %+v, the run has %+v", sum, r.Results)
	}
	// The account's password still works.
	if code := s.getJSON(t, http.MethodPost, "/api/request_version", map[string]any{"password": s.users.Workers.Password,
		"worker_info": map[string]any{"username": s.users.Workers.Name}}, nil); code != http.StatusOK {
		t.Errorf("request_version with the password after the revocation: %d", code)
	}
}
