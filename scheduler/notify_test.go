package scheduler

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
)

// withOutbox gives s a real outbox over its database, and alice and carol settings that ask
// for every event on one webhook.
func withOutbox(t *testing.T, s *Scheduler) *rundb.DB {
	t.Helper()
	db := dbOf(s)
	for _, u := range []string{"alice", "carol"} {
		ns := &rundb.NotifySettings{Username: u, Events: notify.Kinds,
			Webhooks: []rundb.NotifyWebhook{{URL: "https://hooks.example.org/" + u, Format: notify.FormatJSON}}}
		if err := db.NotifySettings.Put(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	s.cfg.Notifier = notify.NewOutbox(db.NotifySettings, db.Outbox, false)
	return db
}

// outbox is what the outbox holds, one "user kind: message" a line, oldest first.
func outbox(t *testing.T, db *rundb.DB) []string {
	t.Helper()
	es, err := db.Outbox.List(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(es) - 1; i >= 0; i-- {
		out = append(out, es[i].Username+" "+es[i].Kind+": "+es[i].Message)
	}
	return out
}

func TestAFinishedRunQueuesOneNotificationForItsOwner(t *testing.T) {
	s, _ := newTestScheduler(t)
	db := withOutbox(t, s)
	id := addRun(t, s, runSpec{numGames: 1000, approved: true})
	var tasks []TaskReply
	for i := range 3 {
		tasks = append(tasks, request(t, s, worker(i)))
	}
	for i, tk := range tasks {
		n := tk.Task.NumGames / 2
		update(t, s, worker(i), id, tk.TaskID, rundb.Results{Wins: n, Draws: n, Pentanomial: []int{0, 0, 0, n, 0}})
	}
	got := outbox(t, db)
	if len(got) != 1 || !strings.HasPrefix(got[0], "alice finished: Result:accepted Elo:") || !strings.Contains(got[0], "Games:1000") {
		t.Errorf("outbox %q, want one finished notification with the verdict and Elo", got)
	}
}

func TestApprovalsAndStopsQueueNotifications(t *testing.T) {
	s, _ := newTestScheduler(t)
	db := withOutbox(t, s)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 1000})
	if err := s.ApproveRun(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.StopRunByUser(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	// The owner's own stop tells nobody.
	own := addRun(t, s, runSpec{numGames: 1000, approved: true})
	if err := s.StopRunByUser(ctx, own, "alice"); err != nil {
		t.Fatal(err)
	}
	want := []string{"alice approved: approved by bob", "alice stopped: stopped by bob"}
	got := outbox(t, db)
	slices.Sort(got) // the test's clock stands still: the order is the database's
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outbox %q, want %q", got, want)
	}
}

// A quarantine decided on update_task tells the machine's owner once; the event-log line of a
// lift tells nobody.
func TestAQuarantineTellsTheMachinesOwner(t *testing.T) {
	ctx := context.Background()
	s := newQuarantineScheduler(t)
	db := withOutbox(t, s)
	bad := worker(9)
	ns := &rundb.NotifySettings{Username: bad.Username, Events: notify.Kinds,
		Webhooks: []rundb.NotifyWebhook{{URL: "https://hooks.example.org/w", Format: notify.FormatJSON}}}
	if err := db.NotifySettings.Put(ctx, ns); err != nil {
		t.Fatal(err)
	}
	st := pairs(100, 0)
	st.TimeLosses = 7
	for _, prio := range []float64{0, 1} { // 7 time losses in 200 games on each of two runs
		id := addRun(t, s, runSpec{numGames: 100000, approved: true, priority: prio})
		fleetPlayed(s, id)
		task := request(t, s, bad)
		if _, err := s.UpdateTask(ctx, bad, task.RunID, task.TaskID, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := outbox(t, db)
	want := bad.Username + " quarantined: quarantined: 14 time losses and 0 crashes in 400 games on 2 runs"
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Fatalf("outbox %q, want one line starting %q", got, want)
	}
	s.writeActions(ctx, []*rundb.Action{{Action: QuarantineAction, Username: "bob", User: bad.Username,
		Worker: bad.ShortName(), Message: "lifted (a false alarm)"}})
	if after := outbox(t, db); len(after) != 1 {
		t.Errorf("a lift queued a notification: %q", after)
	}
}
