package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler/quarantine"
)

// newQuarantineScheduler is a test scheduler with the quarantine rule at its defaults.
func newQuarantineScheduler(t *testing.T) *Scheduler {
	t.Helper()
	s, _ := newTestScheduler(t)
	s.cfg.Quarantine = quarantine.DefaultSettings()
	s.quar = quarantine.New(s.cfg.Quarantine)
	return s
}

// fleetPlayed records that 50 other machines played 2,000 games each on run without a time
// loss or crash: the fleet a machine is compared with.
func fleetPlayed(s *Scheduler, run rundb.ObjectID) {
	for i := range 50 {
		s.quar.Games(fmt.Sprintf("other-8cores-m%d", i), run.Hex(), 2000, 0, 0)
	}
}

func TestQuarantineFromUpdateTaskToRequestTask(t *testing.T) {
	ctx := context.Background()
	s := newQuarantineScheduler(t)
	bad := worker(9)
	name := bad.ShortName()
	a := addRun(t, s, runSpec{numGames: 100000, approved: true})
	fleetPlayed(s, a)

	// 200 games with 7 time losses on one run: not judged yet (one run).
	first := request(t, s, bad)
	st := pairs(100, 0)
	st.TimeLosses = 7
	if _, err := s.UpdateTask(ctx, bad, first.RunID, first.TaskID, st, nil); err != nil {
		t.Fatal(err)
	}
	if s.quar.Flagged(name) {
		t.Fatal("quarantined after one run")
	}
	// The same on a second run: 14 in 400 games where the fleet predicts 0.4.
	b := addRun(t, s, runSpec{numGames: 100000, approved: true, priority: 1})
	fleetPlayed(s, b)
	second := request(t, s, bad)
	if second.RunID != b {
		t.Fatalf("second task on %v, want run %v", second.RunID, b)
	}
	if _, err := s.UpdateTask(ctx, bad, second.RunID, second.TaskID, st, nil); err != nil {
		t.Fatal(err)
	}

	w, err := dbOf(s).Workers.Get(ctx, name)
	if err != nil {
		t.Fatalf("no worker record after the quarantine: %v", err)
	}
	wantReason := "quarantined: 14 time losses and 0 crashes in 400 games on 2 runs"
	if !w.Blocked || !w.Quarantined || w.Quarantines != 1 || !w.ApproverBlock() || w.QuarantinedSince.IsZero() ||
		!strings.HasPrefix(w.Message, wantReason) {
		t.Fatalf("worker record %+v, want a quarantine by the rule with %q", w, wantReason)
	}
	actions, err := dbOf(s).Actions.Query(ctx, rundb.ActionQuery{Action: QuarantineAction})
	if err != nil || len(actions) != 1 || actions[0].Worker != name || actions[0].User != "worker" || actions[0].Username != systemUser || actions[0].Message != w.Message {
		t.Fatalf("quarantine actions %+v (%v), want one for %s", actions, err, name)
	}

	// request_task answers as fishtest answers a blocked worker, with the reason.
	refused := request(t, s, bad)
	if !refused.Waiting || !strings.Contains(refused.Error, "Request_task: This worker has been blocked!") ||
		!strings.Contains(strings.ReplaceAll(refused.Error, "\n", " "), "Message: "+wantReason) ||
		!strings.Contains(refused.Error, "http://shoal.test/workers/"+name) {
		t.Fatalf("request_task of a quarantined worker: %+v", refused)
	}
	// A healthy machine on the same runs is served.
	if ok := request(t, s, worker(10)); ok.Waiting {
		t.Fatalf("a healthy worker refused: %+v", ok)
	}

	// An approver lifts the quarantine (the workers page writes the record unblocked): the
	// machine is served again and its record starts afresh.
	w.Blocked, w.Quarantined = false, false
	if err := dbOf(s).Workers.Put(ctx, w); err != nil {
		t.Fatal(err)
	}
	if again := request(t, s, bad); again.Waiting {
		t.Fatalf("request_task after the lift: %+v", again)
	}
	if s.quar.Flagged(name) {
		t.Error("the record still flags the machine after its quarantine was lifted")
	}
}

func TestQuarantineByFailedTasks(t *testing.T) {
	ctx := context.Background()
	s := newQuarantineScheduler(t)
	a := addRun(t, s, runSpec{numGames: 100000, approved: true})
	b := addRun(t, s, runSpec{numGames: 100000, approved: true})
	for _, run := range []rundb.ObjectID{a, b} {
		for i := range 50 {
			s.quar.TaskEnded(fmt.Sprintf("other-8cores-m%d", i), run.Hex(), false)
		}
	}
	bad := worker(7)
	for i := range 30 {
		reply := request(t, s, bad)
		if reply.Waiting {
			if i < 18 || !strings.Contains(reply.Error, "quarantined: 18 failed tasks") {
				t.Fatalf("request %d refused: %+v", i, reply)
			}
			return
		}
		if i%2 == 0 {
			if _, err := s.FailedTask(ctx, reply.RunID, reply.TaskID, "engine crashed"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// stop_run from a user with too few CPU hours only ends the task; it counts the same.
		if err := s.StopRunByWorker(ctx, bad, reply.RunID, reply.TaskID, "bench mismatch", 0); err == nil {
			t.Fatal("stop_run from a user without CPU hours accepted")
		}
	}
	t.Fatal("a machine failing every task was never quarantined")
}

func TestQuarantineKeepsAnApproversBlock(t *testing.T) {
	ctx := context.Background()
	s := newQuarantineScheduler(t)
	name := worker(3).ShortName()
	if err := dbOf(s).Workers.Put(ctx, &rundb.Worker{WorkerName: name, Blocked: true, Message: "bad network", BlockedBy: "bob", BlockedByApprover: true}); err != nil {
		t.Fatal(err)
	}
	ev := &events{quarantines: []quarantined{{&quarantine.Verdict{Machine: name, Kind: quarantine.BadGames, Count: 9, Trials: 300, Runs: 2}, "worker"}}}
	s.applyQuarantines(ctx, ev)
	w, err := dbOf(s).Workers.Get(ctx, name)
	if err != nil || w.Message != "bad network" || w.Quarantined || w.BlockedBy != "bob" {
		t.Fatalf("record %+v (%v): an approver's block was overwritten", w, err)
	}
}
