package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestRequestTaskCreatesTasksByFishtestsRules(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{sprt: true, approved: true})

	first := request(t, s, worker(1))
	if first.Waiting || first.RunID != id || first.TaskID != 0 {
		t.Fatalf("first request: %+v", first)
	}
	// An 8-core worker on STC (10+0.1, batch 16 pairs): 1800 s / 30.912 s * 8 = 465.8 -> 480.
	if first.Task.NumGames != 480 || first.Task.Start != 0 {
		t.Errorf("first task: %d games from %d, want 480 from 0", first.Task.NumGames, first.Task.Start)
	}
	second := request(t, s, worker(2))
	if second.TaskID != 1 || second.Task.Start != 480 {
		t.Errorf("second task: id %d start %d, want 1 and 480 (the games handed out before it)", second.TaskID, second.Task.Start)
	}
	if !strings.Contains(string(first.Args), `"tc":"10+0.1"`) || !strings.Contains(string(first.Args), `"batch_size":16`) {
		t.Errorf("the reply's args lack the run's arguments: %s", first.Args)
	}
	r := snapshot(t, s, id)
	if r.Workers != 2 || r.Cores != 16 || r.CommittedGames != 960 || r.TotalGames != 960 {
		t.Errorf("run after two tasks: workers %d cores %d committed %d total %d", r.Workers, r.Cores, r.CommittedGames, r.TotalGames)
	}
	checkInvariants(t, r)
}

func TestRequestTaskRefusals(t *testing.T) {
	cases := []struct {
		name   string
		spec   runSpec
		worker func() rundb.WorkerInfo
		limit  int
		want   TaskReply
	}{
		{"an unapproved run gets no worker", runSpec{numGames: 1000}, func() rundb.WorkerInfo { return worker(1) }, 16, TaskReply{Waiting: true}},
		{"a run needing more threads than the worker has", runSpec{numGames: 1000, approved: true, threads: 16},
			func() rundb.WorkerInfo { return worker(1) }, 16, TaskReply{Waiting: true}},
		{"a worker whose min_threads exceeds the run's threads", runSpec{numGames: 1000, approved: true},
			func() rundb.WorkerInfo { w := worker(1); w.MinThreads = 2; return w }, 16, TaskReply{Waiting: true}},
		{"a worker with too little memory", runSpec{numGames: 1000, approved: true},
			func() rundb.WorkerInfo { w := worker(1); w.MaxMemory = 2000; return w }, 16, TaskReply{Waiting: true}},
		{"a huge hash that does not fit", runSpec{numGames: 1000, approved: true, options: "Hash=1024"},
			func() rundb.WorkerInfo { return worker(1) }, 16, TaskReply{Waiting: true}},
		{"a worker near the GitHub limit that has not built the run", runSpec{numGames: 1000, approved: true},
			func() rundb.WorkerInfo { w := worker(1); w.NearGithubAPILimit = true; return w }, 16, TaskReply{Waiting: true}},
		{"an arch filter the worker does not match", runSpec{numGames: 1000, approved: true, archFilter: "avx512"},
			func() rundb.WorkerInfo { return worker(1) }, 16, TaskReply{Waiting: true}},
		{"a compiler the worker does not have", runSpec{numGames: 1000, approved: true, compiler: "clang++"},
			func() rundb.WorkerInfo { return worker(1) }, 16, TaskReply{Waiting: true}},
		{"the machine limit", runSpec{numGames: 1000, approved: true},
			func() rundb.WorkerInfo { return worker(1) }, 0, TaskReply{Waiting: true, Error: "Request_task: Machine limit reached for user worker"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newTestScheduler(t)
			id := addRun(t, s, c.spec)
			got, err := s.RequestTask(context.Background(), c.worker(), c.limit, "http://shoal.test")
			if err != nil {
				t.Fatal(err)
			}
			if got.Waiting != c.want.Waiting || got.Error != c.want.Error || got.Info != c.want.Info {
				t.Errorf("reply %+v, want %+v", got, c.want)
			}
			if r := snapshot(t, s, id); len(r.Tasks) != 0 {
				t.Errorf("a refused request created %d tasks", len(r.Tasks))
			}
		})
	}
}

