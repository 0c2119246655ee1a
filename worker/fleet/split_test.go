package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker"
)

// shardChild is the argument that makes this test binary a process of a split fleet.
const shardChild = "fleet-test-shard"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == shardChild {
		if err := ServeShard(context.Background(), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == stubChild {
		if err := serveStub(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A fleet split over three processes does what one process does: every game reported exactly
// once, the failures injected into the same share of workers, and one report of them all.
func TestSplitFleetReportsAsOne(t *testing.T) {
	const games = busyGames
	f, srv := startBusyRun(t)
	var progress strings.Builder
	opts := busyRunOptions(srv.URL)
	opts.Progress, opts.Window, opts.SlowBeat = &progress, true, time.Second
	opts.Processes, opts.ShardCommand = 3, []string{os.Args[0], shardChild}
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rep.StoppedBecause != "runs finished" || !f.finished {
		t.Errorf("stopped because %q, run finished %v; want the run finished", rep.StoppedBecause, f.finished)
	}
	if !rep.ExactlyOnce || len(rep.Runs) != 1 || rep.Runs[0].ServerGames != games || rep.Runs[0].FleetGames != games || rep.SharedTasks != 0 {
		t.Errorf("exactly-once check: %+v, shared %d; want a pass with %d games on both sides", rep.Runs, rep.SharedTasks, games)
	}
	if rep.GamesReported != games || int(rep.TasksStarted) != len(f.tasks) {
		t.Errorf("games %d, tasks started %d; want %d and the %d the server handed out", rep.GamesReported, rep.TasksStarted, games, len(f.tasks))
	}
	if rep.WorkersVanished != 4 || rep.TasksReclaimed != 4 || rep.BadDataWorkers != 4 || rep.BadBatches == 0 || rep.HTTPErrors["400"] != rep.BadBatches {
		t.Errorf("%d vanished holding %d tasks, %d bad-data workers spoiled %d updates (%d refused); want 4, 4, 4 and every spoiled one refused",
			rep.WorkersVanished, rep.TasksReclaimed, rep.BadDataWorkers, rep.BadBatches, rep.HTTPErrors["400"])
	}
	if rep.WorkersUntasked != 0 || rep.FirstTaskP50S <= 0 {
		t.Errorf("first task: %d workers without one, p50 %v s; want every one of the 40 measured", rep.WorkersUntasked, rep.FirstTaskP50S)
	}
	var sum int64
	for _, e := range rep.Endpoints {
		sum += e.Requests
	}
	// Every call the workers made reached the server (the fake counts request_task calls).
	if rt := rep.Endpoints["request_task"]; sum != rep.Requests || rt.Requests != int64(f.requests) || rep.TooBusy == 0 {
		t.Errorf("requests %d (endpoints %d), request_task %d against the server's %d, too busy %d",
			rep.Requests, sum, rt.Requests, f.requests, rep.TooBusy)
	}
	var beats int64
	for _, s := range rep.Timeline {
		beats += s.Beats
	}
	if beats != rep.Endpoints["beat"].Requests {
		t.Errorf("the timeline counts %d beats, the endpoint %d", beats, rep.Endpoints["beat"].Requests)
	}
	if rep.Window == nil || rep.Window.Requests == 0 || rep.Window.Requests > rep.Requests {
		t.Errorf("window %+v of %d requests", rep.Window, rep.Requests)
	}
	if !strings.Contains(progress.String(), "workers 0/40 running") || !strings.Contains(progress.String(), "overall") {
		t.Errorf("progress, want the three processes' workers summed and a final line:\n%s", progress.String())
	}
}

// A recorder that got every event and two that each got some, merged through their tallies (as
// they cross a pipe), give the same report; a task whose updates both accepted is one handed out
// twice.
func TestMergedTalliesReportAsOneRecorder(t *testing.T) {
	whole, a, b, merged := newRecorder(), newRecorder(), newRecorder(), newRecorder()
	start := time.Now()
	for _, r := range []*recorder{whole, a, b, merged} {
		r.timeline = newTimeline(start, 100*time.Millisecond, 5)
	}
	both := func(part *recorder, do func(r *recorder)) { do(whole); do(part) }
	wa, wb := &workerObserver{rec: whole}, &workerObserver{rec: whole}
	st := func(w int) protocol.Stats { return protocol.Stats{Wins: w, Losses: 1, Draws: 1} }
	for i := range 500 {
		part := a
		if i%3 == 0 {
			part = b
		}
		took := time.Duration(i*i) * time.Microsecond
		both(part, func(r *recorder) { r.request("beat", took, 200, map[string]any{"task_alive": true}, nil) })
		both(part, func(r *recorder) {
			r.request("update_task", took/2, 200, map[string]any{"error": "task 7 is gone"}, nil)
		})
		if i%50 == 0 {
			both(part, func(r *recorder) { r.request("request_task", took, 503, nil, nil) })
			both(part, func(r *recorder) { r.request("request_task", took, 0, nil, errors.New("connection refused")) })
			both(part, func(r *recorder) { r.firstTask(took) })
			both(part, func(r *recorder) { r.workerExited(errors.New("worker 12 failed")) })
		}
	}
	k := func(task int) taskKey { return taskKey{fakeRunID, task} }
	obs := func(r *recorder) *workerObserver {
		if r == whole {
			return wa
		}
		return &workerObserver{rec: r}
	}
	both(a, func(r *recorder) { r.accept(k(1), st(3), obs(r)); r.accept(k(2), st(5), obs(r)) })
	both(b, func(r *recorder) { r.unanswer(k(3), st(4)); r.vanish(k(4)); r.started[k(5)] = true })
	b.accept(k(2), st(6), &workerObserver{rec: b})
	whole.accept(k(2), st(6), wb) // the same task, from a worker of the other process
	both(a, func(r *recorder) {
		(&workerObserver{rec: r}).TaskEnded(fakeRunID, 1, worker.TaskEnd("finished"))
	})

	for _, r := range []*recorder{a, b} {
		line, err := json.Marshal(r.tally(1, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var tl tally
		if err := json.Unmarshal(line, &tl); err != nil {
			t.Fatal(err)
		}
		merged.merge(&tl)
	}
	var want, got Report
	want.fill(whole, time.Second, 2)
	got.fill(merged, time.Second, 2)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged report:\n%+v\nwant the single recorder's:\n%+v", got, want)
	}
	if got, want := merged.timeline.seconds(time.Second), whole.timeline.seconds(time.Second); !reflect.DeepEqual(got, want) || want[0].SlowBeats == 0 {
		t.Errorf("merged timeline %+v, want %+v with slow beats", got, want)
	}
	if merged.sharedTasks != 1 || whole.sharedTasks != 1 {
		t.Errorf("shared tasks: merged %d, single %d; want 1", merged.sharedTasks, whole.sharedTasks)
	}
	gotSum, gotDoubt, _ := merged.acceptedSum(fakeRunID)
	wantSum, wantDoubt, _ := whole.acceptedSum(fakeRunID)
	if gotSum != wantSum || gotDoubt != wantDoubt {
		t.Errorf("accepted %+v, in doubt %+v; want %+v and %+v", gotSum, gotDoubt, wantSum, wantDoubt)
	}
}

// A process that cannot run its share fails the fleet with what it said, and nothing waits for
// it; a process given a bad specification says so and stops.
func TestSplitFleetFailures(t *testing.T) {
	f := &fakeServer{password: "pw", numGames: 1 << 20, taskGames: 100, deadAfter: time.Minute}
	srv := httptest.NewServer(f)
	defer srv.Close()
	opts := Options{ServerURL: srv.URL, Username: "fleet", Password: "pw", Workers: 4, TimeScale: 1000,
		Duration: time.Minute, Processes: 2, ShardCommand: []string{"/bin/sh", "-c", "echo no engine here >&2; exit 3"}}
	start := time.Now()
	_, err := Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "process 1 of 2") || !strings.Contains(err.Error(), "exit status 3") ||
		!strings.Contains(err.Error(), "no engine here") {
		t.Errorf("Run with failing processes: %v", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("Run took %v to notice its processes had failed", waited)
	}
	opts.ShardCommand = nil
	if _, err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "ShardCommand") {
		t.Errorf("Run split without a command: %v", err)
	}
	opts.Processes = 5
	if _, err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "invalid number of processes 5") {
		t.Errorf("Run split over more processes than workers: %v", err)
	}

	for _, in := range []string{"", "not json\n", `{"shard": 0, "shards": 1, "epoch_ns": 1}` + "\n",
		`{"options": {"Workers": 0}, "shard": 0, "shards": 2, "epoch_ns": 1}` + "\n"} {
		var out strings.Builder
		if err := ServeShard(context.Background(), strings.NewReader(in), &out); err == nil || out.Len() != 0 {
			t.Errorf("ServeShard(%q): %v, wrote %q; want an error and nothing written", in, err, out.String())
		}
	}
}
