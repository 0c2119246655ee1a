package people_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

func TestUIQuarantine(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	const name = "alice-8cores-q1w2e3r4"
	const reason = "quarantined: 12 time losses and 1 crashes in 420 games on 3 runs, where the rest of the fleet's rates on those runs predict 0.42 (p = 2.1e-14)"
	since := time.Now().Add(-90 * time.Minute).UTC().Truncate(time.Second)
	for _, w := range []*rundb.Worker{
		{WorkerName: name, Blocked: true, Message: reason, BlockedBy: "fishtest.system", BlockedByApprover: true,
			Quarantined: true, QuarantinedSince: since, Quarantines: 2},
		{WorkerName: "alice-4cores-zz11", Quarantines: 1}, // quarantined once, lifted since
	} {
		if err := env.DB.Workers.Put(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	wi := rundb.WorkerInfo{Username: "alice", Concurrency: 8, UniqueKey: "q1w2e3r4-5a28-4b7d-b27b-d78d97ecf11a", RemoteAddr: "10.0.0.1"}
	if wi.ShortName() != name {
		t.Fatalf("worker info names %s", wi.ShortName())
	}
	reply, err := env.Sched.RequestTask(ctx, wi, 16, "http://shoal.test")
	if err != nil || !strings.Contains(reply.Error, "This worker has been blocked!") || !strings.Contains(strings.ReplaceAll(reply.Error, "\n", " "), "quarantined: 12 time losses") {
		t.Fatalf("request_task of the quarantined machine: %+v, %v", reply, err)
	}

	t.Run("its page says why and since when", func(t *testing.T) {
		page := body(env.as("bob").Get("/workers/" + name))
		for _, want := range []string{`<span class="badge red">quarantined</span>`, "since " + since.Format("2006-01-02 15:04 UTC"),
			"quarantined 2 times in all", `<blockquote id="quarantine-reason">` + strings.ReplaceAll(reason, "'", "&#39;"), `name="lift_quarantine"`} {
			if !strings.Contains(page, want) {
				t.Errorf("an approver's page lacks %q", want)
			}
		}
		page = body(env.as("alice").Get("/workers/" + name))
		if !strings.Contains(page, "Only an approver may lift it") || strings.Contains(page, `name="lift_quarantine"`) {
			t.Errorf("the owner's page: want the reason without the lift button")
		}
	})

	t.Run("the blocked list and the repeat offenders", func(t *testing.T) {
		page := body(env.as("bob").Get("/workers/show"))
		if !strings.Contains(page, `<span class="badge red">quarantined</span>`) || !strings.Contains(page, `id="repeat-quarantines"`) ||
			!strings.Contains(page, `<td><a href="/user/alice">alice</a></td>
<td>3</td>
<td>2</td>
<td>1</td>`) {
			t.Errorf("an approver's list lacks the quarantine or alice's 3 quarantines on 2 machines, 1 now:\n%s", page)
		}
		if page := body(env.anon().Get("/workers/show")); strings.Contains(page, "repeat-quarantines") {
			t.Error("the repeat offenders shown to an anonymous visitor")
		}
	})

	// lift is the button's form, new each time: Post adds the session's CSRF token to it.
	lift := func() url.Values { return url.Values{"lift_quarantine": {"1"}} }
	t.Run("bad lifts change nothing", func(t *testing.T) {
		if w := env.as("alice").Post("/workers/"+name, lift()); w.Code != http.StatusForbidden || !strings.Contains(body(w), "Only an approver may lift a quarantine") {
			t.Errorf("the owner's lift: %d", w.Code)
		}
		if _, err := env.DB.Users.Create(ctx, rundb.NewUser{Username: "mallory", Password: uiPassword, Accepted: true}); err != nil {
			t.Fatal(err)
		}
		if w := env.as("mallory").Post("/workers/"+name, lift()); w.Code != http.StatusForbidden {
			t.Errorf("a stranger's lift: %d", w.Code)
		}
		if w := env.as("bob").PostRaw("/workers/"+name, lift()); w.Code != http.StatusForbidden {
			t.Errorf("a lift without the CSRF token: %d", w.Code)
		}
		if w := env.as("bob").Post("/workers/alice-4cores-zz11", lift()); w.Code != http.StatusBadRequest || !strings.Contains(body(w), "is not quarantined") {
			t.Errorf("lifting a lifted quarantine: %d", w.Code)
		}
		if w := env.as("bob").Post("/workers/alice-2cores-none99", lift()); w.Code != http.StatusBadRequest {
			t.Errorf("lifting the quarantine of a machine never seen: %d", w.Code)
		}
		if _, err := env.DB.Workers.Get(ctx, "alice-2cores-none99"); !errors.Is(err, rundb.ErrNotFound) {
			t.Errorf("a refused lift wrote a record: %v", err)
		}
		if w, err := env.DB.Workers.Get(ctx, name); err != nil || !w.Blocked || !w.Quarantined || w.Message != reason {
			t.Errorf("after the refused lifts: %+v, %v", w, err)
		}
		if n, _ := env.DB.Actions.Count(ctx, rundb.ActionQuery{Action: "quarantine"}); n != 0 {
			t.Errorf("%d quarantine actions written by refused lifts", n)
		}
	})

	t.Run("an approver lifts it with one click", func(t *testing.T) {
		w := env.as("bob").Post("/workers/"+name, lift())
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/workers/show" {
			t.Fatalf("lift: %d to %q: %s", w.Code, w.Header().Get("Location"), body(w))
		}
		got, err := env.DB.Workers.Get(ctx, name)
		if err != nil || got.Blocked || got.Quarantined || got.Quarantines != 2 {
			t.Fatalf("after the lift: %+v, %v; want unblocked, still counted twice", got, err)
		}
		acts, err := env.DB.Actions.Query(ctx, rundb.ActionQuery{Action: "quarantine"})
		if err != nil || len(acts) != 1 || acts[0].Username != "bob" || acts[0].Worker != name || !strings.HasPrefix(acts[0].Message, "lifted") {
			t.Errorf("actions %+v, %v: want bob's lifting", acts, err)
		}
		reply, err := env.Sched.RequestTask(ctx, wi, 16, "http://shoal.test")
		if err != nil || reply.Error != "" {
			t.Errorf("request_task after the lift: %+v, %v; want it served (no run needs games: no task, no error)", reply, err)
		}
		if w := env.as("bob").Post("/workers/"+name, lift()); w.Code != http.StatusBadRequest {
			t.Errorf("a second lift: %d, want 400", w.Code)
		}
	})
}
