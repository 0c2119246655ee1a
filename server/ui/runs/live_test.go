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

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/server/ui/live"
	"github.com/shoal-chess/shoal/tokenpool"
)

// liveEvent is one event of a stream, as a browser's EventSource sees it.
type liveEvent struct {
	name, data string
	at         time.Time
}

// liveReadEvents parses a Server-Sent Events stream until it ends; the channel is closed then.
func liveReadEvents(r io.Reader) <-chan liveEvent {
	out := make(chan liveEvent, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var ev liveEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || data != nil {
					ev.data, ev.at = strings.Join(data, "\n"), time.Now()
					out <- ev
				}
				ev, data = liveEvent{}, nil
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return out
}

// liveOpen starts a stream from a test server; the request ends with ctx.
func liveOpen(t *testing.T, ctx context.Context, url string) (*http.Response, <-chan liveEvent) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	return resp, liveReadEvents(resp.Body)
}

// liveWait returns the first event for which ok holds, failing after timeout or at the end
// of the stream.
func liveWait(t *testing.T, events <-chan liveEvent, timeout time.Duration, what string, ok func(liveEvent) bool) liveEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("the stream ended before %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

func TestUILiveRunStream(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "aaaa1111-1", 8), true, 3, 2, 5))
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	resp, events := liveOpen(t, ctx, srv.URL+"/tests/view/"+r.ID.Hex()+"/events")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	if resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Error("the stream does not turn proxy buffering off")
	}
	first := liveWait(t, events, 15*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
	for _, want := range []string{`<div id="run-games">Total: 10 W: 3 L: 2 D: 5</div>`, `id="run-llr"`, `id="tasks"`, `id="run-actions"`, `id="run-charts"`} {
		if !strings.Contains(first.data, want) {
			t.Errorf("the first update lacks %s", want)
		}
	}

	// Results arrive: the games counter and the LLR change on the page.
	env.runsChange(r.ID, func(r *rundb.Run) {
		r.Results.Wins, r.Results.Losses, r.Results.Draws = 13, 2, 15
		r.Args.SPRT.LLR = 0.75
	})
	ev := liveWait(t, events, 10*time.Second, "an update with the new games", func(ev liveEvent) bool {
		return strings.Contains(ev.data, "Total: 30 W: 13 L: 2 D: 15")
	})
	if !strings.Contains(ev.data, `<div id="run-llr">LLR: 0.75 `) {
		t.Errorf("the update does not carry the new LLR:\n%s", ev.data)
	}
	if strings.Contains(ev.data, `id="run-actions"`) {
		t.Error("the update resends the actions, which did not change")
	}
	// The server sends at most one update a second; arrival times on a busy machine can bunch
	// two up by some hundreds of milliseconds, hence the margin.
	if ev.at.Sub(first.at) < 500*time.Millisecond {
		t.Errorf("two updates %v apart, want at most one a second", ev.at.Sub(first.at))
	}

	// A burst of changes gives at most one update a second, ending with the last state.
	for i := range 5 {
		env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Draws = 20 + 2*i })
		time.Sleep(100 * time.Millisecond)
	}
	last := ev
	var burst []liveEvent
	liveWait(t, events, 10*time.Second, "the burst's last state", func(ev liveEvent) bool {
		burst = append(burst, ev)
		return strings.Contains(ev.data, "Total: 43 W: 13 L: 2 D: 28")
	})
	for _, ev := range burst {
		if gap := ev.at.Sub(last.at); gap < 500*time.Millisecond {
			t.Errorf("updates %v apart during a burst", gap)
		}
		last = ev
	}
	if len(burst) > 3 {
		t.Errorf("%d updates for a burst of 5 changes in half a second", len(burst))
	}

	// The run finishes: its final state, then the end.
	env.runsFinish(r.ID, func(r *rundb.Run) { r.Args.SPRT.State = "accepted" })
	liveWait(t, events, 10*time.Second, "the final state", func(ev liveEvent) bool {
		return ev.name == "update" && strings.Contains(ev.data, ">finished: passed<")
	})
	liveWait(t, events, 5*time.Second, "the end event", func(ev liveEvent) bool { return ev.name == "end" })
	select {
	case _, open := <-events:
		if open {
			t.Error("the stream goes on after its end event")
		}
	case <-time.After(5 * time.Second):
		t.Error("the stream stays open after its end event")
	}
}

// liveTracked reports on done each time a request to the server's handler returns.
func liveTracked(env *uiEnv, done chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.Server.Handler().ServeHTTP(w, r)
		done <- r.URL.Path
	})
}

