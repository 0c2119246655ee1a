package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// fleet is a Shoal server on a real database behind a real HTTP listener, with users for the
// worker protocol tests: alice submits, bob approves, wrk runs workers.
type fleet struct {
	t       testing.TB
	url     string
	db      *rundb.DB
	sched   *scheduler.Scheduler
	handler http.Handler
	srv     *server.Server
}

func newFleet(t testing.TB) *fleet {
	t.Helper()
	return newFleetWithPool(t, tokenpool.New(20))
}

// newFleetWithPool is newFleet with the server's token pool given (to resize it while serving).
func newFleetWithPool(t testing.TB, pool *tokenpool.Pool) *fleet {
	t.Helper()
	return newFleetOn(t, pool, rundbtest.Open(t), nil)
}

// newFleetWith is newFleet with the server's dependencies adjusted by change first.
func newFleetWith(t testing.TB, change func(*server.Deps)) *fleet {
	t.Helper()
	return newFleetOnWith(t, tokenpool.New(20), rundbtest.Open(t), nil, change)
}

// newFleetOn is newFleet on db, its run cache journaled by j if j is not nil.
func newFleetOn(t testing.TB, pool *tokenpool.Pool, db *rundb.DB, j *journal.Journal) *fleet {
	t.Helper()
	return newFleetOnWith(t, pool, db, j, nil)
}

// newFleetOnWith is newFleetOn with the server's dependencies adjusted by change first, if not
// nil.
func newFleetOnWith(t testing.TB, pool *tokenpool.Pool, db *rundb.DB, j *journal.Journal, change func(*server.Deps)) *fleet {
	t.Helper()
	addFleetUsers(t, db)
	logger := servertest.DiscardLogger()
	cache := runcache.New(db.Runs, runcache.Options{Logger: logger, Journal: j})
	sched := scheduler.New(fleetSchedulerConfig(pool), db, cache, logger)
	if err := sched.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return serveFleet(t, pool, db, sched, change)
}

// newPrimaryFleet is newFleet with its scheduler owned by a started Primary, as serve's is.
func newPrimaryFleet(t testing.TB) (*fleet, *scheduler.Primary) {
	t.Helper()
	pool, db := tokenpool.New(20), rundbtest.Open(t)
	addFleetUsers(t, db)
	p := scheduler.NewPrimary(scheduler.PrimaryConfig{Config: fleetSchedulerConfig(pool)}, db, servertest.DiscardLogger())
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return serveFleet(t, pool, db, p.Scheduler(), nil), p
}

func fleetSchedulerConfig(pool *tokenpool.Pool) scheduler.Config {
	return scheduler.Config{TaskSemaphoreSize: 5,
		DeadTaskTimeout: 360 * time.Second, ScavengePeriod: time.Minute, DuplicateWorkerWindow: 120 * time.Second,
		TaskDuration: 1800 * time.Second, DBGate: pool.Do}
}

// serveFleet serves the worker API of sched over HTTP, with the server's dependencies adjusted
// by change first, if not nil.
func serveFleet(t testing.TB, pool *tokenpool.Pool, db *rundb.DB, sched *scheduler.Scheduler, change func(*server.Deps)) *fleet {
	t.Helper()
	logger := servertest.DiscardLogger()
	deps := server.Deps{Logger: logger, Tokens: pool, Version: "test",
		DB: db, Runs: sched, Scheduler: sched, DataDir: t.TempDir()}
	if change != nil {
		change(&deps)
	}
	s, err := server.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &fleet{t: t, url: ts.URL, db: db, sched: sched, handler: s.Handler(), srv: s}
}

// addFleetUsers creates the fleet's accounts: alice, bob (an approver) and wrk (the workers').
func addFleetUsers(t testing.TB, db *rundb.DB) {
	t.Helper()
	ctx := context.Background()
	for _, u := range []rundb.NewUser{
		{Username: "alice", Password: "alicepw", Accepted: true},
		{Username: "bob", Password: "bobpw", Accepted: true, Approver: true},
		{Username: "wrk", Password: "wrkpw", Accepted: true},
	} {
		if _, err := db.Users.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}

// post sends a JSON body (a value, or raw bytes) and decodes the reply, checking that it is a
// JSON object with a duration, as every worker reply must be.
func (f *fleet) post(path string, body any) (int, map[string]any) {
	f.t.Helper()
	var b []byte
	switch v := body.(type) {
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			f.t.Fatal(err)
		}
	}
	resp, err := http.Post(f.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		f.t.Fatalf("%s: reply is not a JSON object: %d %s", path, resp.StatusCode, raw)
	}
	if _, ok := out["duration"].(float64); !ok && strings.HasPrefix(path, "/api/") {
		f.t.Errorf("%s: reply without a duration: %s", path, raw)
	}
	return resp.StatusCode, out
}

