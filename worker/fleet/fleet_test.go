package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// fakeServer is the smallest server a fleet can run against: one fixed-games run, tasks of
// taskGames games, fishtest's validation of every worker request (protocol.DecodeRequest), its
// update rules, and a dead-task reclaim after deadAfter. The real server's behaviour is tested
// end to end in cmd/shoal; this one lets the fleet's own concurrency run under the race detector.
type fakeServer struct {
	password            string
	numGames, taskGames int
	deadAfter           time.Duration
	// busyEvery makes every n-th request_task answer "too busy" (0: never).
	busyEvery int
	// failBeats, while true, answers beats with 503.
	failBeats atomic.Bool

	mu        sync.Mutex
	committed int
	results   protocol.Stats
	tasks     []*fakeTask
	requests  int
	finished  bool
	deadTasks []int
	released  []time.Time // when each failed_task came
}

type fakeTask struct {
	games  int
	stats  protocol.Stats
	active bool
	last   time.Time
}

const fakeRunID = "0123456789abcdef01234567"

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, m map[string]any) {
		m["duration"] = 0.001
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(m)
	}
	if r.Method == http.MethodGet && r.URL.Path == "/api/get_run/"+fakeRunID {
		f.mu.Lock()
		defer f.mu.Unlock()
		reply(200, map[string]any{"_id": fakeRunID, "finished": f.finished, "results": f.results})
		return
	}
	if r.Method == http.MethodGet {
		reply(404, map[string]any{"error": "no such run"})
		return
	}
	body, _ := io.ReadAll(r.Body)
	endpoint := strings.TrimPrefix(r.URL.Path, "/api/")
	if endpoint == "request_version" {
		_, password, err := protocol.DecodeAccess(body)
		if err != nil || password != f.password {
			reply(401, map[string]any{"error": "/api/request_version: Invalid password"})
			return
		}
		reply(200, map[string]any{"version": protocol.Version})
		return
	}
	req, err := protocol.DecodeRequest(body, nil)
	if err != nil {
		reply(400, map[string]any{"error": r.URL.Path + ": " + err.Error()})
		return
	}
	if req.Password != f.password {
		reply(401, map[string]any{"error": r.URL.Path + ": Invalid password"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	var t *fakeTask
	if req.TaskID != nil {
		if *req.TaskID < 0 || *req.TaskID >= len(f.tasks) {
			reply(400, map[string]any{"error": "no such task"})
			return
		}
		t = f.tasks[*req.TaskID]
	}
	switch endpoint {
	case "request_task":
		f.requests++
		if f.busyEvery > 0 && f.requests%f.busyEvery == 0 {
			reply(200, map[string]any{"task_waiting": false, "info": "Request_task: the server is currently too busy..."})
			return
		}
		f.scavenge(now)
		if f.finished || f.committed >= f.numGames {
			reply(200, map[string]any{"task_waiting": false})
			return
		}
		n := min(f.taskGames, f.numGames-f.committed)
		f.committed += n
		f.tasks = append(f.tasks, &fakeTask{games: n, active: true, last: now})
		args := map[string]any{"tc": "10+0.1", "threads": 1, "num_games": f.numGames, "book": "x.epd",
			"book_depth": "8", "base_options": "Hash=16", "new_options": "Hash=16"}
		reply(200, map[string]any{"task_id": len(f.tasks) - 1, "run": map[string]any{
			"_id": fakeRunID, "args": args, "my_task": map[string]any{"num_games": n, "start": 0, "stats": protocol.Stats{}}}})
	case "update_task":
		st := *req.Stats
		played, before := st.Wins+st.Losses+st.Draws, t.stats.Wins+t.stats.Losses+t.stats.Draws
		switch {
		case !t.active:
			reply(200, map[string]any{"task_alive": false, "info": "Update_task: task is not active"})
		case played < before || (played-before)%2 != 0 || played > t.games:
			f.inactive(t, now)
			reply(200, map[string]any{"task_alive": false, "error": "Update_task: incompatible stats"})
		default:
			f.results = add(f.results, st, t.stats)
			t.stats, t.last = st, now
			if played >= t.games {
				f.inactive(t, now)
			}
			total := f.results.Wins + f.results.Losses + f.results.Draws
			if total >= f.numGames {
				f.finished = true
				for _, t := range f.tasks {
					f.inactive(t, now)
				}
			}
			reply(200, map[string]any{"task_alive": t.active})
		}
	case "beat":
		if f.failBeats.Load() {
			reply(503, map[string]any{"error": "down for a moment"})
			return
		}
		if t.active {
			t.last = now
		}
		reply(200, map[string]any{"task_alive": t.active})
	case "failed_task":
		f.inactive(t, now)
		f.released = append(f.released, now)
		reply(200, map[string]any{})
	default:
		reply(200, map[string]any{})
	}
}

// inactive ends a task; its unplayed games go back to the run. The caller holds f.mu.
func (f *fakeServer) inactive(t *fakeTask, now time.Time) {
	if t.active {
		t.active = false
		f.committed -= t.games - (t.stats.Wins + t.stats.Losses + t.stats.Draws)
		t.last = now
	}
}

// scavenge reclaims dead tasks. The caller holds f.mu.
func (f *fakeServer) scavenge(now time.Time) {
	for i, t := range f.tasks {
		if t.active && now.Sub(t.last) > f.deadAfter {
			f.deadTasks = append(f.deadTasks, i)
			f.inactive(t, now)
		}
	}
}

func add(total, now, before protocol.Stats) protocol.Stats {
	total.Wins += now.Wins - before.Wins
	total.Losses += now.Losses - before.Losses
	total.Draws += now.Draws - before.Draws
	total.Crashes += now.Crashes - before.Crashes
	total.TimeLosses += now.TimeLosses - before.TimeLosses
	for i := range total.Pentanomial {
		total.Pentanomial[i] += now.Pentanomial[i] - before.Pentanomial[i]
	}
	return total
}

// busyGames is the size of the run startBusyRun serves: enough games that the run outlasts every
// worker's first backoffs (15, 30, 60 ms... at time scale 1000 after each refusal in a row). The
// tests want each worker to have held a task, and with 4,000 games a worker turned away a few
// times found the run finished about once in twenty runs under the race detector.
const busyGames = 8000

// startBusyRun serves a fake run of busyGames games in tasks of 40, answering every fourth
// request_task "too busy" and reclaiming a task after 300 ms of silence.
func startBusyRun(t *testing.T) (*fakeServer, *httptest.Server) {
	f := &fakeServer{password: "pw", numGames: busyGames, taskGames: 40, deadAfter: 300 * time.Millisecond, busyEvery: 4}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// busyRunOptions are 40 workers for startBusyRun's run, a tenth of them vanishing and a tenth
// sending bad data, until the run is finished.
func busyRunOptions(url string) Options {
	return Options{
		ServerURL: url, Username: "fleet", Password: "pw", Workers: 40, Elo: 20, DrawRatio: 0.4,
		TimeScale: 1000, PairTime: time.Millisecond, Vanish: 0.1, BadData: 0.1, Seed: 3,
		UntilFinished: []string{fakeRunID}, Duration: time.Minute,
		ProgressPeriod: 50 * time.Millisecond, StopGrace: 5 * time.Second,
	}
}

func TestRunAgainstFakeServer(t *testing.T) {
	const games = busyGames
	f, srv := startBusyRun(t)
	var progress bytes.Buffer
	opts := busyRunOptions(srv.URL)
	opts.Progress = &progress
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	_ = rep.WriteJSON(&js)
	f.mu.Lock()
	defer f.mu.Unlock()

	if rep.StoppedBecause != "runs finished" || !f.finished {
		t.Errorf("stopped because %q, run finished %v; want the run finished", rep.StoppedBecause, f.finished)
	}
	if !rep.ExactlyOnce || len(rep.Runs) != 1 || rep.Runs[0].ServerGames != games || rep.Runs[0].FleetGames != games {
		t.Errorf("exactly-once check: %+v, want a pass with %d games on both sides", rep.Runs, games)
	}
	if rep.GamesReported != games {
		t.Errorf("games reported %d, want %d", rep.GamesReported, games)
	}
	if rep.WorkersVanished != 4 || rep.TasksReclaimed != 4 {
		t.Errorf("%d workers vanished holding %d tasks, want 4 and 4", rep.WorkersVanished, rep.TasksReclaimed)
	}
	for _, id := range rep.ReclaimedTasks {
		var task int
		if _, err := fmt.Sscanf(strings.TrimPrefix(id, fakeRunID+"/"), "%d", &task); err != nil || f.tasks[task].active {
			t.Errorf("reclaimed task %s: still active or not a task of the run", id)
		}
	}
	if rep.BadDataWorkers != 4 || rep.BadBatches == 0 || rep.HTTPErrors["400"] != rep.BadBatches {
		t.Errorf("bad data: %d workers spoiled %d updates, %d answered 400; want 4 workers, every spoiled update refused with 400",
			rep.BadDataWorkers, rep.BadBatches, rep.HTTPErrors["400"])
	}
	if rep.TooBusy == 0 || rep.TooBusy > rep.Endpoints["request_task"].Requests {
		t.Errorf("too busy %d of %d request_task calls, want some", rep.TooBusy, rep.Endpoints["request_task"].Requests)
	}
	if int(rep.TasksStarted) != len(f.tasks) {
		t.Errorf("tasks started %d, the server handed out %d", rep.TasksStarted, len(f.tasks))
	}
	// Every worker got a task, some after a too-busy reply: the waits are measured and ordered.
	if rep.WorkersUntasked != 0 || !(rep.FirstTaskP50S > 0 && rep.FirstTaskP50S <= rep.FirstTaskP99S && rep.FirstTaskP99S <= rep.FirstTaskMaxS) {
		t.Errorf("first task: %d workers without one, p50 %v s, p99 %v s, max %v s; want none without and ordered waits",
			rep.WorkersUntasked, rep.FirstTaskP50S, rep.FirstTaskP99S, rep.FirstTaskMaxS)
	}
	for _, name := range []string{"request_version", "request_task", "update_task"} {
		e := rep.Endpoints[name]
		if e.Requests == 0 || !(e.P50MS > 0 && e.P50MS <= e.P95MS && e.P95MS <= e.P99MS && e.P99MS <= e.MaxMS) {
			t.Errorf("endpoint %s: %+v, want requests and ordered percentiles", name, e)
		}
	}
	if rep.TransportErrors != 0 || len(rep.WorkerExitErrors) != 0 {
		t.Errorf("transport errors %d, worker exit errors %v", rep.TransportErrors, rep.WorkerExitErrors)
	}
	if lines := strings.Count(progress.String(), "\n"); lines < 2 || !strings.Contains(progress.String(), "overall") {
		t.Errorf("progress has %d lines, want one per period and a final one:\n%s", lines, progress.String())
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "Exactly-once check: PASS") {
		t.Errorf("text report (err %v):\n%s", err, text.String())
	}
	if t.Failed() {
		t.Logf("report: %s", js.String())
	}
}

func TestRunRefusesBadCredentialsAndUnknownRuns(t *testing.T) {
	f := &fakeServer{password: "pw", numGames: 100, taskGames: 10, deadAfter: time.Second}
	srv := httptest.NewServer(f)
	defer srv.Close()
	base := Options{ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: 2}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"wrong password", func(o *Options) { o.Password = "nope" }, "401 Unauthorized: /api/request_version: Invalid password"},
		{"unknown run", func(o *Options) { o.UntilFinished = []string{"ffffffffffffffffffffffff"} }, "get run ffffffffffffffffffffffff: 404"},
		{"no workers", func(o *Options) { o.Workers = 0 }, "invalid number of workers 0"},
		{"ramp without duration", func(o *Options) { o.Arrival = Ramp }, "a ramp arrival needs a positive duration"},
		{"fractions over one", func(o *Options) { o.Vanish, o.BadData = 0.6, 0.5 }, "add up to more than 1"},
		{"server URL without scheme", func(o *Options) { o.ServerURL = "127.0.0.1:1" }, "invalid server URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.change(&o)
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRampStopsAtDurationAndWorkersStopGracefully(t *testing.T) {
	// A run far too big to finish: the fleet stops at its duration, mid-ramp, and every worker
	// that had started reports its batch and releases its task.
	f := &fakeServer{password: "pw", numGames: 1 << 30, taskGames: 1000, deadAfter: time.Minute}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rep, err := Run(context.Background(), Options{
		ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: 50, TimeScale: 1000,
		PairTime: 5 * time.Millisecond, Arrival: Ramp, Ramp: 2 * time.Second, Duration: 500 * time.Millisecond,
		StopGrace: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rep.StoppedBecause != "duration" {
		t.Errorf("stopped because %q, want duration", rep.StoppedBecause)
	}
	if len(f.tasks) == 0 || len(f.tasks) >= 50 {
		t.Errorf("%d tasks handed out, want some but not all 50 workers started by then", len(f.tasks))
	}
	for i, task := range f.tasks {
		if task.active {
			t.Errorf("task %d still active: a gracefully stopped worker releases its task", i)
		}
	}
	if !rep.ExactlyOnce || rep.GamesReported == 0 {
		t.Errorf("exactly once %v with %d games, want a pass with games", rep.ExactlyOnce, rep.GamesReported)
	}
}

// With a stop ramp the workers are told to stop one after another: their tasks are released
// over the ramp, not in one burst, and nothing is lost.
func TestStopRampSpreadsTheStop(t *testing.T) {
	f := &fakeServer{password: "pw", numGames: 1 << 30, taskGames: 1000, deadAfter: time.Minute}
	srv := httptest.NewServer(f)
	defer srv.Close()
	const ramp = time.Second
	rep, err := Run(context.Background(), Options{
		ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: 20, TimeScale: 1000,
		PairTime: 5 * time.Millisecond, Duration: 300 * time.Millisecond, StopRamp: ramp, StopGrace: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.released) != len(f.tasks) || len(f.tasks) < 10 {
		t.Fatalf("%d tasks released of %d handed out, want every one of at least 10", len(f.released), len(f.tasks))
	}
	first, last := slices.MinFunc(f.released, time.Time.Compare), slices.MaxFunc(f.released, time.Time.Compare)
	// The last of 20 workers is told to stop 19/20 of the ramp after the first; each then
	// plays out a batch of a few milliseconds.
	if spread := last.Sub(first); spread < ramp/2 {
		t.Errorf("tasks released within %v of each other, want them spread over the %v ramp", spread, ramp)
	}
	if !rep.ExactlyOnce || rep.GamesReported == 0 {
		t.Errorf("exactly once %v with %d games, want a pass with games", rep.ExactlyOnce, rep.GamesReported)
	}
}

// The timeline counts the beats second by second, and those that failed: beats answered with
// 503 from 1.5 to 2.5 s into the run show in seconds 1 and 2, none before or after, and the
// fleet is steady again from second 3.
func TestTimelineShowsWhenBeatsFailed(t *testing.T) {
	f := &fakeServer{password: "pw", numGames: 1 << 30, taskGames: 100000, deadAfter: time.Minute}
	srv := httptest.NewServer(f)
	defer srv.Close()
	const workers = 10
	time.AfterFunc(1500*time.Millisecond, func() { f.failBeats.Store(true) })
	time.AfterFunc(2500*time.Millisecond, func() { f.failBeats.Store(false) })
	// A batch of pairs of half a second each outlasts the heartbeat period (120 s / 1000, at
	// least 100 ms): the workers beat while they play.
	rep, err := Run(context.Background(), Options{
		ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: workers, TimeScale: 1000,
		PairTime: 500 * time.Millisecond, Duration: 6 * time.Second, SlowBeat: time.Second, StopGrace: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	tl := rep.Timeline
	if len(tl) < 6 {
		t.Fatalf("a timeline of %d seconds for a 6 s run: %+v", len(tl), tl)
	}
	if tl[0].Beats == 0 || tl[0].SlowBeats != 0 || tl[3].Beats == 0 || tl[3].SlowBeats != 0 {
		t.Errorf("seconds 0 and 3 are %+v and %+v, want beats and none failed", tl[0], tl[3])
	}
	if tl[1].SlowBeats == 0 || tl[2].SlowBeats == 0 {
		t.Errorf("seconds 1 and 2 are %+v and %+v, want failed beats in each", tl[1], tl[2])
	}
	if tl[3].Busy != workers {
		t.Errorf("%d workers held a task in second 3, want all %d", tl[3].Busy, workers)
	}
	if secs, ok := RecoveredAfter(tl, 1, 6, 0.01); !ok || secs != 2 {
		t.Errorf("recovered %d s after second 1 (ok %v), want 2: from second 3", secs, ok)
	}
}

func TestInterruptStopsTheFleet(t *testing.T) {
	f := &fakeServer{password: "pw", numGames: 1 << 30, taskGames: 1000, deadAfter: time.Minute}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rep, err := Run(ctx, Options{ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: 10,
		TimeScale: 1000, PairTime: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StoppedBecause != "interrupted" || !rep.ExactlyOnce || rep.GamesReported == 0 {
		t.Errorf("stopped because %q, exactly once %v, games %d; want interrupted, a pass, games",
			rep.StoppedBecause, rep.ExactlyOnce, rep.GamesReported)
	}
}

// The exactly-once check cannot pass on nothing, and it fails when one task's updates come from
// two workers (a task handed out twice), even if the counts agree.
func TestExactlyOnceNeedsGamesAndOneWorkerPerTask(t *testing.T) {
	empty := newRecorder()
	var rep Report
	rep.checkRuns(context.Background(), empty, http.DefaultClient, "http://127.0.0.1:0", nil)
	if rep.ExactlyOnce {
		t.Error("a fleet that reported no games passed the exactly-once check")
	}

	rec := newRecorder()
	a, b := &workerObserver{rec: rec}, &workerObserver{rec: rec}
	st := protocol.Stats{Draws: 2, Pentanomial: [5]int{0, 0, 1, 0, 0}}
	rec.accept(taskKey{"r", 0}, st, a)
	rec.accept(taskKey{"r", 0}, st, a)
	if rec.sharedTasks != 0 {
		t.Fatal("one worker's repeated updates counted as a shared task")
	}
	rec.accept(taskKey{"r", 0}, st, b)
	rec.accept(taskKey{"r", 0}, st, b)
	if rec.sharedTasks != 1 {
		t.Errorf("shared tasks = %d after a second worker reported the same task, want 1", rec.sharedTasks)
	}
	rep = Report{}
	rep.checkRuns(context.Background(), rec, http.DefaultClient, "http://127.0.0.1:0", nil)
	if rep.ExactlyOnce || rep.SharedTasks != 1 {
		t.Errorf("exactly_once %v with %d shared tasks", rep.ExactlyOnce, rep.SharedTasks)
	}
}

// An update that got no reply may or may not be in the server's results: the check accepts
// either, and still fails a lost acknowledged game or an unanswered update counted twice.
func TestExactlyOnceAllowsUnansweredUpdatesOnce(t *testing.T) {
	rec := newRecorder()
	w := &workerObserver{rec: rec}
	pair := func(wins, draws, p2, p4 int) protocol.Stats {
		return protocol.Stats{Wins: wins, Draws: draws, Pentanomial: [5]int{0, 0, p2, 0, p4}}
	}
	rec.accept(taskKey{"r", 0}, pair(0, 2, 1, 0), w)
	rec.accept(taskKey{"r", 1}, pair(2, 0, 0, 1), w)
	w.Unanswered("r", 1, pair(2, 2, 1, 1)) // the reply to task 1's second update never came
	w.Unanswered("r", 0, pair(0, 2, 1, 0)) // an earlier update retried and since accepted: no doubt
	acked, doubt, tasks := rec.acceptedSum("r")
	if tasks != 2 || acked != pair(2, 2, 1, 1) || doubt != pair(0, 2, 1, 0) {
		t.Fatalf("acceptedSum = %+v, doubt %+v, %d tasks", acked, doubt, tasks)
	}
	for _, tt := range []struct {
		name   string
		server protocol.Stats
		want   bool
	}{
		{"the unanswered update was not recorded", pair(2, 2, 1, 1), true},
		{"the unanswered update was recorded", pair(2, 4, 2, 1), true},
		{"an acknowledged game is missing", pair(1, 2, 1, 1), false},
		{"the unanswered update was counted twice", pair(2, 6, 3, 1), false},
		{"games nobody sent", pair(3, 2, 1, 1), false},
	} {
		if got := accountedFor(tt.server, acked, doubt); got != tt.want {
			t.Errorf("%s: accountedFor(%+v) = %v, want %v", tt.name, tt.server, got, tt.want)
		}
	}
	if accountedFor(pair(2, 4, 2, 1), acked, protocol.Stats{}) {
		t.Error("without unanswered updates, more games than acknowledged passed")
	}
	if rec.unanswer(taskKey{"s", 0}, pair(0, 2, 1, 0)); !slices.Contains(rec.runsTouched(), "s") {
		t.Error("a run whose only update got no reply is not checked")
	}
}

// A run that fails the check lists the tasks whose results on the server the fleet cannot
// account for, read one by one until the server has no more.
func TestExactlyOnceListsTheTasksItCannotAccountFor(t *testing.T) {
	tasks := map[string]string{
		"/api/get_task/r/0": `{"stats": {"wins": 0, "losses": 0, "draws": 2, "crashes": 0, "time_losses": 0, "pentanomial": [0, 0, 1, 0, 0]}}`,
		"/api/get_task/r/1": `{"stats": {"wins": 2, "losses": 0, "draws": 2, "crashes": 0, "time_losses": 0, "pentanomial": [0, 0, 1, 1, 0]}}`,
		"/api/get_task/r/2": `{"stats": {"wins": 0, "losses": 0, "draws": 4, "crashes": 0, "time_losses": 0, "pentanomial": [0, 0, 2, 0, 0]}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := tasks[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	rec := newRecorder()
	w := &workerObserver{rec: rec}
	rec.accept(taskKey{"r", 0}, protocol.Stats{Draws: 2, Pentanomial: [5]int{0, 0, 1, 0, 0}}, w)
	rec.accept(taskKey{"r", 1}, protocol.Stats{Draws: 2, Pentanomial: [5]int{0, 0, 1, 0, 0}}, w)
	w.Unanswered("r", 1, protocol.Stats{Wins: 2, Draws: 2, Pentanomial: [5]int{0, 0, 1, 1, 0}})
	rec.accept(taskKey{"r", 2}, protocol.Stats{Draws: 2, Pentanomial: [5]int{0, 0, 1, 0, 0}}, w)
	got := findMismatches(context.Background(), rec, srv.Client(), srv.URL, "r")
	if len(got) != 1 || got[0].TaskID != 2 || got[0].Server.Draws != 4 || got[0].Accepted.Draws != 2 || !got[0].Known {
		t.Errorf("mismatches %+v, want task 2 alone (4 draws on the server, 2 acknowledged)", got)
	}
}
