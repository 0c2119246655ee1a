package notify

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// loopback lets the tests' receivers, which listen on loopback, be reached.
var loopback = Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// clock is a settable time for senders.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// setup opens a database and saves alice's settings: every event, to the given webhooks.
func setup(t *testing.T, email string, hooks ...rundb.NotifyWebhook) (*rundb.DB, *Outbox) {
	t.Helper()
	db := rundbtest.Open(t)
	ns := &rundb.NotifySettings{Username: "alice", Webhooks: hooks, Email: email, Events: Kinds}
	if err := db.NotifySettings.Put(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return db, NewOutbox(db.NotifySettings, db.Outbox, email != "")
}

func finished() Event {
	return Event{Kind: KindFinished, Username: "alice", RunID: "0123456789abcdef01234567", Run: "master vs patch",
		Message: "Result:accepted Elo:2.10[0.50,3.70] LOS:99% Games:1000", Time: time.Now()}
}

func entries(t *testing.T, db *rundb.DB) []rundb.OutboxEntry {
	t.Helper()
	es, err := db.Outbox.List(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestWebhooksGetEachPayloadShape(t *testing.T) {
	r := newReceiver(t)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL + "/json", Format: FormatJSON},
		rundb.NotifyWebhook{URL: r.srv.URL + "/discord", Format: FormatDiscord},
		rundb.NotifyWebhook{URL: r.srv.URL + "/slack", Format: FormatSlack})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := NewSender(db.Outbox, SenderConfig{Name: "a", Policy: loopback, Metrics: metrics.New(reg)})
	if err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got := r.received()
	if len(got) != 3 {
		t.Fatalf("received %d payloads, want 3: %v", len(got), got)
	}
	var sawJSON, sawDiscord, sawSlack bool
	for _, p := range got {
		switch {
		case p["event"] == KindFinished && strings.Contains(p["message"].(string), "Elo:2.10") && p["run"] == "master vs patch":
			sawJSON = true
		case p["content"] != nil && strings.Contains(p["content"].(string), "Result:accepted"):
			sawDiscord = true
		case p["text"] != nil && p["event"] == nil && strings.Contains(p["text"].(string), "Test finished"):
			sawSlack = true
		}
	}
	if !sawJSON || !sawDiscord || !sawSlack {
		t.Errorf("payloads %v: json %v, discord %v, slack %v", got, sawJSON, sawDiscord, sawSlack)
	}
	for _, e := range entries(t, db) {
		if e.State != rundb.OutboxSent {
			t.Errorf("entry %s is %s, want sent", e.Target, e.State)
		}
	}
	if n := testutil.ToFloat64(metricsCounter(t, reg, "webhook", "sent")); n != 3 {
		t.Errorf("shoal_notifications_total{webhook,sent} = %v, want 3", n)
	}
}

// metricsCounter finds the counter of one channel and result.
func metricsCounter(t *testing.T, reg *prometheus.Registry, channel, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shoal_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["channel"] == channel && labels["result"] == result {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no shoal_notifications_total{%s,%s}", channel, result)
	return nil
}

func TestUnchosenEventsAndUsersWithoutSettingsGetNothing(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	ns := &rundb.NotifySettings{Username: "alice", Webhooks: []rundb.NotifyWebhook{{URL: "https://example.org/h", Format: FormatJSON}},
		Events: []string{KindApproved}}
	if err := db.NotifySettings.Put(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ob := NewOutbox(db.NotifySettings, db.Outbox, false)
	for _, ev := range []Event{finished(), {Kind: KindApproved, Username: "bob"}} {
		if err := ob.Enqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if es := entries(t, db); len(es) != 0 {
		t.Errorf("outbox holds %d entries, want none", len(es))
	}
}

func TestFailedDeliveryIsRetriedAndArrivesAfterARestart(t *testing.T) {
	r := newReceiver(t)
	r.fail.Store(true)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatJSON})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	first := NewSender(db.Outbox, SenderConfig{Name: "first", Policy: loopback, Now: clk.now, Backoff: time.Minute})
	if err := first.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	es := entries(t, db)
	if len(es) != 1 || es[0].State != rundb.OutboxPending || es[0].Attempts != 1 || !strings.Contains(es[0].LastError, "500") {
		t.Fatalf("after a failed attempt: %+v, want pending after 1 attempt with the 500", es)
	}
	// Not due yet: a pass before the backoff tries nothing.
	if err := first.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, db); es[0].Attempts != 1 {
		t.Fatalf("retried before its backoff: %d attempts", es[0].Attempts)
	}
	// The instance stops; the receiver recovers; a new instance's sender on the same database
	// delivers once the backoff has passed.
	first = nil
	r.fail.Store(false)
	clk.add(time.Minute + time.Second)
	second := NewSender(db.Outbox, SenderConfig{Name: "second", Policy: loopback, Now: clk.now, Backoff: time.Minute})
	if err := second.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.received(); len(got) != 1 {
		t.Fatalf("received %d, want 1", len(got))
	}
	if es := entries(t, db); es[0].State != rundb.OutboxSent || es[0].Attempts != 2 {
		t.Errorf("after the restart: %+v, want sent after 2 attempts", es[0])
	}
}

func TestDeliveryGivesUpAfterItsLastAttemptAndStaysVisible(t *testing.T) {
	r := newReceiver(t)
	r.fail.Store(true)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatSlack})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	s := NewSender(db.Outbox, SenderConfig{Policy: loopback, Now: clk.now, MaxAttempts: 3, Backoff: time.Second, MaxBackoff: 3 * time.Second})
	var waits []time.Duration
	for range 5 {
		before := entries(t, db)[0]
		if err := s.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		after := entries(t, db)[0]
		if after.State == rundb.OutboxPending && after.Attempts > before.Attempts {
			waits = append(waits, after.NextAt.Sub(clk.now()).Round(time.Second))
		}
		clk.add(time.Hour)
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; len(waits) != 2 || waits[0] != want[0] || waits[1] != want[1] {
		t.Errorf("backoffs %v, want %v", waits, want)
	}
	failed, err := db.Outbox.List(ctx, rundb.OutboxFailed, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Attempts != 3 || !strings.Contains(failed[0].LastError, "500") {
		t.Fatalf("failed entries %+v, want one after 3 attempts with its error", failed)
	}
	counts, err := db.Outbox.Counts(ctx)
	if err != nil || counts.Failed != 1 || counts.Pending != 0 {
		t.Errorf("counts %+v, %v", counts, err)
	}
	if n := len(r.received()); n != 0 {
		t.Errorf("received %d", n)
	}
}

func TestTwoSendersDeliverEachMessageOnce(t *testing.T) {
	r := newReceiver(t)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatJSON})
	ctx := context.Background()
	const events = 30
	for i := range events {
		ev := finished()
		ev.RunID = strings.Repeat("0", 22) + string(rune('a'+i/10)) + string(rune('0'+i%10))
		if err := ob.Enqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, name := range []string{"one", "two"} {
		s := NewSender(db.Outbox, SenderConfig{Name: name, Policy: loopback})
		wg.Go(func() {
			for range 3 {
				if err := s.Pass(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, p := range r.received() {
		seen[p["run_id"].(string)]++
	}
	if len(seen) != events {
		t.Errorf("%d distinct messages arrived, want %d", len(seen), events)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message of %s arrived %d times", id, n)
		}
	}
}

func TestSecurityWebhookOnLoopbackRefusedBeforeConnecting(t *testing.T) {
	r := newReceiver(t)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatJSON},
		rundb.NotifyWebhook{URL: strings.Replace(r.srv.URL, "127.0.0.1", "localhost", 1), Format: FormatJSON})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	s := NewSender(db.Outbox, SenderConfig{})
	var mu sync.Mutex
	var refused []string
	s.seen = func(address string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, ErrForbiddenAddress) {
			refused = append(refused, address)
		}
	}
	if err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := r.conns.Load(); n != 0 {
		t.Errorf("the receiver accepted %d connections; the default policy must refuse loopback before connecting", n)
	}
	if len(refused) < 2 {
		t.Errorf("refused dials %v, want the address and the name resolving to loopback", refused)
	}
	for _, e := range entries(t, db) {
		if e.State != rundb.OutboxPending || !strings.Contains(e.LastError, "not a public address") {
			t.Errorf("entry %s: %s %q, want pending with the refusal", e.Target, e.State, e.LastError)
		}
	}
}

func TestSecurityWebhookOnPrivateAddressRefusedBeforeAnyConnection(t *testing.T) {
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: "http://10.1.2.3:8080/hook", Format: FormatJSON},
		rundb.NotifyWebhook{URL: "http://[fd00::1]/hook", Format: FormatJSON},
		rundb.NotifyWebhook{URL: "https://169.254.169.254/latest/meta-data", Format: FormatJSON})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	s := NewSender(db.Outbox, SenderConfig{Timeout: 30 * time.Second})
	var mu sync.Mutex
	attempts := map[string]error{}
	s.seen = func(address string, err error) {
		mu.Lock()
		defer mu.Unlock()
		attempts[address] = err
	}
	start := time.Now()
	if err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	// A connection attempt to an unrouted private address would hang until the timeout.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the dials were attempted", d)
	}
	for _, a := range []string{"10.1.2.3:8080", "[fd00::1]:80", "169.254.169.254:443"} {
		if err, ok := attempts[a]; !ok || !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("dial of %s: recorded %v (%v), want refused by the policy", a, err, ok)
		}
	}
}

