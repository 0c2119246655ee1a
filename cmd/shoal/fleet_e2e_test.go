//go:build !race

// End-to-end runs: the real server (embedded database, compressed time knobs) and a simulated
// fleet of real workers, in this process. They take tens of seconds each, so they run in make
// test's race-free pass; the fleet's own concurrency is raced in worker/fleet's tests.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/bench"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// e2eScale compresses time 240-fold: heartbeat 0.5 s, dead task after 5 s (testConfig's floor),
// tasks of 7.5 s, an STC game pair in 65 ms of wall time on a 4-core worker.
const e2eScale = 240

// e2eServer is a running server with the demo's users.
type e2eServer struct {
	base  string
	users demo.Users
	log   *lockedBuffer
}

// startE2E starts a server on a fresh embedded database, stopped when the test ends.
func startE2E(t *testing.T, machineLimit int) *e2eServer {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	log := &lockedBuffer{}
	// Registered first, so it runs after the instance's shutdown.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", log)
		}
	})
	inst := startTestInstance(t, testConfig(t.TempDir(), e2eScale), log)
	users, err := demo.CreateUsers(context.Background(), inst.DB(), machineLimit)
	if err != nil {
		t.Fatal(err)
	}
	return &e2eServer{base: "http://" + inst.Addr(), users: users, log: log}
}

// submit creates and approves a run: the demo's arguments, changed by change.
func (s *e2eServer) submit(t *testing.T, change func(*protocol.RunRequest)) string {
	t.Helper()
	req := demo.RunRequest("end-to-end test")
	change(&req)
	id, err := demo.SubmitRun(context.Background(), s.base, s.users, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fleet runs a fleet of the workers' user until the runs are finished (at most limit) and
// returns its report, logged when the test fails.
func (s *e2eServer) fleet(t *testing.T, opts fleet.Options, limit time.Duration, runs ...string) *fleet.Report {
	t.Helper()
	opts.ServerURL, opts.Username, opts.Password = s.base, s.users.Workers.Name, s.users.Workers.Password
	opts.TimeScale, opts.UntilFinished, opts.Duration = e2eScale, runs, limit
	if opts.Concurrency == 0 {
		opts.Concurrency = 4
	}
	var progress lockedBuffer
	opts.Progress, opts.ProgressPeriod = &progress, 5*time.Second
	start := time.Now()
	rep, err := fleet.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet of %d ran %v: %d games, %d requests, stopped: %s", opts.Workers,
		time.Since(start).Round(100*time.Millisecond), rep.GamesReported, rep.Requests, rep.StoppedBecause)
	t.Cleanup(func() {
		if t.Failed() {
			var text bytes.Buffer
			_ = rep.WriteText(&text)
			t.Logf("progress:\n%s\n%s", &progress, &text)
		}
	})
	return rep
}

// getJSON decodes GET path into out and returns the status.
func (s *e2eServer) getJSON(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	return doJSON(t, method, s.base+path, body, out)
}

// doJSON sends body (nil: none) as JSON and decodes a 200 reply into out (nil: ignored).
func doJSON(t *testing.T, method, url string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, url, err, data)
		}
	}
	return resp.StatusCode
}

// e2eRun is what the tests read of GET /api/get_run/{id}.
type e2eRun struct {
	Finished bool           `json:"finished"`
	Results  protocol.Stats `json:"results"`
	Args     struct {
		NumGames int `json:"num_games"`
		SPRT     *struct {
			State string  `json:"state"`
			LLR   float64 `json:"llr"`
		} `json:"sprt"`
		SPSA *struct {
			Iter   int `json:"iter"`
			Params []struct {
				Name  string  `json:"name"`
				Start float64 `json:"start"`
				Theta float64 `json:"theta"`
			} `json:"params"`
		} `json:"spsa"`
	} `json:"args"`
}

func (s *e2eServer) run(t *testing.T, id string) e2eRun {
	t.Helper()
	var r e2eRun
	if code := s.getJSON(t, http.MethodGet, "/api/get_run/"+id, nil, &r); code != http.StatusOK {
		t.Fatalf("get_run %s: %d", id, code)
	}
	return r
}

// e2eTask is what the tests read of GET /api/get_task/{id}/{task}.
type e2eTask struct {
	Active   bool           `json:"active"`
	NumGames int            `json:"num_games"`
	Stats    protocol.Stats `json:"stats"`
}

// tasks reads every task of a run.
func (s *e2eServer) tasks(t *testing.T, id string) []e2eTask {
	t.Helper()
	var out []e2eTask
	for i := 0; ; i++ {
		var task e2eTask
		code := s.getJSON(t, http.MethodGet, fmt.Sprintf("/api/get_task/%s/%d", id, i), nil, &task)
		if code == http.StatusNotFound {
			return out
		}
		if code != http.StatusOK {
			t.Fatalf("get_task %s/%d: %d", id, i, code)
		}
		out = append(out, task)
	}
}

