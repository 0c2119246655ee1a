package people_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
)

// savedNotify is what the database holds of username's notification settings (nil: none).
func (e *uiEnv) savedNotify(username string) *rundb.NotifySettings {
	e.T.Helper()
	ns, err := e.DB.NotifySettings.Get(context.Background(), username)
	if err != nil {
		return nil
	}
	ns.Updated = time.Time{}
	return ns
}

func TestUINotificationSettingsAreSaved(t *testing.T) {
	env := newUIEnv(t)
	if w := env.anon().Get("/notifications"); w.Code != http.StatusSeeOther {
		t.Errorf("anonymous: %d, want the login page", w.Code)
	}
	alice := env.as("alice")
	page := body(alice.Get("/notifications"))
	if !strings.Contains(page, "Tell me when") || strings.Contains(page, `name="email"`) {
		t.Errorf("the page without a mail server: %s", page)
	}
	if !strings.Contains(body(alice.Get("/user")), `href="/notifications"`) {
		t.Error("the profile does not lead to the notifications")
	}
	w := alice.Post("/notifications", url.Values{
		"event":          {"finished", "stopped"},
		"webhook_url":    {"https://discord.example.org/api/webhooks/1", "", "https://hooks.example.org/x"},
		"webhook_format": {"discord", "json", "slack"},
	})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("saving: %d\n%s", w.Code, body(w))
	}
	want := &rundb.NotifySettings{Username: "alice", Events: []string{"finished", "stopped"},
		Webhooks: []rundb.NotifyWebhook{{URL: "https://discord.example.org/api/webhooks/1", Format: "discord"},
			{URL: "https://hooks.example.org/x", Format: "slack"}}}
	if got := env.savedNotify("alice"); !reflect.DeepEqual(got, want) {
		t.Errorf("saved %+v, want %+v", got, want)
	}
	page = body(alice.Get("/notifications"))
	if !strings.Contains(page, `value="https://hooks.example.org/x"`) || !strings.Contains(page, `value="finished" checked`) {
		t.Errorf("the page does not show the saved settings:\n%s", page)
	}
}

func TestUINotificationSettingsRefuseBadInputAndChangeNothing(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	good := url.Values{"event": {"finished"}, "webhook_url": {"https://hooks.example.org/ok"}, "webhook_format": {"json"}}
	if w := alice.Post("/notifications", good); w.Code != http.StatusSeeOther {
		t.Fatalf("saving: %d", w.Code)
	}
	before := env.savedNotify("alice")
	six := make([]string, 6)
	for i := range six {
		six[i] = "https://hooks.example.org/" + string(rune('a'+i))
	}
	for _, c := range []struct {
		name string
		form url.Values
		want string
	}{
		{"a non-http URL", url.Values{"webhook_url": {"ftp://hooks.example.org/x"}}, "only http:// and https://"},
		{"a javascript URL", url.Values{"webhook_url": {"javascript:alert(1)"}}, "only http:// and https://"},
		{"too many webhooks", url.Values{"webhook_url": six}, "at most 5 webhooks"},
		{"a URL with credentials", url.Values{"webhook_url": {"https://user:pass@hooks.example.org/x"}}, "put no credentials in the URL"},
		{"an unknown payload", url.Values{"webhook_url": {"https://hooks.example.org/x"}, "webhook_format": {"xml"}}, "unknown payload"},
		{"e-mail without a mail server", url.Values{"email": {"alice@example.org"}}, "no mail settings"},
		{"an unknown event", url.Values{"event": {"exploded"}}, "unknown event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := alice.Post("/notifications", c.form)
			if w.Code != http.StatusBadRequest {
				t.Errorf("%d, want 400", w.Code)
			}
			if b := html.UnescapeString(body(w)); !strings.Contains(b, "Nothing was saved") || !strings.Contains(b, c.want) {
				t.Errorf("the page does not say %q:\n%s", c.want, b)
			}
			if got := env.savedNotify("alice"); !reflect.DeepEqual(got, before) {
				t.Errorf("saved %+v, want unchanged %+v", got, before)
			}
		})
	}
}

func TestUINotificationEmailWithAMailServer(t *testing.T) {
	env := newUIEnvWith(t, func(d *server.Deps) { d.NotifyEmail = true })
	alice := env.as("alice")
	if !strings.Contains(body(alice.Get("/notifications")), `name="email"`) {
		t.Error("no e-mail field with a mail server")
	}
	if w := alice.Post("/notifications", url.Values{"email": {"Alice <alice@example.org>"}}); w.Code != http.StatusBadRequest {
		t.Errorf("a display name with the address: %d, want 400", w.Code)
	}
	if w := alice.Post("/notifications", url.Values{"email": {"alice@example.org"}, "event": {"approved"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("saving: %d", w.Code)
	}
	if got := env.savedNotify("alice"); got == nil || got.Email != "alice@example.org" {
		t.Errorf("saved %+v", got)
	}
}

func TestUIOutboxPageIsForApprovers(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	now := time.Now()
	err := env.DB.Outbox.Add(ctx, []*rundb.OutboxEntry{
		{Created: now, Username: "alice", Kind: "finished", Channel: "webhook", Target: "https://hooks.example.org/a"},
		{Created: now, Username: "alice", Kind: "stopped", Channel: "webhook", Target: "https://hooks.example.org/b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.DB.Outbox.Claim(ctx, "test", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Outbox.Finish(ctx, e.ID, "test", rundb.OutboxFailed, 8, time.Time{}, now, "webhook answered 503"); err != nil {
		t.Fatal(err)
	}
	if w := env.as("alice").Get("/admin/notifications"); w.Code != http.StatusForbidden {
		t.Errorf("a user who is not an approver: %d, want 403", w.Code)
	}
	w := env.as("bob").Get("/admin/notifications")
	page := body(w)
	if w.Code != http.StatusOK {
		t.Fatalf("an approver: %d", w.Code)
	}
	for _, want := range []string{`id="outbox-pending">1<`, `id="outbox-failed">1<`, `id="outbox-sent">0<`, "webhook answered 503"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
}