func TestRequestTaskFilterAcceptsMatchingWorker(t *testing.T) {
	s, _ := newTestScheduler(t)
	addRun(t, s, runSpec{numGames: 1000, approved: true, archFilter: "avx2$", compiler: "g++"})
	if got := request(t, s, worker(1)); got.Waiting {
		t.Errorf("a worker matching the arch filter and compiler got %+v", got)
	}
}

func TestRequestTaskPrefersPriorityThenFewerCores(t *testing.T) {
	s, _ := newTestScheduler(t)
	low := addRun(t, s, runSpec{numGames: 100000, approved: true})
	high := addRun(t, s, runSpec{numGames: 100000, approved: true, priority: 1})
	if got := request(t, s, worker(1)); got.RunID != high {
		t.Fatalf("first task went to %s, want the priority 1 run", got.RunID)
	}
	// Among equal priorities, a run without cores comes first.
	other := addRun(t, s, runSpec{numGames: 100000, approved: true, priority: 1})
	if got := request(t, s, worker(2)); got.RunID != other {
		t.Errorf("second task went to %s, want the priority-1 run without cores", got.RunID)
	}
	_ = low
}

func TestDuplicateWorkerName(t *testing.T) {
	s, clk := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 100000, approved: true})
	a := worker(1)
	if got := request(t, s, a); got.Waiting {
		t.Fatal(got)
	}
	// Same user, cores and first key segment, another machine (another key): refused while the
	// first one reported within the window.
	b := a
	b.UniqueKey = strings.Replace(a.UniqueKey, "5a28", "ffff", 1)
	b.RemoteAddr = "10.9.9.9"
	got := request(t, s, b)
	if !got.Waiting || !strings.Contains(got.Error, "There is already a worker running with name") ||
		!strings.Contains(got.Error, "0 seconds ago") {
		t.Errorf("a duplicate name got %+v", got)
	}
	clk.advance(121 * time.Second)
	if got := request(t, s, b); got.Waiting {
		t.Errorf("after the window the second machine got %+v", got)
	}
	// The same machine asking again fails its stale task.
	if got := request(t, s, b); got.Waiting {
		t.Fatalf("a re-request got %+v", got)
	}
	r := snapshot(t, s, id)
	if r.Tasks[1].Active || !r.Tasks[2].Active {
		t.Errorf("stale task active=%v, new task active=%v", r.Tasks[1].Active, r.Tasks[2].Active)
	}
	checkInvariants(t, r)
	acts, _ := dbOf(s).Actions.Find(context.Background(), rundb.ActionFilter{Action: "failed_task"}, 10)
	if len(acts) != 2 || acts[0].Message != "Stale active task" {
		t.Errorf("failed_task actions %+v, want the stale tasks logged", acts)
	}
}

func TestBlockedWorker(t *testing.T) {
	s, _ := newTestScheduler(t)
	addRun(t, s, runSpec{numGames: 1000, approved: true})
	w := worker(1)
	if err := dbOf(s).Workers.Put(context.Background(), &rundb.Worker{WorkerName: w.ShortName(), Blocked: true, Message: "bad results"}); err != nil {
		t.Fatal(err)
	}
	got := request(t, s, w)
	if !got.Waiting || !strings.Contains(got.Error, "This worker has been blocked!") ||
		!strings.Contains(got.Error, "Message: bad results") || !strings.Contains(got.Error, "http://shoal.test/workers/"+w.ShortName()) {
		t.Errorf("blocked worker got %+v", got)
	}
}

// When the semaphore is full, request_task answers at once that the server is busy, without
// waiting and without scheduling.
func TestRequestTaskTooBusy(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 1000, approved: true})
	full := s.TaskSemaphoreSize()
	s.inside.Add(int32(full)) // as many callers inside as the semaphore lets in
	got := request(t, s, worker(1))
	if !got.Waiting || got.Info != "Request_task: the server is currently too busy..." {
		t.Errorf("with the semaphore full: %+v", got)
	}
	// Growing the semaphore lets the next caller in; shrinking it below those inside turns
	// callers away again.
	s.SetTaskSemaphoreSize(full + 1)
	if got := request(t, s, worker(2)); got.Info == TooBusy {
		t.Errorf("after growing the semaphore: %+v", got)
	}
	s.SetTaskSemaphoreSize(1)
	if got := request(t, s, worker(3)); got.Info != TooBusy {
		t.Errorf("after shrinking the semaphore below the callers inside: %+v", got)
	}
	s.inside.Add(-int32(full))
	s.SetTaskSemaphoreSize(full)
	if r := snapshot(t, s, id); len(r.Tasks) != 1 {
		t.Errorf("%d tasks, want 1: only the caller let in by the grown semaphore gets one", len(r.Tasks))
	}
}