func TestPolicy(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"93.184.216.34", true}, {"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false}, {"127.8.9.10", false}, {"::1", false}, {"10.0.0.1", false},
		{"172.16.5.4", false}, {"172.31.255.255", false}, {"192.168.1.1", false}, {"169.254.169.254", false},
		{"fc00::1", false}, {"fd12::1", false}, {"fe80::1", false}, {"0.0.0.0", false}, {"::", false},
		{"224.0.0.1", false}, {"ff02::1", false}, {"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false},
		{"100.64.0.1", false}, {"255.255.255.255", false}, {"64:ff9b::a00:1", false},
	} {
		if got := (Policy{}).Permits(netip.MustParseAddr(c.addr)); got != c.ok {
			t.Errorf("Permits(%s) = %v, want %v", c.addr, got, c.ok)
		}
	}
	if !loopback.Permits(netip.MustParseAddr("127.0.0.1")) {
		t.Error("an allowed network is refused")
	}
	if err := (Policy{}).check("udp", "93.184.216.34:53"); err == nil {
		t.Error("udp allowed")
	}
}

func TestSecurityWebhookRedirectsAreNotFollowed(t *testing.T) {
	target := newReceiver(t)
	redirector := httptest.NewServer(http.RedirectHandler(target.srv.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirector.Close)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: redirector.URL, Format: FormatJSON})
	ctx := context.Background()
	if err := ob.Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	if err := NewSender(db.Outbox, SenderConfig{Policy: loopback}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := target.conns.Load(); n != 0 {
		t.Errorf("the redirect's target got %d connections", n)
	}
	if e := entries(t, db)[0]; e.State != rundb.OutboxPending || !strings.Contains(e.LastError, "redirect") {
		t.Errorf("entry %s %q, want pending with a redirect error", e.State, e.LastError)
	}
}