// workerInfo is the 16-key worker_info of test worker n.
func workerInfo(n int) map[string]any {
	return map[string]any{
		"uname": "Linux 6.1.0", "architecture": []string{"64bit", "ELF"}, "concurrency": 8, "max_memory": 16000,
		"min_threads": 1, "username": "wrk", "version": 325, "python_version": []int{3, 11, 2},
		"gcc_version": []int{13, 2, 0}, "compiler": "g++", "unique_key": fmt.Sprintf("ab%06d-5a28-4b7d-b27b-d78d97ecf11a", n),
		"modified": false, "worker_arch": "x86-64-avx2", "ARCH": "?", "nps": 0.0, "near_github_api_limit": false,
	}
}

// call builds a worker body with extra fields.
func call(n int, extra map[string]any) map[string]any {
	b := map[string]any{"password": "wrkpw", "worker_info": workerInfo(n)}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// newRun submits and approves a run through the API; spec holds the run's kind.
func (f *fleet) newRun(spec map[string]any) string {
	f.t.Helper()
	run := map[string]any{
		"base_tag": "master", "new_tag": "patch", "resolved_base": strings.Repeat("a", 40), "resolved_new": strings.Repeat("b", 40),
		"tc": "10+0.1", "base_options": "Hash=16", "new_options": "Hash=16", "base_signature": "2050811",
		"new_signature": "2061234", "tests_repo": "https://github.com/alice/Stockfish", "info": "a test",
	}
	for k, v := range spec {
		run[k] = v
	}
	code, out := f.post("/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": run})
	if code != http.StatusOK {
		f.t.Fatalf("create_run: %d %v", code, out)
	}
	id := out["run_id"].(string)
	if code, out := f.post("/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": id}); code != http.StatusOK {
		f.t.Fatalf("approve_run: %d %v", code, out)
	}
	return id
}

func (f *fleet) run(id string) *rundb.Run {
	f.t.Helper()
	oid, _ := rundb.ParseObjectID(id)
	r, err := f.sched.Snapshot(context.Background(), oid)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// checkAggregates asserts that a run's totals equal what its tasks say.
func (f *fleet) checkAggregates(id string) {
	f.t.Helper()
	r := f.run(id)
	var res rundb.Results
	res.Pentanomial = make([]int, 5)
	cores, workers, committed, total := 0, 0, 0, 0
	for _, t := range r.Tasks {
		res.Wins += t.Stats.Wins
		res.Losses += t.Stats.Losses
		res.Draws += t.Stats.Draws
		for i, x := range t.Stats.Pentanomial {
			res.Pentanomial[i] += x
		}
		total += t.NumGames
		if t.Active {
			cores += t.WorkerInfo.Concurrency
			workers++
			committed += t.NumGames
		} else {
			committed += t.Stats.Games()
		}
	}
	if res.Wins != r.Results.Wins || res.Losses != r.Results.Losses || res.Draws != r.Results.Draws ||
		fmt.Sprint(res.Pentanomial) != fmt.Sprint(r.Results.Pentanomial) {
		f.t.Errorf("run results %+v, tasks sum to %+v", r.Results, res)
	}
	if cores != r.Cores || workers != r.Workers || committed != r.CommittedGames || total != r.TotalGames {
		f.t.Errorf("run cores %d workers %d committed %d total %d; tasks say %d %d %d %d",
			r.Cores, r.Workers, r.CommittedGames, r.TotalGames, cores, workers, committed, total)
	}
}

// draws returns cumulative stats of n drawn game pairs.
func draws(pairs int) map[string]any {
	return map[string]any{"wins": 0, "losses": 0, "draws": 2 * pairs, "crashes": 0, "time_losses": 0,
		"pentanomial": []int{0, 0, pairs, 0, 0}}
}

var allWorkerPaths = []string{"/api/request_version", "/api/request_task", "/api/update_task", "/api/beat",
	"/api/request_spsa", "/api/failed_task", "/api/stop_run", "/api/upload_pgn", "/api/worker_log"}

func TestWorkerAPIAuthenticationAndValidation(t *testing.T) {
	f := newFleet(t)
	code, out := f.post("/api/request_version", map[string]any{"password": "wrkpw", "worker_info": map[string]any{"username": "wrk"}})
	if code != http.StatusOK || out["version"] != float64(325) {
		t.Errorf("request_version: %d %v", code, out)
	}
	for _, path := range []string{"/api/actions", "/api/request_task"} {
		req, _ := http.NewRequest(http.MethodOptions, f.url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("OPTIONS %s = %d, want 405 as in fishtest", path, resp.StatusCode)
		}
	}
	for _, path := range allWorkerPaths {
		code, out := f.post(path, map[string]any{"password": "wrong", "worker_info": workerInfo(1)})
		if msg, _ := out["error"].(string); code != http.StatusUnauthorized || !strings.HasPrefix(msg, path+": ") {
			t.Errorf("%s with a wrong password: %d %v", path, code, out)
		}
	}
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"no password", map[string]any{"worker_info": workerInfo(1)}, "password"},
		{"no worker_info", map[string]any{"password": "wrkpw"}, "worker_info"},
		{"not JSON", []byte("password=wrkpw"), "request is not json encoded"},
		{"an unknown worker_arch", call(1, map[string]any{"worker_info": func() map[string]any {
			w := workerInfo(1)
			w["worker_arch"] = "pdp11"
			return w
		}()}), "pdp11"},
	} {
		code, out := f.post("/api/request_task", c.body)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %v, want 400 mentioning %q", c.name, code, out, c.want)
		}
	}
}

