package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
)

// buildLog is a failed build's report as Shoal's worker sends it.
const buildLog = protocol.BuildFailedPrefix + "7150183d07 (make -j2 build ARCH=x86-64-bmi2): exit status 2\n" +
	"search.cpp:412:5: error: 'reduction' was not declared in this scope\nmake: *** [Makefile:842: search.o] Error 1"

func TestThreeWorkersFailingToBuildStopTheRun(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestScheduler(t)
	// The workers' user may stop runs, as stop_run asks.
	if err := dbOf(s).UserCache.Put(ctx, &rundb.UserStats{Username: worker(1).Username, CPUHours: MinCPUHoursToStop}); err != nil {
		t.Fatal(err)
	}
	id := addRun(t, s, runSpec{numGames: 40000, approved: true})
	fail := func(n int, message string) {
		t.Helper()
		task := request(t, s, worker(n))
		if task.RunID != id {
			t.Fatalf("worker %d got no task of the run", n)
		}
		reply, err := s.FailedTask(ctx, id, task.TaskID, message)
		if err == nil {
			err = reply.Stored(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A failure that is no build failure counts for nothing here; the same worker failing twice
	// counts once.
	fail(1, "engine crashed")
	fail(2, buildLog)
	fail(2, buildLog+"\nagain")
	r := snapshot(t, s, id)
	if r.Finished || len(r.BuildFailures) != 1 || !strings.HasSuffix(r.BuildFailures[0].Message, "again") {
		t.Fatalf("after one worker's two build failures: finished %v, failures %+v; want one report, the latest", r.Finished, r.BuildFailures)
	}
	// fishtest's worker reports a failed make its own way.
	fail(3, "Executing ['make', '-j3', 'profile-build', 'ARCH=x86-64-avx2', 'COMP=gcc'] failed. Error: ['search.cpp: error']")
	if r := snapshot(t, s, id); r.Finished {
		t.Fatal("stopped after two workers' build failures")
	}
	fail(4, buildLog)
	r = snapshot(t, s, id)
	if !r.Finished || !r.Failed || r.Failures != 1 || len(r.BuildFailures) != 3 {
		t.Fatalf("after three workers' build failures: finished %v failed %v failures %d reports %d; want a failed, stopped run with 3 reports",
			r.Finished, r.Failed, r.Failures, len(r.BuildFailures))
	}
	checkInvariants(t, r)
	// Stored: the database has the reports and the stop, not just the cache.
	stored, err := dbOf(s).Runs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Finished || len(stored.BuildFailures) != 3 || stored.BuildFailures[2].Message != buildLog || !stored.BuildFailures[2].Counted {
		t.Errorf("stored run: finished %v, reports %+v", stored.Finished, stored.BuildFailures)
	}
	actions, err := dbOf(s).Actions.Find(ctx, rundb.ActionFilter{Action: "stop_run"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 || !strings.Contains(actions[0].Message, "3 workers failed to build it") ||
		!strings.Contains(actions[0].Message, "7150183d07") {
		t.Errorf("stop_run actions %+v; want one saying three workers failed to build it", actions)
	}
}

// An account that has not contributed the CPU hours stop_run asks for cannot stop a run by
// reporting build failures, however many workers it runs: the reports are kept and shown, not
// counted.
func TestBuildFailuresOfAnAccountWithoutCPUHoursDoNotStopTheRun(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestScheduler(t)
	id := addRun(t, s, runSpec{numGames: 40000, approved: true})
	for n := 1; n <= 4; n++ {
		task := request(t, s, worker(n))
		reply, err := s.FailedTask(ctx, id, task.TaskID, buildLog)
		if err == nil {
			err = reply.Stored(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r := snapshot(t, s, id)
	if r.Finished || len(r.BuildFailures) != 4 {
		t.Fatalf("finished %v with %d reports; want the run going on, the 4 reports kept", r.Finished, len(r.BuildFailures))
	}
	for _, f := range r.BuildFailures {
		if f.Counted {
			t.Errorf("report of %s counted", f.Worker)
		}
	}
}

func TestBuildFailureReportsAreBounded(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r := runSpec{numGames: 1000}.build(now)
	for n := range 2 * maxBuildFailures {
		r.Tasks = append(r.Tasks, rundb.Task{WorkerInfo: worker(n)})
	}
	long := protocol.BuildFailedPrefix + strings.Repeat("é", maxBuildFailureMessage)
	for n := range len(r.Tasks) {
		noteBuildFailure(r, n, long, true, now)
	}
	if len(r.BuildFailures) != maxBuildFailures {
		t.Errorf("%d reports kept; want %d", len(r.BuildFailures), maxBuildFailures)
	}
	for _, f := range r.BuildFailures {
		if len(f.Message) > maxBuildFailureMessage || !strings.HasPrefix(f.Message, protocol.BuildFailedPrefix) || !utf8.ValidString(f.Message) {
			t.Fatalf("a report of %d bytes (valid UTF-8: %v); want at most %d, cut on a character", len(f.Message), utf8.ValidString(f.Message), maxBuildFailureMessage)
		}
	}
	if last := r.BuildFailures[len(r.BuildFailures)-1].Worker; last != worker(2*maxBuildFailures-1).ShortName() {
		t.Errorf("the last report is %s's; want the latest worker's", last)
	}
}

// A revived run counts its build failures afresh; the reports stay.
func TestARevivedRunCountsBuildFailuresAfresh(t *testing.T) {
	s, _ := newTestScheduler(t)
	r := runSpec{numGames: 1000}.build(time.Now())
	r.Finished = true
	r.BuildFailures = []rundb.BuildFailure{{Worker: "a", Counted: true}, {Worker: "b", Counted: true}}
	s.setActiveRun(r)
	if r.Finished || len(r.BuildFailures) != 2 || r.BuildFailures[0].Counted || r.BuildFailures[1].Counted {
		t.Errorf("revived: finished %v, reports %+v; want both kept, neither counted", r.Finished, r.BuildFailures)
	}
}
