package runs_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui/live"
	"github.com/shoal-chess/shoal/server/ui/runs"
)

// liveRequest opens url from client address ip (the test server is on loopback, a trusted
// proxy, so X-Forwarded-For names the client) with b's cookies (b may be nil). The response
// is closed with the test; the caller checks its status.
func liveRequest(t *testing.T, ctx context.Context, url, ip string, b *browser) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", ip)
	if b != nil {
		for _, c := range b.Cookies {
			req.AddCookie(c)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// liveOpenAs opens a stream as b from ip, failing unless it is accepted.
func liveOpenAs(t *testing.T, ctx context.Context, url, ip string, b *browser) <-chan liveEvent {
	t.Helper()
	resp := liveRequest(t, ctx, url, ip, b)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from %s = %d, want 200", url, ip, resp.StatusCode)
	}
	return liveReadEvents(resp.Body)
}

// liveWaitOpen waits until the server counts the given streams and client addresses open.
func liveWaitOpen(t *testing.T, l *live.Limits, streams, clients int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, c := l.Open()
		if s == streams && c == clients {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open from %d addresses, want %d from %d", s, c, streams, clients)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveWaitEnd waits for the end of a stream, returning its remaining events.
func liveWaitEnd(t *testing.T, events <-chan liveEvent, timeout time.Duration) []liveEvent {
	t.Helper()
	var got []liveEvent
	deadline := time.After(timeout)
	for {
		select {
		case ev, open := <-events:
			if !open {
				return got
			}
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("the stream is still open after %v (events: %v)", timeout, got)
		}
	}
}

func TestUILiveLimitsCapStreams(t *testing.T) {
	env := newUIEnv(t)
	lim := runs.LiveLimits(env.Server.RunPages())
	lim.MaxPerIP, lim.MaxStreams = 2, 3
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := srv.URL + "/tests/events"

	stops := map[string][]context.CancelFunc{}
	open := func(ip string) <-chan liveEvent {
		t.Helper()
		c, stop := context.WithCancel(ctx)
		stops[ip] = append(stops[ip], stop)
		events := liveOpenAs(t, c, url, ip, nil)
		liveWait(t, events, 5*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
		return events
	}
	refused := func(ip, why string) {
		t.Helper()
		resp := liveRequest(t, ctx, url, ip, nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: GET from %s = %d, want 503", why, ip, resp.StatusCode)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "30" {
			t.Errorf("%s: Retry-After = %q, want 30", why, ra)
		}
		if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "Too many live update streams") {
			t.Errorf("%s: body %q does not say why", why, b)
		}
	}

	open("10.0.0.1")
	open("10.0.0.1")
	refused("10.0.0.1", "over the per-address cap")
	open("10.0.0.2") // another address still gets one
	liveWaitOpen(t, lim, 3, 2)
	refused("10.0.0.3", "over the global cap")
	liveWaitOpen(t, lim, 3, 2) // refusals take no slot

	// Closing a stream frees its slot.
	stops["10.0.0.1"][0]()
	liveWaitOpen(t, lim, 2, 2)
	open("10.0.0.1")
	liveWaitOpen(t, lim, 3, 2)

	// Everyone leaves: nothing is left counted.
	for _, ss := range stops {
		for _, stop := range ss {
			stop()
		}
	}
	liveWaitOpen(t, lim, 0, 0)
	if _, n := lim.Open(); n != 0 {
		t.Errorf("%d addresses still remembered", n)
	}
}

// A stream that fails at once (no such run) gives its slot back too.
func TestUILiveLimitsRefusedStreamFreesSlot(t *testing.T) {
	env := newUIEnv(t)
	runs.LiveLimits(env.Server.RunPages()).MaxPerIP = 1
	for range 3 {
		if w := env.anon().Get("/tests/view/" + rundb.NewObjectID().Hex() + "/events"); w.Code != http.StatusNotFound {
			t.Fatalf("a missing run's stream = %d, want 404", w.Code)
		}
	}
	if s, c := runs.LiveLimits(env.Server.RunPages()).Open(); s != 0 || c != 0 {
		t.Errorf("%d streams from %d addresses still counted", s, c)
	}
}

// A stream ends after its lifetime without an end event, having told the browser when to
// reconnect.
func TestUILiveLimitsLifetime(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	lim := runs.LiveLimits(env.Server.RunPages())
	lim.Lifetime, lim.Reconnect = 1500*time.Millisecond, 2*time.Second
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := liveRequest(t, ctx, srv.URL+"/tests/view/"+r.ID.Hex()+"/events", "10.0.0.1", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "retry: 2000\n" {
		t.Errorf("the stream starts with %q, want its retry field", line)
	}
	start := time.Now()
	events := liveReadEvents(br)
	liveWait(t, events, 5*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
	for _, ev := range liveWaitEnd(t, events, 5*time.Second) {
		if ev.name == "end" {
			t.Error("an expired stream sends an end event, which stops the browser from reconnecting")
		}
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the stream ended after %v, before its lifetime", d)
	}
	liveWaitOpen(t, runs.LiveLimits(env.Server.RunPages()), 0, 0)
}

// A stream reads its user again: a block or a new password ends it, a lost right shows.
func TestUILiveSessionRecheck(t *testing.T) {
	env := newUIEnv(t)
	runs.LiveLimits(env.Server.RunPages()).Recheck = 500 * time.Millisecond
	r := env.runsAdd("alice", runsTestRequest(nil))
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	url := srv.URL + "/tests/view/" + r.ID.Hex() + "/events"
	bg := context.Background()
	draws := 0
	change := func() {
		draws++
		env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Draws = draws })
	}
	first := func(events <-chan liveEvent) liveEvent {
		t.Helper()
		return liveWait(t, events, 5*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
	}
	signedOut := func(events <-chan liveEvent, who string) {
		t.Helper()
		var names []string
		for _, ev := range liveWaitEnd(t, events, 5*time.Second) {
			names = append(names, ev.name+":"+ev.data)
			if ev.name == "update" && strings.Contains(ev.data, "Total: ") {
				t.Errorf("%s's stream sent the run after the session ended", who)
			}
		}
		if len(names) == 0 || names[len(names)-1] != "end:signed out" {
			t.Errorf("%s's stream ended with %v, want the end event", who, names)
		}
	}

	t.Run("blocked", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		alice := liveOpenAs(t, ctx, url, "10.0.0.1", env.as("alice"))
		carol := liveOpenAs(t, ctx, url, "10.0.0.2", env.as("carol"))
		first(alice)
		first(carol)
		if err := env.DB.Users.SetBlocked(ctx, "alice", true); err != nil {
			t.Fatal(err)
		}
		change()
		signedOut(alice, "alice")
		// Others' streams go on.
		liveWait(t, carol, 10*time.Second, "carol's update", func(ev liveEvent) bool {
			return strings.Contains(ev.data, "D: 1")
		})
	})

	t.Run("new password", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		bob := liveOpenAs(t, ctx, url, "10.0.0.3", env.as("bob"))
		first(bob)
		if err := env.DB.Users.SetPassword(ctx, "bob", "another-long-password-9"); err != nil {
			t.Fatal(err)
		}
		change()
		signedOut(bob, "bob")
	})

	t.Run("no longer an approver", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		carol := liveOpenAs(t, ctx, url, "10.0.0.4", env.as("carol"))
		if ev := first(carol); !strings.Contains(ev.data, `id="form-approve"`) {
			t.Fatalf("an approver's stream lacks the approve button:\n%s", ev.data)
		}
		if err := env.DB.Users.SetApprover(ctx, "carol", false); err != nil {
			t.Fatal(err)
		}
		change()
		ev := liveWait(t, carol, 10*time.Second, "new actions", func(ev liveEvent) bool {
			return strings.Contains(ev.data, `id="run-actions"`)
		})
		if strings.Contains(ev.data, `id="form-approve"`) {
			t.Error("the stream still offers the approve button to a former approver")
		}
	})
	liveWaitOpen(t, runs.LiveLimits(env.Server.RunPages()), 0, 0)
}