func sumStats(tasks []e2eTask) protocol.Stats {
	var s protocol.Stats
	for _, task := range tasks {
		st := task.Stats
		s.Wins, s.Losses, s.Draws = s.Wins+st.Wins, s.Losses+st.Losses, s.Draws+st.Draws
		s.Crashes, s.TimeLosses = s.Crashes+st.Crashes, s.TimeLosses+st.TimeLosses
		for i := range s.Pentanomial {
			s.Pentanomial[i] += st.Pentanomial[i]
		}
	}
	return s
}

func games(s protocol.Stats) int { return s.Wins + s.Losses + s.Draws }

// checkClean asserts what every healthy fleet run shows: the exactly-once check passed with
// games on both sides, and no request failed in transport or with an HTTP error.
func checkClean(t *testing.T, rep *fleet.Report) {
	t.Helper()
	if !rep.ExactlyOnce || len(rep.Runs) == 0 || rep.GamesReported == 0 {
		t.Errorf("exactly-once check %v over %d runs with %d games, want a pass with games", rep.ExactlyOnce, len(rep.Runs), rep.GamesReported)
	}
	if rep.TransportErrors != 0 || len(rep.HTTPErrors) != 0 || rep.BadReplies != 0 || len(rep.WorkerExitErrors) != 0 {
		t.Errorf("transport errors %d, HTTP errors %v, bad replies %d, worker exits %v; want none",
			rep.TransportErrors, rep.HTTPErrors, rep.BadReplies, rep.WorkerExitErrors)
	}
}

func sprtRun(elo0, elo1 float64) func(*protocol.RunRequest) {
	return func(r *protocol.RunRequest) { r.SPRT = &protocol.SPRTRequest{Elo0: new(elo0), Elo1: new(elo1)} }
}

func TestE2ESPRT(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		elo  float64
		want string
	}{
		{"a patch worth +6 Elo passes SPRT[0, 2]", 6, "accepted"},
		{"a patch worth -4 Elo fails SPRT[0, 2]", -4, "rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startE2E(t, 100)
			id := s.submit(t, sprtRun(0, 2))
			rep := s.fleet(t, fleet.Options{Workers: 100, Elo: tc.elo, DrawRatio: 0.6, Seed: 11}, 100*time.Second, id)
			checkClean(t, rep)
			r := s.run(t, id)
			if !r.Finished || r.Args.SPRT == nil || r.Args.SPRT.State != tc.want {
				t.Fatalf("run finished %v, SPRT %+v; want it %s", r.Finished, r.Args.SPRT, tc.want)
			}
			if rep.StoppedBecause != "runs finished" {
				t.Errorf("the fleet stopped because %q, want the run finished", rep.StoppedBecause)
			}
			if got := games(r.Results); got%32 != 0 || got != rep.Runs[0].FleetGames {
				t.Errorf("%d games in the run, the fleet reported %d; want equal, whole SPRT batches", got, rep.Runs[0].FleetGames)
			}
		})
	}
}

func TestE2EFixedGamesRunPlaysExactly2000Games(t *testing.T) {
	t.Parallel()
	s := startE2E(t, 50)
	id := s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 2000 })
	rep := s.fleet(t, fleet.Options{Workers: 50, Elo: 3, DrawRatio: 0.6, Seed: 5}, 60*time.Second, id)
	checkClean(t, rep)
	r := s.run(t, id)
	if !r.Finished || games(r.Results) != 2000 {
		t.Fatalf("run finished %v with %d games, want finished with exactly 2000", r.Finished, games(r.Results))
	}
	tasks := s.tasks(t, id)
	if sum := sumStats(tasks); sum != r.Results {
		t.Errorf("the tasks' stats add up to %+v, the run has %+v", sum, r.Results)
	}
	for i, task := range tasks {
		if task.Active || games(task.Stats) != task.NumGames {
			t.Errorf("task %d: active %v, %d of %d games; want every task done and inactive", i, task.Active, games(task.Stats), task.NumGames)
		}
	}

	// /metrics tells the same story: every task assigned and finished, every update_task the
	// fleet saw answered counted once.
	code, text := get(t, s.base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	series, err := bench.ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	metric := func(line string) float64 {
		v, ok := series[line]
		if !ok {
			t.Errorf("/metrics has no %s", line)
			return -1
		}
		return v
	}
	if got := metric("shoal_scheduler_tasks_assigned_total"); got != float64(len(tasks)) {
		t.Errorf("tasks assigned %v, want %d", got, len(tasks))
	}
	if got := metric("shoal_scheduler_tasks_finished_total"); got != float64(len(tasks)) {
		t.Errorf("tasks finished %v, want %d", got, len(tasks))
	}
	updates := metric(`shoal_http_requests_total{code="200",method="POST",route="/api/update_task"}`)
	if want := rep.Endpoints["update_task"].Requests; int64(updates) != want {
		t.Errorf("update_task counted %v times, the fleet made %d", updates, want)
	}
	// The journal, which stored each task's results before its update_task was answered,
	// reports its batches (an operator's alert on the journal's depth and latency reads these).
	if batches := metric("shoal_journal_write_duration_seconds_count"); batches < 1 {
		t.Errorf("the journal reports %v batches written, after %v update_task calls", batches, updates)
	}
	if records := metric("shoal_journal_batch_records_sum"); records < float64(len(tasks)) {
		t.Errorf("the journal reports %v records written, fewer than the %d tasks it stored", records, len(tasks))
	}
	var excerpt []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "shoal_") && !strings.Contains(line, "_bucket{") {
			excerpt = append(excerpt, line)
		}
	}
	t.Logf("/metrics after the fleet (buckets left out):\n%s", strings.Join(excerpt, "\n"))
}

