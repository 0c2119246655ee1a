//go:build !race

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	mongooptions "go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// takeoverLimit is the bound on the worker API's outage when the primary dies, with the
// default lease (10 s).
const takeoverLimit = 15 * time.Second

// runDocs reads every run document as stored, by id.
func runDocs(t *testing.T, coll *mongo.Collection) map[string]bson.Raw {
	t.Helper()
	cur, err := coll.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bson.Raw{}
	for cur.Next(context.Background()) {
		id := cur.Current.Lookup("_id").String()
		out[id] = append(bson.Raw(nil), cur.Current...)
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// journalRecords counts the records of epoch in the journal's segments.
func journalRecords(t *testing.T, jdb *mongo.Database, epoch int64) int64 {
	t.Helper()
	names, err := jdb.ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, name := range names {
		if strings.HasPrefix(name, fmt.Sprintf("journal_%d_", epoch)) {
			c, err := jdb.Collection(name).CountDocuments(context.Background(), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
	}
	return n
}

// workerAPIAnswers reports whether a worker call through base gets a JSON answer from a primary
// (request_version, with the fleet's account).
func workerAPIAnswers(base string, u demo.Users) bool {
	body := fmt.Sprintf(`{"password": %q, "worker_info": {"username": %q}}`, u.Workers.Password, u.Workers.Name)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Post(base+"/api/request_version", "application/json", strings.NewReader(body))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("X-Shoal-Instance"), "primary@")
}

// `shoal db`, and a primary and a standby on it, nginx in front, a fleet working through it.
// SIGKILL of the primary mid-fleet: the standby serves the worker API within 15 s, the fleet
// finishes its runs, the exactly-once check holds and no task was held by two workers. The
// old primary, restarted, joins as a standby. Then the new primary is frozen (SIGSTOP) with
// changes not yet written; the old one takes over; the frozen one, resumed, writes nothing:
// no run document of its epoch changes and its journal gains no record.
func TestE2EStandbyTakesOverFromADeadPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	exe := findNginx(t)
	started := time.Now()
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ctx := context.Background()

	// The database outlives every instance: `shoal db`, a process of its own.
	_, uri, _ := startBinaryUntil(t, bin, dir, dbReadyLine, nil, "db", "--data", filepath.Join(dir, "db"), "--addr", "127.0.0.1:0")
	db, err := rundb.Open(ctx, rundb.Options{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	const workers = 200
	users, err := demo.CreateUsers(ctx, db, 2*workers)
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(mongooptions.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	runsColl := client.Database(rundb.DefaultDatabase).Collection("runs")
	journalDB := client.Database(rundb.JournalDatabase(rundb.DefaultDatabase))

	// One run is written behind per second: what the runs' documents lack at a takeover comes
	// from the journal, and a frozen primary has a write due the moment it resumes. Default
	// lease (10 s).
	env := e2eServeEnv(data, "SHOAL_MONGO_URI="+uri, "SHOAL_FLUSH_PERIOD=1s", "SHOAL_DEAD_TASK_TIMEOUT=120s")
	primaryAddr, standbyAddr, secondaryAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	first := startShoal(t, bin, dir, primaryAddr, append(env, "SHOAL_ROLE=primary"))
	second := startShoal(t, bin, dir, standbyAddr, append(env, "SHOAL_ROLE=standby"))
	startShoal(t, bin, dir, secondaryAddr, append(env, "SHOAL_ROLE=secondary"))
	ngx := startNginx(t, exe, nginxPorts{primary: primaryAddr, standby: standbyAddr, secondary1: secondaryAddr,
		secondary2: secondaryAddr, nnDir: filepath.Join(dir, "nn")})

	var ids []string
	for i := range 4 {
		req := demo.RunRequest(fmt.Sprintf("failover test %d", i))
		req.NumGames = 3000
		id, err := demo.SubmitRun(ctx, ngx.base, users, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	var progress lockedBuffer
	bg := startFleet(fleet.Options{ServerURL: ngx.base, Username: users.Workers.Name,
		Password: users.Workers.Password, Workers: workers, Concurrency: 1, TimeScale: e2eScale,
		Arrival: fleet.Ramp, Ramp: 2 * time.Second, Elo: 2, DrawRatio: 0.6, Seed: 41,
		Progress: &progress, ProgressPeriod: 100 * time.Millisecond, UntilFinished: ids,
		Duration: 3 * time.Minute,
		// Five attempts 5 s apart outlast a takeover, as fishtest's worker's retries do.
		RetryDelay: 5 * time.Second, StopGrace: 20 * time.Second})
	defer bg.stop()
	var rep *fleet.Report
	logFleetOnFailure(t, &rep, &progress)
	accepted := func() int { return progressCount(t, &progress, "games") }

	// 1. The primary dies mid-fleet.
	waitFor(t, 60*time.Second, "4000 games accepted", func() bool { return accepted() >= 4000 })
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-first.exited
	atKill := accepted()
	waitFor(t, 30*time.Second, "the worker API served again through nginx", func() bool {
		return workerAPIAnswers(ngx.base, users)
	})
	takeover := time.Since(killed)
	if takeover > takeoverLimit {
		t.Errorf("the worker API was served again %v after the primary died, want within %v", takeover.Round(time.Millisecond), takeoverLimit)
	}
	waitRole(t, "http://"+standbyAddr, "primary", time.Second)

	// 2. The fleet finishes on the new primary.
	rep = bg.wait(t, 3*time.Minute)
	if rep.StoppedBecause != "runs finished" || !rep.ExactlyOnce || len(rep.Runs) != len(ids) || rep.SharedTasks != 0 {
		t.Errorf("fleet stopped because %q; exactly-once %v over %d runs (want %d); tasks held by two workers %d",
			rep.StoppedBecause, rep.ExactlyOnce, len(rep.Runs), len(ids), rep.SharedTasks)
	}
	if len(rep.WorkerExitErrors) != 0 || rep.BadReplies != 0 {
		t.Errorf("workers quit with %v, %d bad replies; want every worker to carry on across the takeover", rep.WorkerExitErrors, rep.BadReplies)
	}

	// 3. The old primary, restarted as it was, finds a live lease and waits as a standby.
	first = startShoal(t, bin, dir, primaryAddr, append(env, "SHOAL_ROLE=primary"))
	waitRole(t, "http://"+primaryAddr, "standby", 10*time.Second)
	if !strings.Contains(first.out.String(), "serving as a standby") {
		t.Errorf("the restarted primary does not say it serves as a standby:\n%s", first.out)
	}

	// 4. The new primary freezes with changes only in its journal: a run played for a moment.
	req := demo.RunRequest("frozen primary")
	req.NumGames = 100_000
	id, err := demo.SubmitRun(ctx, "http://"+standbyAddr, users, req)
	if err != nil {
		t.Fatal(err)
	}
	var smallProgress lockedBuffer
	small := startFleet(fleet.Options{ServerURL: "http://" + standbyAddr, Username: users.Workers.Name,
		Password: users.Workers.Password, Workers: 10, Concurrency: 1, TimeScale: e2eScale, Seed: 42,
		Duration: time.Minute, StopGrace: time.Second, HTTPTimeout: 2 * time.Second,
		Progress: &smallProgress, ProgressPeriod: 50 * time.Millisecond})
	defer small.stop()
	lease, err := journal.ReadLease(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	frozenEpoch := lease.Epoch
	time.Sleep(3 * time.Second) // results acknowledged
	if err := second.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the last progress line is out
	ackedFrozen := progressCount(t, &smallProgress, "games")
	// The small fleet keeps calling the frozen primary: its calls wait in the kernel's queues
	// and reach it when it resumes, with its overdue run write.
	waitRole(t, "http://"+primaryAddr, "primary", 30*time.Second)
	before := runDocs(t, runsColl)
	recordsBefore := journalRecords(t, journalDB, frozenEpoch)
	if err := second.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the resumed primary stepping down", func() bool {
		return strings.Contains(second.out.String(), "stepping down")
	})
	waitRole(t, "http://"+standbyAddr, "standby", 10*time.Second)
	time.Sleep(2 * time.Second) // anything it would still write
	small.stop()
	<-small.done
	after := runDocs(t, runsColl)
	for rid, doc := range after {
		if bytes.Equal(doc, before[rid]) {
			continue
		}
		if e, ok := doc.Lookup("journal_epoch").AsInt64OK(); !ok || e <= frozenEpoch {
			t.Errorf("run %s was written after the takeover with journal_epoch %v: the resumed primary (epoch %d) wrote it",
				rid, doc.Lookup("journal_epoch"), frozenEpoch)
		}
	}
	if n := journalRecords(t, journalDB, frozenEpoch); n > recordsBefore {
		t.Errorf("the resumed primary's journal (epoch %d) went from %d to %d records after the takeover", frozenEpoch, recordsBefore, n)
	}
	// What it had acknowledged before it froze is the new primary's: its journal was replayed.
	var played e2eRun
	if code := getJSONURL(t, "http://"+primaryAddr+"/api/get_run/"+id, &played); code != http.StatusOK {
		t.Fatalf("get_run %s from the new primary: %d", id, code)
	}
	if g := games(played.Results); ackedFrozen == 0 || g < ackedFrozen {
		t.Errorf("the frozen primary acknowledged %d games of run %s; the new primary has %d", ackedFrozen, id, g)
	}
	r, err := db.Runs.Get(ctx, mustID(t, id))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("takeover after SIGKILL: worker API served again through nginx %v after the kill (%d games acknowledged by then); fleet %d games, exactly-once %v, %d updates in doubt, tasks ended %v; frozen primary epoch %d acknowledged %d games, the new primary has %d (its document %d); test took %v",
		takeover.Round(time.Millisecond), atKill, rep.GamesReported, rep.ExactlyOnce, rep.UpdatesInDoubt, rep.TasksEnded,
		frozenEpoch, ackedFrozen, games(played.Results), r.Results.Wins+r.Results.Losses+r.Results.Draws, time.Since(started).Round(100*time.Millisecond))
}

func mustID(t *testing.T, hex string) rundb.ObjectID {
	t.Helper()
	id, err := rundb.ParseObjectID(hex)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