// The read API served from the scheduler (as on the primary) answers 404 for an unknown run,
// not 500.
func TestReadAPIOnThePrimaryKnowsMissingRuns(t *testing.T) {
	f := newFleet(t)
	for _, path := range []string{"/api/get_run/", "/api/get_elo/", "/api/get_task/"} {
		url := f.url + path + strings.Repeat("f", 24)
		if path == "/api/get_task/" {
			url += "/0"
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", url, resp.StatusCode)
		}
	}
}

func TestWorkerAPINoRunsAndBlockedWorker(t *testing.T) {
	f := newFleet(t)
	code, out := f.post("/api/request_task", call(1, nil))
	if code != http.StatusOK || out["task_waiting"] != false || len(out) != 2 {
		t.Errorf("no runs: %d %v, want exactly task_waiting false and duration", code, out)
	}
	f.newRun(map[string]any{"num_games": 1000})
	name := "wrk-8cores-ab000002"
	if err := f.db.Workers.Put(context.Background(), &rundb.Worker{WorkerName: name, Blocked: true, Message: "spam"}); err != nil {
		t.Fatal(err)
	}
	code, out = f.post("/api/request_task", call(2, nil))
	if msg, _ := out["error"].(string); code != http.StatusOK || !strings.Contains(msg, "Request_task:") || !strings.Contains(msg, name) {
		t.Errorf("blocked worker: %d %v", code, out)
	}
}

func TestWorkerAPITaskValidation(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	code, out := f.post("/api/request_task", call(1, nil))
	if code != http.StatusOK || out["task_id"] != float64(0) {
		t.Fatalf("request_task: %d %v", code, out)
	}
	r := f.run(id)
	if len(r.Tasks) != 1 || r.Workers != 1 || r.Cores != 8 {
		t.Errorf("after one task: %d tasks, workers %d, cores %d", len(r.Tasks), r.Workers, r.Cores)
	}
	for _, path := range []string{"/api/update_task", "/api/beat", "/api/request_spsa", "/api/failed_task", "/api/stop_run", "/api/upload_pgn"} {
		for _, c := range []struct {
			name  string
			extra map[string]any
			n     int
			want  string
		}{
			{"no run_id", map[string]any{}, 1, "Missing run_id"},
			{"no task_id", map[string]any{"run_id": id}, 1, "Missing task_id"},
			{"an unknown run_id", map[string]any{"run_id": strings.Repeat("0", 24), "task_id": 0}, 1, "Invalid run_id"},
			{"a task_id out of range", map[string]any{"run_id": id, "task_id": 5}, 1, "Invalid task_id"},
			{"another worker's task", map[string]any{"run_id": id, "task_id": 0}, 2, "Invalid unique_key"},
		} {
			code, out := f.post(path, call(c.n, c.extra))
			if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
				t.Errorf("%s with %s: %d %v, want 400 %q", path, c.name, code, out, c.want)
			}
		}
	}
	f.checkAggregates(id)
}

