//go:build !race

package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// shoalProc is one `shoal serve` process of the shutdown test: its output, and its exit.
type shoalProc struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{} // closed when the process has exited; err is then cmd.Wait's
	err    error
}

// startShoal starts `shoal serve` on addr (a fixed address, so that a restart is found where
// the workers left it) and waits until it says where to browse.
func startShoal(t *testing.T, bin, dir, addr string, env []string) *shoalProc {
	t.Helper()
	p := &shoalProc{cmd: exec.Command(bin, "serve", "--addr", addr), out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("shoal serve output:\n%s", p.out)
		}
	})
	deadline := time.After(60 * time.Second)
	for !browseLine.MatchString(p.out.String()) {
		select {
		case <-p.exited:
			t.Fatalf("serve exited before it was ready: %v\n%s", p.err, p.out)
		case <-deadline:
			t.Fatalf("serve not ready after 60 s:\n%s", p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p
}

// wait waits for the process to exit and returns how it did.
func (p *shoalProc) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(within):
		t.Fatalf("serve still running %v after SIGTERM:\n%s", within, p.out)
		return nil
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
}

// e2eServeEnv is the environment of a `shoal serve` on data with the end-to-end tests' time
// compression (e2eScale), and extra settings.
func e2eServeEnv(data string, extra ...string) []string {
	cfg := testConfig(data, e2eScale)
	return append([]string{
		"SHOAL_DATA_DIR=" + data, "SHOAL_LOG_LEVEL=info",
		"SHOAL_HEARTBEAT_PERIOD=" + cfg.HeartbeatPeriod.String(),
		"SHOAL_DEAD_TASK_TIMEOUT=" + cfg.DeadTaskTimeout.String(),
		"SHOAL_SCAVENGE_PERIOD=" + cfg.ScavengePeriod.String(),
		"SHOAL_DUPLICATE_WORKER_WINDOW=" + cfg.DuplicateWorkerWindow.String(),
	}, extra...)
}

// addUsers creates the submitter, the approver and the fleet's account with `shoal user add`,
// as an operator would before the first start.
func addUsers(t *testing.T, bin, data string, machineLimit int) demo.Users {
	t.Helper()
	u, err := demo.AddUsersCLI(context.Background(), bin, []string{"--data", data}, machineLimit,
		func(name string) string { return name + "-pw" })
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// progressCount is a count from the fleet's last progress line: "games" (the games of every
// update the server accepted so far), "http" (replies with an error status) or "transport"
// (calls that got no reply).
func progressCount(t *testing.T, progress *lockedBuffer, what string) int {
	t.Helper()
	all := regexp.MustCompile(what+` ([0-9,]+)`).FindAllStringSubmatch(progress.String(), -1)
	if len(all) == 0 {
		return 0
	}
	n, err := strconv.Atoi(strings.ReplaceAll(all[len(all)-1][1], ",", ""))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// probeShutdown asks for work and for a page, each on a new connection, until both were refused
// with a 503 in their shape (text that workers retry for the worker API, the HTML error page
// elsewhere) or the server stops accepting connections. It returns how many 503s it got.
func probeShutdown(t *testing.T, base string) int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	do := func(method, path, body string) (*http.Response, string, error) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	var api, page string // the first 503 of each
	refused := 0
	deadline := time.Now().Add(10 * time.Second)
	for (api == "" || page == "") && time.Now().Before(deadline) {
		resp, body, err := do(http.MethodPost, "/api/request_task", `{"password": "fleet-pw", "worker_info": {"username": "fleet"}}`)
		if err != nil {
			break // the listener is closed
		}
		// Worker calls get text with Retry-After, not JSON: fishtest's worker (and Shoal's)
		// gives up on a reply with "error", and retries anything else.
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused++
			if json.Valid([]byte(body)) || resp.Header.Get("Retry-After") == "" ||
				!strings.Contains(body, "server is shutting down") {
				t.Errorf("request_task during the shutdown: 503 %s (Retry-After %q), want text that is not JSON, with Retry-After",
					body, resp.Header.Get("Retry-After"))
			}
			api = body
		}
		resp, body, err = do(http.MethodPost, "/api/request_version", `{"password": "fleet-pw", "worker_info": {"username": "fleet"}}`)
		if err != nil {
			break
		}
		if resp.StatusCode == http.StatusServiceUnavailable && json.Valid([]byte(body)) {
			t.Errorf("request_version during the shutdown: 503 %s, want text that is not JSON", body)
		}
		resp, body, err = do(http.MethodGet, "/tests", "")
		if err != nil {
			break
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused++
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
				!strings.Contains(body, "server is shutting down") || !strings.Contains(body, "</html>") {
				t.Errorf("GET /tests during the shutdown: 503 %s\n%s, want the HTML error page", resp.Header.Get("Content-Type"), body)
			}
			page = body
		}
		time.Sleep(2 * time.Millisecond)
	}
	if api == "" || page == "" {
		// net/http answers nothing once Shutdown has begun (new connections are refused,
		// requests read after that are dropped), so the shutdown guard's 503 is seen only if
		// the server keeps serving for a moment after refusing new work (fishtest: 0.5 s).
		t.Errorf("no 503 during the shutdown (API: %v, page: %v): the server went straight from serving to refusing connections",
			api != "", page != "")
	}
	return refused
}

func statsOf(r rundb.Results) protocol.Stats {
	s := protocol.Stats{Wins: r.Wins, Losses: r.Losses, Draws: r.Draws, Crashes: r.Crashes, TimeLosses: r.TimeLosses}
	copy(s.Pentanomial[:], r.Pentanomial)
	return s
}

// storedRun reads a run from the database a stopped server left, and the sum of its tasks.
func storedRun(t *testing.T, db *rundb.DB, id string) (results, tasks protocol.Stats) {
	t.Helper()
	oid, err := rundb.ParseObjectID(id)
	if err != nil {
		t.Fatal(err)
	}
	run, err := db.Runs.Get(context.Background(), oid)
	if err != nil {
		t.Fatalf("read run %s: %v", id, err)
	}
	for _, task := range run.Tasks {
		tasks = tasks.Add(statsOf(task.Stats))
	}
	return statsOf(run.Results), tasks
}

// systemEvents lists the system_event messages of starts and stops, newest first.
func systemEvents(t *testing.T, db *rundb.DB) []string {
	t.Helper()
	actions, err := db.Actions.Find(context.Background(), rundb.ActionFilter{Action: "system_event"}, 20)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, a := range actions {
		if strings.HasPrefix(a.Message, "start shoal@") || strings.HasPrefix(a.Message, "stop shoal@") {
			msgs = append(msgs, a.Message)
		}
	}
	return msgs
}

// SIGTERM while a fleet is mid-run: the server refuses new work with 503s, lets the requests in
// flight finish, writes every game it accepted (most of them only in the run cache, which a
// 30 s flush period leaves unwritten) and exits 0; the workers retry their updates while it is
// away and carry on with the same tasks after the restart, none given up or abandoned; at the
// end the run holds exactly the games the fleet was told were accepted, nothing lost and
// nothing counted twice.
func TestE2EShutdownMidFleetLosesNoGames(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	start := time.Now()
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const workers = 50
	// Room for a new task per worker after the restart while the old ones wait to be reclaimed.
	users := addUsers(t, bin, data, 2*workers)
	addr := freeAddr(t)
	base := "http://" + addr
	// Nothing is written behind the cache during the test: the games are in the database only
	// if the shutdown writes them.
	// A real restart takes seconds against a dead-task timeout of 6 minutes: the compressed one
	// (5 s) would reclaim the tasks of workers still retrying.
	env := e2eServeEnv(data, "SHOAL_FLUSH_PERIOD=30s", "SHOAL_DEAD_TASK_TIMEOUT=60s")
	srv := startShoal(t, bin, dir, addr, env)

	req := demo.RunRequest("shutdown test")
	req.NumGames = 400_000 // far more than the test plays
	id, err := demo.SubmitRun(context.Background(), base, users, req)
	if err != nil {
		t.Fatal(err)
	}

	var progress lockedBuffer
	bg := startFleet(fleet.Options{ServerURL: base, Username: users.Workers.Name,
		Password: users.Workers.Password, Workers: workers, Concurrency: 4, TimeScale: e2eScale,
		// Arriving over one batch's time, the workers report at evenly spread moments, so
		// that updates are in flight whenever the signal comes.
		Arrival: fleet.Ramp, Ramp: 500 * time.Millisecond,
		Elo: 2, DrawRatio: 0.6, Seed: 21, Progress: &progress, ProgressPeriod: 100 * time.Millisecond,
		// Five attempts 3 s apart span the restart, as fishtest's worker's minute spans
		// a real one; the compressed clock's 62 ms would not.
		RetryDelay: 3 * time.Second, StopGrace: 15 * time.Second})
	defer bg.stop()
	var rep *fleet.Report
	logFleetOnFailure(t, &rep, &progress)

	waitFor(t, 30*time.Second, "5000 games accepted", func() bool { return progressCount(t, &progress, "games") >= 5000 })

	beforeSignal := progressCount(t, &progress, "games")
	errorsBefore := progressCount(t, &progress, "http") + progressCount(t, &progress, "transport")
	signalled := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	refused := probeShutdown(t, base)
	if err := srv.wait(t, 30*time.Second); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0:\n%s", err, srv.out)
	}
	shutdownTook := time.Since(signalled)
	// With the server gone nothing more can be accepted: the fleet's count is final for now.
	time.Sleep(300 * time.Millisecond)
	atStop := progressCount(t, &progress, "games")

	// What the shutdown wrote, read before a restart could correct anything.
	db, err := rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	results, tasks := storedRun(t, db, id)
	events := systemEvents(t, db)
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if games(results) != atStop || tasks != results {
		t.Errorf("after the shutdown the database holds %d games (its tasks %d); the fleet had %d accepted",
			games(results), games(tasks), atStop)
	}
	if want := []string{"stop shoal@" + addr, "start shoal@" + addr}; !slices.Equal(events, want) {
		t.Errorf("system events after the shutdown, newest first: %q, want %q", events, want)
	}

	// The workers find the server gone and back off; restarted, it finds them again.
	waitFor(t, 10*time.Second, "the workers finding the server gone", func() bool {
		return progressCount(t, &progress, "http")+progressCount(t, &progress, "transport") >= errorsBefore+workers
	})
	srv = startShoal(t, bin, dir, addr, env)
	waitFor(t, 30*time.Second, "1000 more games accepted after the restart", func() bool {
		return progressCount(t, &progress, "games") >= atStop+1000
	})
	bg.stop()
	rep = bg.wait(t, 40*time.Second)

	// The fleet's exactly-once check against the restarted server: the run's results are the
	// sum of the last stats accepted for each of its tasks, before and after the restart.
	if len(rep.Runs) != 1 || rep.Runs[0].RunID != id || !rep.ExactlyOnce {
		t.Errorf("exactly-once check %v over %+v (updates in doubt: %d), want a pass for run %s",
			rep.ExactlyOnce, rep.Runs, rep.UpdatesInDoubt, id)
	}
	if int(rep.GamesReported) <= atStop {
		t.Errorf("the fleet had %d games accepted in all, %d before the restart: want more after it", rep.GamesReported, atStop)
	}
	if len(rep.WorkerExitErrors) != 0 || rep.BadReplies != 0 {
		t.Errorf("workers quit with %v, %d bad replies; want every worker to back off and carry on",
			rep.WorkerExitErrors, rep.BadReplies)
	}
	// No task given up (failed_task: its games since the last update lost) or dropped after a
	// beat: the workers kept their tasks across the restart.
	if rep.TasksEnded[string(worker.TaskFailed)] != 0 || rep.TasksEnded[string(worker.TaskAbandoned)] != 0 {
		t.Errorf("tasks ended %v: want none failed or abandoned across the restart", rep.TasksEnded)
	}

	// A second graceful stop writes the rest; the database then holds what the fleet counted.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.wait(t, 30*time.Second); err != nil {
		t.Fatalf("serve exited with %v after the second SIGTERM, want 0", err)
	}
	db = openStopped(t, data)
	results, tasks = storedRun(t, db, id)
	if len(rep.Runs) == 1 && (results != rep.Runs[0].FleetResults || tasks != results) {
		t.Errorf("the database holds %+v (its tasks %+v), the fleet had %+v accepted",
			results, tasks, rep.Runs[0].FleetResults)
	}
	want := []string{"stop shoal@" + addr, "start shoal@" + addr, "stop shoal@" + addr, "start shoal@" + addr}
	if events := systemEvents(t, db); !slices.Equal(events, want) {
		t.Errorf("system events, newest first: %q, want %q", events, want)
	}

	t.Logf("games accepted: %d before SIGTERM, %d when the server had stopped (shutdown took %v), %d in all after the restart",
		beforeSignal, atStop, shutdownTook.Round(time.Millisecond), rep.GamesReported)
	t.Logf("requests refused with 503 during the shutdown: %d of the probe's, %d of the fleet's", refused, rep.HTTPErrors["503"])
	t.Logf("fleet: HTTP errors %v, transport errors %d (e.g. %q), app errors %v, updates in doubt %d, tasks ended %v; test took %v",
		rep.HTTPErrors, rep.TransportErrors, rep.TransportErrorSamples, rep.AppErrors, rep.UpdatesInDoubt, rep.TasksEnded,
		time.Since(start).Round(100*time.Millisecond))
}