func TestUILiveStreamEndsWhenTheClientLeaves(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	done := make(chan string, 4)
	srv := httptest.NewServer(liveTracked(env, done))
	defer srv.Close()
	for _, path := range []string{"/tests/view/" + r.ID.Hex() + "/events", "/tests/events"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			leave, stop := context.WithCancel(ctx)
			_, events := liveOpen(t, leave, srv.URL+path)
			liveWait(t, events, 5*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
			stop()
			select {
			case p := <-done:
				if p != path {
					t.Errorf("%s returned, want %s", p, path)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler is still running after the client left")
			}
		})
	}
}

func TestUILiveFinishedRunEndsAtOnce(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsFinish(r.ID, nil)
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, events := liveOpen(t, ctx, srv.URL+"/tests/view/"+r.ID.Hex()+"/events")
	var names []string
	for ev := range events {
		names = append(names, ev.name)
	}
	if strings.Join(names, " ") != "update end" {
		t.Errorf("a finished run's stream = %v, want its state and the end", names)
	}
}

func TestUILiveOtherPages(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "aaaa1111-1", 8), true, 3, 2, 5))
	srv := httptest.NewServer(env.Server.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		path, first, later string
	}{
		{"/tests/events", `id="home-stats"`, "Total: 30 W: 13"},
		{"/tests/events?user=alice", `id="active-runs"`, "Total: 30 W: 13"},
		{"/tests/view/" + r.ID.Hex() + "/events?for=live_elo", `id="live-elo-gauges"`, `id="live-games">30 (W: 13`},
		{"/tests/view/" + r.ID.Hex() + "/events?for=stats", `id="stats-content"`, "<dt>Games</dt><dd>30</dd>"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Wins, r.Results.Losses, r.Results.Draws = 3, 2, 5 })
			leave, stop := context.WithCancel(ctx)
			defer stop()
			_, events := liveOpen(t, leave, srv.URL+tc.path)
			first := liveWait(t, events, 15*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
			if !strings.Contains(first.data, tc.first) {
				t.Errorf("the first update lacks %s:\n%s", tc.first, first.data)
			}
			env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Wins, r.Results.Losses, r.Results.Draws = 13, 2, 15 })
			liveWait(t, events, 10*time.Second, "an update with "+tc.later, func(ev liveEvent) bool {
				return strings.Contains(ev.data, tc.later)
			})
		})
	}
}

func TestUILiveRefusals(t *testing.T) {
	env := newUIEnv(t)
	fixed := env.runsAdd("alice", runsTestRequest(func(r *protocol.RunRequest) { r.SPRT, r.NumGames = nil, 20000 }))
	for _, path := range []string{
		"/tests/view/" + rundb.NewObjectID().Hex() + "/events",
		"/tests/view/nonsense/events",
		"/tests/view/" + fixed.ID.Hex() + "/events?for=live_elo",
		"/tests/view/" + fixed.ID.Hex() + "/events?for=everything",
	} {
		if w := env.anon().Get(path); w.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, w.Code)
		}
	}
}

// Without a run cache to wait on (a secondary), a stream looks again every live.Poll.
func TestUILiveSecondaryPolls(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	s, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
		DB: env.DB, Runs: env.Sched})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, events := liveOpen(t, ctx, srv.URL+"/tests/view/"+r.ID.Hex()+"/events")
	first := liveWait(t, events, 15*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
	env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Wins = 7 })
	ev := liveWait(t, events, live.Poll+5*time.Second, "the polled update", func(ev liveEvent) bool {
		return strings.Contains(ev.data, "Total: 7 W: 7")
	})
	if gap := ev.at.Sub(first.at); gap < live.Poll-time.Second {
		t.Errorf("the secondary's update came after %v, sooner than its poll period", gap)
	}
}

// The pages load live.js and runs.css from /static: both must be served.
func TestUILiveAssetsAreServed(t *testing.T) {
	env := newUIEnv(t)
	for _, path := range []string{"/static/live.js", "/static/runs.css"} {
		if w := env.anon().Get(path); w.Code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, w.Code)
		}
	}
}

// With the server's read and write timeouts far shorter than a stream's life, a stream stays
// open past them and still delivers changes: an expired read deadline would cancel the
// request's context, and an expired write deadline would fail its next event.
func TestUILiveStreamOutlivesTheServerTimeouts(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsMakeActive(r.ID, runsTask(runsWorker("carol", "aaaa1111-1", 8), true, 3, 2, 5))
	srv := httptest.NewUnstartedServer(env.Server.Handler())
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, events := liveOpen(t, ctx, srv.URL+"/tests/view/"+r.ID.Hex()+"/events")
	liveWait(t, events, 15*time.Second, "the first update", func(ev liveEvent) bool { return ev.name == "update" })
	time.Sleep(1500 * time.Millisecond) // five times both timeouts
	env.runsChange(r.ID, func(r *rundb.Run) { r.Results.Wins = 13 })
	liveWait(t, events, 10*time.Second, "an update after the timeouts", func(ev liveEvent) bool {
		return strings.Contains(ev.data, "Total: 20 W: 13 L: 2 D: 5")
	})
}