func TestWorkerAPITaskLifecycle(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	task := map[string]any{"run_id": id, "task_id": 0}

	code, out := f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)}))
	if code != http.StatusOK || out["task_alive"] != true {
		t.Errorf("update_task: %d %v", code, out)
	}
	// The same cumulative report again changes nothing.
	f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)}))
	if r := f.run(id); r.Results.Draws != 20 {
		t.Errorf("after a replayed report the run has %d draws, want 20", r.Results.Draws)
	}
	if code, out := f.post("/api/beat", call(1, task)); code != http.StatusOK || out["task_alive"] != true {
		t.Errorf("beat: %d %v", code, out)
	}
	// A lower count is refused and ends the task.
	code, out = f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(5)}))
	if code != http.StatusOK || out["task_alive"] != false || !strings.Contains(fmt.Sprint(out["error"]), "incompatible stats") {
		t.Errorf("a lower count: %d %v", code, out)
	}
	if r := f.run(id); r.Tasks[0].Active || r.Results.Draws != 20 {
		t.Errorf("after a lower count: task active %v, draws %d", r.Tasks[0].Active, r.Results.Draws)
	}
	f.checkAggregates(id)

	// worker_log, with and without a task.
	if code, out := f.post("/api/worker_log", call(1, map[string]any{"message": strings.Repeat("x", 6000)})); code != http.StatusOK || len(out) != 1 {
		t.Errorf("worker_log: %d %v", code, out)
	}
	if code, out := f.post("/api/worker_log", call(1, map[string]any{"message": "m", "run_id": id})); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["error"]), "Missing task_id for worker_log run context") {
		t.Errorf("worker_log with a run but no task: %d %v", code, out)
	}
	acts, _ := f.db.Actions.Find(context.Background(), rundb.ActionFilter{Action: "worker_log"}, 5)
	if len(acts) != 1 || len(acts[0].Message) != 5120 || acts[0].Worker != "wrk-8cores-ab000001-5a28" {
		t.Errorf("worker_log actions: %+v", acts)
	}

	// failed_task on a fresh task.
	f.post("/api/request_task", call(2, nil))
	if code, out := f.post("/api/failed_task", call(2, map[string]any{"run_id": id, "task_id": 1, "message": "crash"})); code != http.StatusOK || len(out) != 1 {
		t.Errorf("failed_task: %d %v", code, out)
	}
	f.checkAggregates(id)
}

func TestWorkerAPIStopRun(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	code, out := f.post("/api/stop_run", call(1, map[string]any{"run_id": id, "task_id": 0, "message": "bad bench"}))
	if code != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(out["error"]), "too few games") {
		t.Errorf("stop_run without CPU hours: %d %v", code, out)
	}
	if err := f.db.UserCache.Put(context.Background(), &rundb.UserStats{Username: "wrk", CPUHours: 1000}); err != nil {
		t.Fatal(err)
	}
	f.post("/api/request_task", call(2, nil))
	if code, out := f.post("/api/stop_run", call(2, map[string]any{"run_id": id, "task_id": 1, "message": "bad bench"})); code != http.StatusOK || len(out) != 1 {
		t.Errorf("stop_run with 1000 CPU hours: %d %v", code, out)
	}
	if r := f.run(id); !r.Finished || !r.Failed {
		t.Errorf("after stop_run: finished %v failed %v", r.Finished, r.Failed)
	}
	code, out = f.post("/api/stop_run", call(2, map[string]any{"run_id": id, "task_id": 1}))
	if code != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(out["error"]), "already finished") {
		t.Errorf("stop_run on a finished run: %d %v", code, out)
	}
	f.checkAggregates(id)
}

// pgnUpload is the pgn field a worker sends: base64 of the gzipped text.
func pgnUpload(t testing.TB, text string) string {
	return base64.StdEncoding.EncodeToString(gzipped(t, text))
}