func TestSecurityEmailGoesThroughTheOperatorsSMTPServerWithoutInjectedHeaders(t *testing.T) {
	mail := newFakeSMTP(t)
	db, ob := setup(t, "alice@example.org")
	ctx := context.Background()
	ev := finished()
	ev.Run = "evil\r\nBcc: victim@example.org"
	if err := ob.Enqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	smtp := &SMTP{Host: "127.0.0.1", Port: mail.port(), From: "shoal@example.org"}
	if err := NewSender(db.Outbox, SenderConfig{SMTP: smtp}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := mail.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d mails, want 1 (outbox: %+v)", len(msgs), entries(t, db))
	}
	m := msgs[0]
	if !strings.Contains(m.to, "alice@example.org") || !strings.Contains(m.from, "shoal@example.org") {
		t.Errorf("envelope from %q to %q", m.from, m.to)
	}
	if !strings.Contains(m.data, "Subject: [Shoal] Test finished") || !strings.Contains(m.data, "Elo:2.10") {
		t.Errorf("message:\n%s", m.data)
	}
	if strings.Contains(m.data, "\nBcc:") {
		t.Errorf("a run's label added a header:\n%s", m.data)
	}
	if e := entries(t, db)[0]; e.State != rundb.OutboxSent || e.Channel != ChannelEmail {
		t.Errorf("entry %+v", e)
	}
}

