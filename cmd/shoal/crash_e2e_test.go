//go:build !race

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// crashRuns and crashWorkers are the crash test's fleet: 400 workers on 20 runs.
const (
	crashRuns    = 20
	crashWorkers = 400
)

// storedGamesOf starts a server on a private address (no worker reaches it), sums the games of
// runs as it reports them after its start-up (the journal replayed), and stops it gracefully.
func storedGamesOf(t *testing.T, bin, dir string, env []string, runs []string) int {
	t.Helper()
	addr := freeAddr(t)
	p := startShoal(t, bin, dir, addr, env)
	// Another instance than the one that crashed: it waits, as a standby, for the crashed
	// one's lease to lapse, then takes over as a new primary would.
	waitRole(t, "http://"+addr, "primary", 30*time.Second)
	total := 0
	for _, id := range runs {
		resp, err := http.Get("http://" + addr + "/api/get_run/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var run struct {
			Results struct{ Wins, Losses, Draws int } `json:"results"`
		}
		err = json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("get_run %s: %d %v", id, resp.StatusCode, err)
		}
		total += run.Results.Wins + run.Results.Losses + run.Results.Draws
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("the checking server exited with %v", err)
	}
	return total
}

// waitRole waits until the instance at base says (on /readyz) it has role.
func waitRole(t *testing.T, base, role string, within time.Duration) {
	t.Helper()
	waitFor(t, within, base+" serving as the "+role, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ready struct{ Role string }
		return json.NewDecoder(resp.Body).Decode(&ready) == nil && ready.Role == role
	})
}

// killed reports whether a process ended by SIGKILL.
func killed(p *shoalProc) bool {
	return p.cmd.ProcessState != nil && strings.Contains(p.cmd.ProcessState.String(), "killed")
}

// SIGKILL at three moments of a fleet of 400 workers on 20 runs: while it plays, in the middle
// of a run write, and just after a restart while the workers come back. After each crash the
// runs hold at least every game the fleet was told was accepted (more only by updates whose
// reply the crash swallowed); at the end the fleet's exactly-once check passes on every run, no
// task was held by two workers, and the database holds exactly what the fleet counted.
func TestE2ECrashLosesNoAcknowledgedGames(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	start := time.Now()
	bin := buildBinary(t, "faultinject") // the only build that reads node.CrashInWriteEnv
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	users := addUsers(t, bin, data, 2*crashWorkers)
	addr := freeAddr(t)
	base := "http://" + addr
	// Runs are written behind often, so crashes find them at every stage of being written.
	// A short lease: the server that checks each crash's runs takes over from the crashed one
	// in 2 s (the crashed one restarted takes its own lease back at once).
	env := e2eServeEnv(data, "SHOAL_FLUSH_PERIOD=50ms", "SHOAL_DEAD_TASK_TIMEOUT=60s", "SHOAL_LEASE_TTL=2s")
	srv := startShoal(t, bin, dir, addr, env)

	var ids []string
	for i := range crashRuns {
		req := demo.RunRequest(fmt.Sprintf("crash test %d", i))
		req.NumGames = 400_000 // far more than the test plays
		id, err := demo.SubmitRun(context.Background(), base, users, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	var progress lockedBuffer
	bg := startFleet(fleet.Options{ServerURL: base, Username: users.Workers.Name,
		Password: users.Workers.Password, Workers: crashWorkers, Concurrency: 1, TimeScale: e2eScale,
		Arrival: fleet.Ramp, Ramp: 2 * time.Second, Elo: 2, DrawRatio: 0.6, Seed: 31,
		Progress: &progress, ProgressPeriod: 100 * time.Millisecond,
		// Retries 3 s apart span a restart, as fishtest's worker's minute spans a real one.
		RetryDelay: 3 * time.Second, StopGrace: 15 * time.Second, UntilFinished: ids})
	defer bg.stop()
	var rep *fleet.Report
	logFleetOnFailure(t, &rep, &progress)
	accepted := func() int { return progressCount(t, &progress, "games") }
	// afterCrash checks that a crashed server's runs hold every acknowledged game.
	afterCrash := func(moment string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // the last progress line is out
		acked := accepted()
		stored := storedGamesOf(t, bin, dir, env, ids)
		if stored < acked {
			t.Errorf("%s: the runs hold %d games, the fleet was told %d were accepted: %d lost",
				moment, stored, acked, acked-stored)
		}
		t.Logf("%s: %d games acknowledged, %d stored after the restart", moment, acked, stored)
	}

	// 1. A crash while the fleet plays.
	waitFor(t, 60*time.Second, "3000 games accepted", func() bool { return accepted() >= 3000 })
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv.exited
	afterCrash("SIGKILL while playing")

	// 2. A crash in the middle of a run write: the server kills itself as its 40th write goes
	// to the database, by then with the workers back.
	srv = startShoal(t, bin, dir, addr, append(env, node.CrashInWriteEnv+"=40"))
	select {
	case <-srv.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not crash in its 40th run write within 60 s")
	}
	if !killed(srv) || !strings.Contains(srv.out.String(), "fault injection") {
		t.Fatalf("the server ended with %v, want SIGKILL by its fault injection:\n%s", srv.err, srv.out)
	}
	afterCrash("SIGKILL during a run write")

	// 3. A crash just after a restart, while the workers retry what the last crash cut off.
	srv = startShoal(t, bin, dir, addr, env)
	before := accepted()
	waitFor(t, 60*time.Second, "the workers back", func() bool { return accepted() >= before+200 })
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv.exited
	afterCrash("SIGKILL as the workers came back")

	srv = startShoal(t, bin, dir, addr, env)
	before = accepted()
	waitFor(t, 60*time.Second, "2000 more games after the last restart", func() bool { return accepted() >= before+2000 })
	bg.stop()
	rep = bg.wait(t, 60*time.Second)

	if len(rep.Runs) != crashRuns || !rep.ExactlyOnce || rep.SharedTasks != 0 {
		t.Errorf("exactly-once check %v over %d runs (want %d), tasks held by two workers %d",
			rep.ExactlyOnce, len(rep.Runs), crashRuns, rep.SharedTasks)
	}
	if len(rep.WorkerExitErrors) != 0 || rep.BadReplies != 0 {
		t.Errorf("workers quit with %v, %d bad replies; want every worker to carry on", rep.WorkerExitErrors, rep.BadReplies)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.wait(t, 30*time.Second); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0", err)
	}
	db := openStopped(t, data)
	// The database holds what the server answered at the fleet's end, which the exactly-once
	// check above found to be every acknowledged game and no more than the updates that got no
	// reply (a crash between storing one and answering it) add.
	for _, rr := range rep.Runs {
		results, tasks := storedRun(t, db, rr.RunID)
		if rr.ServerResults == nil || results != *rr.ServerResults || tasks != results {
			t.Errorf("run %s: the database holds %+v (its tasks %+v), the server answered %+v at the end; the fleet had %+v accepted",
				rr.RunID, results, tasks, rr.ServerResults, rr.FleetResults)
		}
	}
	replayed := strings.Count(srv.out.String(), "journal replayed")
	t.Logf("games accepted in all %d; updates in doubt %d; tasks ended %v; HTTP errors %v, transport errors %d; replays logged by the last server %d; test took %v",
		rep.GamesReported, rep.UpdatesInDoubt, rep.TasksEnded, rep.HTTPErrors, rep.TransportErrors, replayed,
		time.Since(start).Round(100*time.Millisecond))
}