func TestWorkerAPIUploadPGN(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	task := map[string]any{"run_id": id, "task_id": 0}
	for _, c := range []struct {
		name string
		pgn  any
		want string
	}{
		{"no pgn", nil, "Missing pgn"},
		{"bad base64", "%%%", "base64"},
		{"not gzip", base64.StdEncoding.EncodeToString([]byte("1. e4 e5")), "gzip"},
	} {
		body := call(1, task)
		if c.pgn != nil {
			body["pgn"] = c.pgn
		}
		code, out := f.post("/api/upload_pgn", body)
		if code != http.StatusBadRequest || !strings.Contains(strings.ToLower(fmt.Sprint(out["error"])), strings.ToLower(c.want)) {
			t.Errorf("upload_pgn with %s: %d %v", c.name, code, out)
		}
	}
	body := call(1, task)
	body["pgn"] = pgnUpload(t, "[Event \"x\"]\n1. e4 e5 *\n")
	if code, out := f.post("/api/upload_pgn", body); code != http.StatusOK || len(out) != 1 {
		t.Fatalf("upload_pgn: %d %v", code, out)
	}
	p, err := f.db.PGNs.Get(context.Background(), id+"-0")
	if err != nil || p.Size != len(p.PGNZip) {
		t.Errorf("stored pgn: %+v %v", p, err)
	}
}

func TestWorkerAPISameKeyTwiceIsNoDuplicate(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	for range 2 {
		if code, out := f.post("/api/request_task", call(1, nil)); code != http.StatusOK || out["error"] != nil {
			t.Errorf("request_task: %d %v", code, out)
		}
	}
	// The worker moved on: its first task is failed as stale.
	if r := f.run(id); len(r.Tasks) != 2 || r.Tasks[0].Active || !r.Tasks[1].Active {
		t.Errorf("tasks after asking twice: %+v", r.Tasks)
	}
	acts, _ := f.db.Actions.Find(context.Background(), rundb.ActionFilter{Action: "failed_task"}, 5)
	if len(acts) != 1 || acts[0].Message != "Stale active task" {
		t.Errorf("failed_task actions: %+v", acts)
	}
	f.checkAggregates(id)
}

func TestWorkerAPIConcurrentReportsCountOnce(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	body := call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(50)})
	done := make(chan struct{})
	for range 20 {
		go func() {
			defer func() { done <- struct{}{} }()
			f.post("/api/update_task", body)
		}()
	}
	for range 20 {
		<-done
	}
	if r := f.run(id); r.Results.Draws != 100 {
		t.Errorf("20 copies of one report counted %d draws, want 100", r.Results.Draws)
	}
	f.checkAggregates(id)
}