// A storm of concurrent requests: every reply is a task, no task, or too busy; no task is
// handed out twice; the totals match the tasks. The scheduling lock is held while the storm
// arrives, so the callers that get past the semaphore must wait and every other one must be told
// at once that the server is busy.
func TestRequestTaskStorm(t *testing.T) {
	s, _ := newTestScheduler(t)
	var ids []rundb.ObjectID
	for range 3 {
		ids = append(ids, addRun(t, s, runSpec{numGames: 40000, approved: true}))
	}
	const workers = 200
	var wg sync.WaitGroup
	var busy, tasks, none atomic.Int32
	seen := sync.Map{}
	s.requestMu.Lock()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.RequestTask(context.Background(), worker(i), 16, "")
			switch {
			case err != nil:
				t.Error(err)
			case got.Info == TooBusy:
				busy.Add(1)
			case got.Waiting:
				if got.Error != "" {
					t.Errorf("worker %d: %s", i, got.Error)
				}
				none.Add(1)
			default:
				tasks.Add(1)
				key := fmt.Sprintf("%s/%d", got.RunID.Hex(), got.TaskID)
				if _, dup := seen.LoadOrStore(key, i); dup {
					t.Errorf("task %s/%d handed out twice", got.RunID, got.TaskID)
				}
			}
		}()
	}
	// Every caller either waits inside or has been turned away.
	deadline := time.Now().Add(30 * time.Second)
	for int(s.inside.Load())+int(busy.Load()) < workers {
		if time.Now().After(deadline) {
			t.Fatalf("%d inside, %d turned away", s.inside.Load(), busy.Load())
		}
		time.Sleep(time.Millisecond)
	}
	s.requestMu.Unlock()
	wg.Wait()
	t.Logf("%d tasks, %d too busy, %d without a task; at most %d inside at once", tasks.Load(), busy.Load(), none.Load(), s.peakInside.Load())
	size := int32(s.cfg.TaskSemaphoreSize)
	if s.peakInside.Load() != size || tasks.Load() != size || busy.Load() != workers-size {
		t.Errorf("%d inside at most, %d tasks, %d too busy; want %d, %d and %d",
			s.peakInside.Load(), tasks.Load(), busy.Load(), size, size, workers-size)
	}
	total := 0
	for _, id := range ids {
		r := snapshot(t, s, id)
		checkInvariants(t, r)
		total += len(r.Tasks)
	}
	if total != int(tasks.Load()) {
		t.Errorf("runs hold %d tasks, %d were handed out", total, tasks.Load())
	}
}

func TestMachineLimitCountsActiveTasksPerAddress(t *testing.T) {
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 100000, approved: true})
	sameIP := func(n int) rundb.WorkerInfo { w := worker(n); w.RemoteAddr = "192.0.2.1"; return w }
	for n := range 2 {
		if got, _ := s.RequestTask(context.Background(), sameIP(n), 2, ""); got.Waiting {
			t.Fatalf("worker %d: %+v", n, got)
		}
	}
	got, _ := s.RequestTask(context.Background(), sameIP(2), 2, "")
	if got.Error != "Request_task: Machine limit reached for user worker" {
		t.Errorf("third machine on one address with limit 2: %+v", got)
	}
	// Ending one task frees a place.
	if _, err := s.FailedTask(context.Background(), id, 0, "gone"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.RequestTask(context.Background(), sameIP(2), 2, ""); got.Waiting {
		t.Errorf("after a task ended: %+v", got)
	}
}