func TestNoEmailWithoutSMTP(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	if err := db.NotifySettings.Put(ctx, &rundb.NotifySettings{Username: "alice", Email: "alice@example.org", Events: Kinds}); err != nil {
		t.Fatal(err)
	}
	if err := NewOutbox(db.NotifySettings, db.Outbox, false).Enqueue(ctx, finished()); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, db); len(es) != 0 {
		t.Errorf("%d entries queued without SMTP", len(es))
	}
}

func TestOldEntriesArePruned(t *testing.T) {
	r := newReceiver(t)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatJSON})
	ctx := context.Background()
	for range 2 {
		if err := ob.Enqueue(ctx, finished()); err != nil {
			t.Fatal(err)
		}
	}
	clk := &clock{t: time.Now()}
	s := NewSender(db.Outbox, SenderConfig{Policy: loopback, Now: clk.now, Retention: 24 * time.Hour})
	if err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, finished()); err != nil { // pending: never pruned
		t.Fatal(err)
	}
	clk.add(25 * time.Hour)
	if err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	es := entries(t, db)
	if len(es) != 1 || es[0].State != rundb.OutboxPending {
		t.Errorf("after pruning: %+v, want only the pending entry", es)
	}
}

func TestQuarantinedTellsTheMachinesOwner(t *testing.T) {
	r := newReceiver(t)
	db, ob := setup(t, "", rundb.NotifyWebhook{URL: r.srv.URL, Format: FormatDiscord})
	ctx := context.Background()
	ev := Event{Kind: KindQuarantined, Username: "alice", Worker: "alice-8cores-abcd",
		Message: "quarantined: 40 time losses in 400 games", Time: time.Now()}
	if err := ob.Enqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := NewSender(db.Outbox, SenderConfig{Policy: loopback}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got := r.received()
	if len(got) != 1 || !strings.Contains(got[0]["content"].(string), "Machine quarantined: alice-8cores-abcd - quarantined: 40 time losses") {
		t.Errorf("received %v", got)
	}
}

func TestCheckRefusesBadSettings(t *testing.T) {
	hook := func(u string) rundb.NotifyWebhook { return rundb.NotifyWebhook{URL: u, Format: FormatJSON} }
	many := make([]rundb.NotifyWebhook, MaxWebhooks+1)
	for i := range many {
		many[i] = hook("https://example.org/h")
	}
	for _, c := range []struct {
		name string
		ns   rundb.NotifySettings
		smtp bool
		want string
	}{
		{"a non-http URL", rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{hook("ftp://example.org/h")}}, false, "only http"},
		{"a file URL", rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{hook("file:///etc/passwd")}}, false, "only http"},
		{"too many webhooks", rundb.NotifySettings{Webhooks: many}, false, "at most 5"},
		{"a URL with credentials", rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{hook("https://u:p@example.org/h")}}, false, "credentials"},
		{"a URL without a host", rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{hook("https:///h")}}, false, "no host"},
		{"an unknown payload", rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{{URL: "https://example.org", Format: "xml"}}}, false, "unknown payload"},
		{"e-mail without SMTP", rundb.NotifySettings{Email: "a@example.org"}, false, "no mail settings"},
		{"a bad e-mail address", rundb.NotifySettings{Email: "Alice <a@example.org>"}, true, "not an e-mail address"},
		{"an unknown event", rundb.NotifySettings{Events: []string{"exploded"}}, false, "unknown event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Check(c.ns, c.smtp)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check: %v, want an error containing %q", err, c.want)
			}
		})
	}
	got, err := Check(rundb.NotifySettings{Webhooks: []rundb.NotifyWebhook{hook(" https://example.org/h ")},
		Email: "a@example.org", Events: []string{KindStopped, KindFinished}}, true)
	if err != nil || got.Webhooks[0].URL != "https://example.org/h" || got.Events[0] != KindFinished {
		t.Errorf("good settings: %+v, %v", got, err)
	}
}