// backgroundFleet is a fleet run while the test does other things.
type backgroundFleet struct {
	cancel context.CancelFunc
	done   chan struct{}
	rep    *fleet.Report
	err    error
}

// startFleet runs a fleet with opts until it ends by itself or stop is called.
func startFleet(opts fleet.Options) *backgroundFleet {
	ctx, cancel := context.WithCancel(context.Background())
	f := &backgroundFleet{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.rep, f.err = fleet.Run(ctx, opts)
	}()
	return f
}

// stop interrupts the fleet (a no-op once it ended).
func (f *backgroundFleet) stop() { f.cancel() }

// wait waits up to within for the fleet to end and returns its report.
func (f *backgroundFleet) wait(t *testing.T, within time.Duration) *fleet.Report {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(within):
		t.Fatalf("the fleet did not end within %v", within)
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.rep
}

// logFleetOnFailure logs, when the test has failed, the fleet's report (once *rep is set) and
// its last progress lines.
func logFleetOnFailure(t *testing.T, rep **fleet.Report, progress *lockedBuffer) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if *rep != nil {
			var b strings.Builder
			_ = (*rep).WriteText(&b)
			t.Logf("fleet report:\n%s", &b)
		}
		t.Logf("fleet progress (last lines):\n%s", lastLines(progress.String(), 30))
	})
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