func TestBookSRIGoesToTheWorker(t *testing.T) {
	s, _ := newTestScheduler(t)
	ctx := context.Background()
	if err := s.saveBooks(ctx, []byte(`{"UHO_Lichess_4852_v1.epd": {"sri": "sha384-from-db", "total": 2632036}}`)); err != nil {
		t.Fatal(err)
	}
	s.setBooks(nil) // forget it: Load must read it back
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	addRun(t, s, runSpec{numGames: 100000, approved: true})
	if got := request(t, s, worker(1)); !strings.Contains(string(got.Args), `"book_sri":"sha384-from-db"`) {
		t.Errorf("args without the book's checksum: %s", got.Args)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"UHO_Lichess_4852_v1.epd": {"sri": "sha384-fresh", "total": 1}, "other.pgn": {"sri": "x"}}`)
	}))
	defer srv.Close()
	s.cfg.BooksURL = srv.URL
	if err := s.RefreshBooks(ctx); err != nil {
		t.Fatal(err)
	}
	if got := request(t, s, worker(2)); !strings.Contains(string(got.Args), `"book_sri":"sha384-fresh"`) {
		t.Errorf("after a refresh: %s", got.Args)
	}
	s.setBooks(nil)
	s.loadBooks(ctx)
	if s.bookSRI["other.pgn"] != "x" {
		t.Errorf("the refreshed books were not stored: %v", s.bookSRI)
	}
	s.cfg.BooksURL = srv.URL + "/missing"
	srv.Config.Handler = http.NotFoundHandler()
	if err := s.RefreshBooks(ctx); err == nil {
		t.Error("a failed download reported success")
	}
	if got := request(t, s, worker(3)); !strings.Contains(string(got.Args), "sha384-fresh") {
		t.Error("a failed refresh dropped the known books")
	}
}

func TestGitHubLimitedWorkersDuringWorkerRunsCleanup(t *testing.T) {
	s, _ := newTestScheduler(t)
	addRun(t, s, runSpec{numGames: 1 << 30, approved: true})
	w := worker(1)
	request(t, s, w) // builds the run, so it may come back near the GitHub limit
	w.NearGithubAPILimit = true
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			s.CleanWorkerRuns()
		}
	}()
	for range 50 {
		if got := request(t, s, w); got.Waiting {
			t.Fatalf("a worker that built the run was refused: %+v", got)
		}
	}
	wg.Wait()
}

// A panic inside request_task's critical section (a bug in the choice of a run, say) fails that
// one request: the scheduling lock and the semaphore slot are given back, and the next worker
// still gets a task instead of waiting forever.
func TestRequestTaskPanicReleasesTheLock(t *testing.T) {
	s, clk := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 1000, approved: true})
	var armed atomic.Bool
	armed.Store(true)
	s.now = func() time.Time {
		if armed.CompareAndSwap(true, false) {
			panic("a bug in the critical section")
		}
		return clk.now()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("request_task did not panic")
			}
		}()
		_, _ = s.RequestTask(context.Background(), worker(1), 16, "")
	}()
	if n := s.inside.Load(); n != 0 {
		t.Errorf("%d callers still counted inside the semaphore after the panic", n)
	}
	done := make(chan TaskReply, 1)
	go func() {
		got, err := s.RequestTask(context.Background(), worker(2), 16, "")
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	select {
	case got := <-done:
		if got.Waiting || got.RunID != id {
			t.Errorf("the request after the panic: %+v, want a task of %s", got, id.Hex())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request after a panic in the critical section is still waiting: the lock was never released")
	}
}

// request_task's args are the run's args as encoding/json writes them, with book_sri when
// the book's checksum is known: embedding them by pointer changes no byte.
func TestTaskArgsAreTheRunsArgs(t *testing.T) {
	full := rundbtest.SampleRun().Args
	for name, args := range map[string]rundb.RunArgs{"every field": full, "no field": {}} {
		for _, sri := range []string{"", "sha384-abc"} {
			want, err := json.Marshal(struct {
				rundb.RunArgs
				BookSRI string `json:"book_sri,omitempty"`
			}{args, sri})
			if err != nil {
				t.Fatal(err)
			}
			got, err := taskArgs(&args, sri)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s, book_sri %q: %s, %v\nwant %s", name, sri, got, err, want)
			}
		}
	}
}