func TestE2ESPSAMovesTowardTheOptimum(t *testing.T) {
	t.Parallel()
	s := startE2E(t, 50)
	id := s.submit(t, func(r *protocol.RunRequest) {
		r.NewSignature = r.BaseSignature // an SPSA run plays one binary against itself
		r.SPSA = &protocol.SPSARequest{NumGames: 12000,
			RawParams: "Up,50,0,200,10,0.025\nDown,150,0,200,10,0.025"}
	})
	optimum := map[string]float64{"Up": 120, "Down": 80}
	rep := s.fleet(t, fleet.Options{Workers: 50, DrawRatio: 0.6, SPSAOptimum: optimum, SPSAEloPerStep: 10, Seed: 3}, 90*time.Second, id)
	checkClean(t, rep)
	r := s.run(t, id)
	if !r.Finished || r.Args.SPSA == nil || r.Args.SPSA.Iter != 6000 {
		t.Fatalf("run finished %v, spsa %+v; want finished after 6000 iterations", r.Finished, r.Args.SPSA)
	}
	for _, p := range r.Args.SPSA.Params {
		before, after := math.Abs(p.Start-optimum[p.Name]), math.Abs(p.Theta-optimum[p.Name])
		t.Logf("%s: %.1f -> %.1f (optimum %.0f)", p.Name, p.Start, p.Theta, optimum[p.Name])
		if after > before/3 {
			t.Errorf("%s went from %.1f to %.1f: want it at least two thirds of the way to the optimum %.0f", p.Name, p.Start, p.Theta, optimum[p.Name])
		}
	}
}

func TestE2EVanishingWorkersTasksAreReclaimedAndCountedOnce(t *testing.T) {
	t.Parallel()
	// 50 two-core workers, every one with a task from the first round (116 games each), five of
	// which vanish after their first update, and two that send bad data.
	s := startE2E(t, 50)
	id := s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 6000 })
	rep := s.fleet(t, fleet.Options{Workers: 50, Concurrency: 2, Elo: 2, DrawRatio: 0.6, Vanish: 0.1, BadData: 0.04, Seed: 8}, 90*time.Second, id)

	r := s.run(t, id)
	if !r.Finished || games(r.Results) != 6000 {
		t.Fatalf("run finished %v with %d games, want the run completed with exactly 6000", r.Finished, games(r.Results))
	}
	if !rep.ExactlyOnce || rep.Runs[0].FleetResults != r.Results {
		t.Errorf("exactly-once check failed: the run has %+v, the fleet saw %+v accepted", r.Results, rep.Runs[0].FleetResults)
	}
	tasks := s.tasks(t, id)
	if sum := sumStats(tasks); sum != r.Results {
		t.Errorf("the tasks' stats add up to %+v, the run has %+v", sum, r.Results)
	}
	if rep.WorkersVanished != 5 || rep.TasksReclaimed != 5 {
		t.Fatalf("%d workers vanished with %d tasks, want 5 and 5", rep.WorkersVanished, rep.TasksReclaimed)
	}
	// Each abandoned task was reclaimed by the scavenger: a dead_task action, and inactive.
	var actions []struct {
		TaskID *int `json:"task_id"`
	}
	if code := s.getJSON(t, http.MethodPost, "/api/actions", map[string]any{"action": "dead_task", "run_id": id}, &actions); code != http.StatusOK {
		t.Fatalf("actions: %d", code)
	}
	dead := map[string]bool{}
	for _, a := range actions {
		if a.TaskID != nil {
			dead[fmt.Sprintf("%s/%d", id, *a.TaskID)] = true
		}
	}
	for _, key := range rep.ReclaimedTasks {
		var n int
		fmt.Sscanf(strings.TrimPrefix(key, id+"/"), "%d", &n)
		if !dead[key] || tasks[n].Active {
			t.Errorf("task %s of a vanished worker: dead_task action %v, active %v; want reclaimed", key, dead[key], tasks[n].Active)
		}
		if g := games(tasks[n].Stats); g == 0 || g >= tasks[n].NumGames {
			t.Errorf("task %s: %d of %d games, want the part played before vanishing", key, g, tasks[n].NumGames)
		}
	}
	// Bad data never reaches the results: every spoiled update was refused.
	if rep.BadBatches == 0 || rep.HTTPErrors["400"] != rep.BadBatches {
		t.Errorf("%d spoiled updates, %d refused with 400; want some, all refused", rep.BadBatches, rep.HTTPErrors["400"])
	}
	if rep.TransportErrors != 0 || rep.BadReplies != 0 {
		t.Errorf("transport errors %d, bad replies %d", rep.TransportErrors, rep.BadReplies)
	}
}