func TestWorkerAPITaskCarriesBookChecksum(t *testing.T) {
	f := newFleet(t)
	f.newRun(map[string]any{"num_games": 10000})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"UHO_Lichess_4852_v1.epd": {"sri": "sha384-abc"}}`)
	}))
	defer srv.Close()
	sched := scheduler.New(scheduler.Config{TaskSemaphoreSize: 5, TaskDuration: 1800 * time.Second,
		DuplicateWorkerWindow: 120 * time.Second, BooksURL: srv.URL}, f.db, runcache.New(f.db.Runs, runcache.Options{}), servertest.DiscardLogger())
	if err := sched.RefreshBooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The fleet's own scheduler reads the stored metadata when it loads.
	if err := f.sched.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, out := f.post("/api/request_task", call(1, nil))
	args := out["run"].(map[string]any)["args"].(map[string]any)
	if args["book_sri"] != "sha384-abc" || args["book"] != "UHO_Lichess_4852_v1.epd" {
		t.Errorf("task args book %v book_sri %v", args["book"], args["book_sri"])
	}
}

// A worker plays its tasks as fishtest's worker does (reference 9.4): request a task, report
// cumulative results per batch, beat, upload the PGN at the end, ask again.
func (f *fleet) playUntilFinished(id string, n int, score func(pairs int) map[string]any) {
	f.t.Helper()
	for round := 0; round < 50; round++ {
		code, out := f.post("/api/request_task", call(n, nil))
		if code != http.StatusOK {
			f.t.Fatalf("request_task: %d %v", code, out)
		}
		if out["task_waiting"] != nil {
			return
		}
		taskID := int(out["task_id"].(float64))
		run := out["run"].(map[string]any)
		if run["_id"] != id {
			f.t.Fatalf("task for run %v, want %s", run["_id"], id)
		}
		games := int(run["my_task"].(map[string]any)["num_games"].(float64))
		batch := 2
		if sp, ok := run["args"].(map[string]any)["sprt"].(map[string]any); ok {
			batch = 2 * int(sp["batch_size"].(float64))
		}
		for played := batch; played <= games; played += batch {
			_, out := f.post("/api/update_task", call(n, map[string]any{"run_id": id, "task_id": taskID, "stats": score(played / 2)}))
			if played%(4*batch) == 0 {
				f.post("/api/beat", call(n, map[string]any{"run_id": id, "task_id": taskID}))
			}
			if out["task_alive"] != true {
				break
			}
		}
		body := call(n, map[string]any{"run_id": id, "task_id": taskID, "pgn": pgnUpload(f.t, "1. e4 *\n")})
		f.post("/api/upload_pgn", body)
		f.checkAggregates(id)
	}
	f.t.Fatal("the run never finished")
}

func TestWorkerSequenceFinishesFixedGamesAndSPRTRuns(t *testing.T) {
	f := newFleet(t)
	fixed := f.newRun(map[string]any{"num_games": 2000})
	f.playUntilFinished(fixed, 1, draws)
	r := f.run(fixed)
	if !r.Finished || r.Results.Games() != 2000 {
		t.Errorf("fixed-games run: finished %v after %d games", r.Finished, r.Results.Games())
	}
	sprt := f.newRun(map[string]any{"sprt": map[string]any{"elo0": 0, "elo1": 2}})
	f.playUntilFinished(sprt, 2, func(pairs int) map[string]any { // a clearly losing patch
		return map[string]any{"wins": 0, "losses": pairs, "draws": pairs, "crashes": 0, "time_losses": 0,
			"pentanomial": []int{0, pairs, 0, 0, 0}}
	})
	r = f.run(sprt)
	if !r.Finished || r.Args.SPRT.State != "rejected" {
		t.Errorf("SPRT run: finished %v state %q", r.Finished, r.Args.SPRT.State)
	}
	acts, _ := f.db.Actions.Find(context.Background(), rundb.ActionFilter{Action: "finished_run"}, 5)
	if len(acts) != 2 {
		t.Errorf("finished_run actions: %d, want 2", len(acts))
	}
}

// fishtest's auto-purge flow: an auto_purge run whose games fit in two tasks of a 16-core
// worker (932 and 68 of 1000); the first task's end does not finish the run; the second task
// starts where the first ended; then the run is finished and every task inactive.
func TestWorkerAPIAutoPurgeFlow(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 1000, "auto_purge": true})
	big := func(extra map[string]any) map[string]any {
		b := call(1, extra)
		b["worker_info"].(map[string]any)["concurrency"] = 16
		return b
	}
	_, out := f.post("/api/request_task", big(nil))
	first := int(out["run"].(map[string]any)["my_task"].(map[string]any)["num_games"].(float64))
	_, out = f.post("/api/update_task", big(map[string]any{"run_id": id, "task_id": 0, "stats": draws(first / 2)}))
	if out["task_alive"] != false || f.run(id).Finished {
		t.Fatalf("after task 0: %v, finished %v", out, f.run(id).Finished)
	}
	_, out = f.post("/api/request_task", big(nil))
	mine := out["run"].(map[string]any)["my_task"].(map[string]any)
	if int(mine["start"].(float64)) != first {
		t.Errorf("task 1 starts at %v, want %d", mine["start"], first)
	}
	second := int(mine["num_games"].(float64))
	if first+second != 1000 {
		t.Fatalf("tasks of %d and %d games for a 1000-game run", first, second)
	}
	_, out = f.post("/api/update_task", big(map[string]any{"run_id": id, "task_id": 1, "stats": draws(second / 2)}))
	if out["task_alive"] != false {
		t.Errorf("the last update: %v", out)
	}
	r := f.run(id)
	if !r.Finished {
		t.Errorf("after %d+%d games the run is not finished", first, second)
	}
	for i, tk := range r.Tasks {
		if tk.Active {
			t.Errorf("task %d still active", i)
		}
	}
	// All draws: every worker agrees, so the purge finds nobody to remove.
	acts, _ := f.db.Actions.Find(context.Background(), rundb.ActionFilter{Action: "purge_run"}, 5)
	if len(acts) != 1 || acts[0].Message != "Auto purge (not performed): No bad workers" {
		t.Errorf("purge_run actions: %+v", acts)
	}
	f.checkAggregates(id)
}

// FuzzWorkerAPI sends arbitrary bodies to the worker endpoints of a server with a run and an
// active task: no input may cause a 5xx, a reply without a duration, or, when it is refused, a
// change to the run.
func FuzzWorkerAPI(f *testing.F) {
	fl := newFleet(f)
	id := fl.newRun(map[string]any{"num_games": 10000})
	fl.post("/api/request_task", call(1, nil))
	seed := func(v map[string]any) []byte { b, _ := json.Marshal(v); return b }
	for i := range allWorkerPaths {
		for _, body := range [][]byte{
			seed(call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(1)})),
			seed(call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(3), "spsa": map[string]any{"wins": 1}})),
			seed(call(1, map[string]any{"run_id": id, "task_id": 0, "message": "x", "pgn": "H4sI"})),
			seed(call(2, map[string]any{"run_id": id, "task_id": 0})),
			[]byte(`{"password":"wrkpw","worker_info":{"username":"wrk"}}`),
			[]byte(`{"password":"wrkpw","worker_info":{"username":"wrk","concurrency":1e309}}`),
		} {
			f.Add(uint8(i), body)
		}
	}
	oid, _ := rundb.ParseObjectID(id)
	snapshot := func(t *testing.T) string {
		r, err := fl.sched.Snapshot(context.Background(), oid)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r)
		return string(b)
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := allWorkerPaths[int(which)%len(allWorkerPaths)]
		before := snapshot(t)
		w := httptest.NewRecorder()
		fl.handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		if w.Code >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out["duration"] == nil {
			t.Fatalf("%s %q: reply %s", path, body, w.Body)
		}
		// stop_run's 401 for a user without enough CPU hours still ends the task, as fishtest's
		// does; every other refusal changes nothing.
		unauthorizedStop := path == "/api/stop_run" && w.Code == http.StatusUnauthorized
		if w.Code != http.StatusOK && !unauthorizedStop && snapshot(t) != before {
			t.Fatalf("%s %q was refused with %d but changed the run", path, body, w.Code)
		}
	})
}

// A beat needs no database work once the run is cached and the worker's user was seen: with
// every token of the pool held (a flood of calls waiting for the database), beats still answer
// at once, and a call that may write (update_task) waits for a token as before.
func TestWorkerAPIBeatNeedsNoToken(t *testing.T) {
	pool := tokenpool.New(1)
	f := newFleetWithPool(t, pool)
	id := f.newRun(map[string]any{"num_games": 10000})
	if code, out := f.post("/api/request_task", call(1, nil)); code != http.StatusOK || out["task_id"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	if err := pool.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			pool.Release()
		}
	}()
	task := map[string]any{"run_id": id, "task_id": 0}
	if code, out := f.post("/api/beat", call(1, task)); code != http.StatusOK || out["task_alive"] != true {
		t.Fatalf("beat with every token held: %d %v", code, out)
	}
	// Wrong credentials are still refused, and a user never seen still needs the database.
	bad := call(1, task)
	bad["password"] = "wrong"
	if code, out := f.post("/api/beat", bad); code != http.StatusUnauthorized {
		t.Errorf("beat with a wrong password: %d %v", code, out)
	}

	type result struct {
		code int
		out  map[string]any
	}
	done := make(chan result, 1)
	go func() {
		code, out := f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)}))
		done <- result{code, out}
	}()
	select {
	case r := <-done:
		t.Fatalf("update_task answered without a token: %d %v", r.code, r.out)
	case <-time.After(200 * time.Millisecond):
	}
	pool.Release()
	released = true
	if r := <-done; r.code != http.StatusOK || r.out["task_alive"] != true {
		t.Errorf("update_task once a token is free: %d %v", r.code, r.out)
	}
}

// request_task is memory work once the workers collection was read: in a reconnection storm,
// with every token held by calls waiting for the database, a worker new to the server (its
// user seen before) still gets a task at once.
func TestWorkerAPIRequestTaskNeedsNoToken(t *testing.T) {
	pool := tokenpool.New(1)
	f := newFleetWithPool(t, pool)
	f.newRun(map[string]any{"num_games": 10000})
	if code, out := f.post("/api/request_task", call(1, nil)); code != http.StatusOK || out["task_id"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	if err := pool.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	done := make(chan map[string]any, 1)
	go func() {
		_, out := f.post("/api/request_task", call(2, nil))
		done <- out
	}()
	select {
	case out := <-done:
		if out["task_id"] == nil {
			t.Errorf("a new worker with every token held: %v, want a task", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("request_task waited for a token")
	}
}

// PGN uploads are read and stored api.MaxConcurrentUploads at a time: with every slot taken, an
// upload waits without storing anything, a caller that gives up leaves nothing behind, and the
// next one goes through once a slot is free.
func TestWorkerAPIUploadsWaitForASlot(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	body := call(1, map[string]any{"run_id": id, "task_id": 0})
	body["pgn"] = pgnUpload(t, "[Event \"x\"]\n1. e4 e5 *\n")
	raw, _ := json.Marshal(body)
	for range api.MaxConcurrentUploads {
		if err := api.Uploads(f.srv.API()).Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/api/upload_pgn", bytes.NewReader(raw))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("an upload with every slot taken answered %s", resp.Status)
	}
	if _, err := f.db.PGNs.Get(context.Background(), id+"-0"); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("an upload that never got a slot stored something: %v", err)
	}
	api.Uploads(f.srv.API()).Release()
	if code, out := f.post("/api/upload_pgn", raw); code != http.StatusOK {
		t.Fatalf("upload_pgn with a slot free: %d %v", code, out)
	}
	if _, err := f.db.PGNs.Get(context.Background(), id+"-0"); err != nil {
		t.Errorf("stored pgn: %v", err)
	}
}

// A worker call that reaches a scheduler that has just stopped (the primary stepping down, or
// shutting down after its drain) is told to retry, as a call refused by PrimaryOnly is: a JSON
// error would make fishtest's worker drop its update and fail the task, losing its games.
func TestWorkerAPIStoppedSchedulerSaysRetry(t *testing.T) {
	f, p := newPrimaryFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	code, out := f.post("/api/request_task", call(1, nil))
	if code != http.StatusOK || out["task_id"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stats := map[string]any{"wins": 1, "losses": 1, "draws": 0, "crashes": 0, "time_losses": 0, "pentanomial": []int{0, 0, 1, 0, 0}}
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": stats})},
		{"/api/beat", call(1, map[string]any{"run_id": id, "task_id": 0})},
		{"/api/request_task", call(2, nil)},
	} {
		b, _ := json.Marshal(c.body)
		resp, err := http.Post(f.url+c.path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != protocol.RetryLaterStatus || resp.Header.Get("Retry-After") == "" || json.Valid(raw) {
			t.Errorf("%s on a stopped scheduler = %d %q (Retry-After %q), want a plain-text %d to retry",
				c.path, resp.StatusCode, raw, resp.Header.Get("Retry-After"), protocol.RetryLaterStatus)
		}
	}
}

// What a task keeps of a worker call, its worker_info and its stats, is its own: not slices of
// the decoded request, which would keep the whole request (every string of it) for as long as
// the task lives. Changing the request afterwards changes nothing the task holds.
func TestTaskKeepsNoPartOfTheRequest(t *testing.T) {
	req := &protocol.Request{
		WorkerInfo: protocol.WorkerInfo{Architecture: [2]string{"64bit", "ELF"}, PythonVersion: [3]int{3, 12, 1}, GCCVersion: [3]int{13, 2, 0}},
		Stats:      &protocol.Stats{Wins: 3, Losses: 2, Draws: 5, Pentanomial: [5]int{0, 1, 2, 1, 1}},
	}
	info := api.ToWorkerInfo(&req.WorkerInfo)
	results := api.TaskResults(req.Stats)

	req.WorkerInfo.Architecture[0], req.WorkerInfo.PythonVersion[1], req.WorkerInfo.GCCVersion[0] = "32bit", 9, 99
	req.Stats.Pentanomial[2] = 40
	if info.Architecture[0] != "64bit" || info.PythonVersion[1] != 12 || info.GCCVersion[0] != 13 {
		t.Errorf("the task's worker_info follows the request: %v %v %v", info.Architecture, info.PythonVersion, info.GCCVersion)
	}
	if results.Pentanomial[2] != 2 || results.Wins != 3 || len(results.Pentanomial) != 5 {
		t.Errorf("the task's stats follow the request: %+v", results)
	}
}
