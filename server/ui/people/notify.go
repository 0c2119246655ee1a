package people

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui"
)

// NotifySettings are users' notification settings (rundb.NotifySettingsStore).
type NotifySettings interface {
	Get(ctx context.Context, username string) (*rundb.NotifySettings, error)
	Put(ctx context.Context, ns *rundb.NotifySettings) error
}

// Outbox is the notifications' outbox as approvers see it (rundb.OutboxStore).
type Outbox interface {
	Counts(ctx context.Context) (rundb.OutboxCounts, error)
	List(ctx context.Context, state string, limit int) ([]rundb.OutboxEntry, error)
}

// notifyRow is one webhook row of the form.
type notifyRow struct {
	URL, Format string
}

// notifyKind is one kind of event, as the form's checkbox shows it.
type notifyKind struct {
	Value, Label string
}

// notifyData is the notifications page of one's profile.
type notifyData struct {
	ui.Page
	Webhooks []notifyRow // the saved or submitted webhooks, padded with empty rows to the limit
	Email    string
	Events   map[string]bool
	// EmailEnabled says whether the operator configured a mail server.
	EmailEnabled bool
	Kinds        []notifyKind
	Formats      []string
	Error        string
}

// NotificationsPage is GET /notifications: where and about what the logged-in user is told.
func (s *Server) NotificationsPage(c *gin.Context) {
	me, ok := s.ui.RequireUser(c)
	if !ok {
		return
	}
	var ns *rundb.NotifySettings
	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		ns, err = s.deps.NotifySettings.Get(ctx, me.Username)
		if errors.Is(err, rundb.ErrNotFound) {
			ns, err = &rundb.NotifySettings{Username: me.Username}, nil
		}
		return err
	}) {
		return
	}
	s.showNotifications(c, http.StatusOK, ns, "")
}

// showNotifications renders the page with settings ns and, if not "", an error that kept
// them from being saved.
func (s *Server) showNotifications(c *gin.Context, status int, ns *rundb.NotifySettings, msg string) {
	d := notifyData{Email: ns.Email, Events: map[string]bool{}, EmailEnabled: s.deps.EmailEnabled,
		Formats: notify.Formats, Error: msg}
	for _, k := range notify.Kinds {
		d.Kinds = append(d.Kinds, notifyKind{Value: k, Label: notify.KindLabel(k)})
	}
	for _, w := range ns.Webhooks {
		d.Webhooks = append(d.Webhooks, notifyRow{URL: w.URL, Format: w.Format})
	}
	for len(d.Webhooks) < notify.MaxWebhooks {
		d.Webhooks = append(d.Webhooks, notifyRow{Format: notify.FormatJSON})
	}
	for _, k := range ns.Events {
		d.Events[k] = true
	}
	d.Page = s.ui.Page(c, "Notifications")
	s.ui.Render(c, status, "notifications", d)
}

// NotificationsSubmit is POST /notifications: it saves the form's settings whole, or, if
// any part is wrong, saves nothing and shows the form again with the error.
func (s *Server) NotificationsSubmit(c *gin.Context) {
	me, ok := s.ui.RequireUser(c)
	if !ok {
		return
	}
	ns := rundb.NotifySettings{Username: me.Username, Email: c.PostForm("email"), Events: c.PostFormArray("event")}
	urls, formats := c.PostFormArray("webhook_url"), c.PostFormArray("webhook_format")
	for i, u := range urls {
		if u == "" {
			continue
		}
		f := notify.FormatJSON
		if i < len(formats) {
			f = formats[i]
		}
		ns.Webhooks = append(ns.Webhooks, rundb.NotifyWebhook{URL: u, Format: f})
	}
	clean, err := notify.Check(ns, s.deps.EmailEnabled)
	if err != nil {
		s.showNotifications(c, http.StatusBadRequest, &ns, "Nothing was saved: "+err.Error()+".")
		return
	}
	clean.Updated = time.Now()
	if !s.ui.Do(c, func(ctx context.Context) error { return s.deps.NotifySettings.Put(ctx, &clean) }) {
		return
	}
	s.ui.Flash(c, "success", "Your notification settings are saved.")
	s.ui.Redirect(c, "/notifications")
}

// outboxData is the notifications' admin page.
type outboxData struct {
	ui.Page
	Counts rundb.OutboxCounts
	Failed []rundb.OutboxEntry
	Recent []rundb.OutboxEntry
}

// outboxListed is how many failed and recent deliveries the admin page lists.
const outboxListed = 50

// OutboxPage is GET /admin/notifications: approvers see how many deliveries wait, are being
// sent, were sent and failed, the failed ones with their last error, and the latest ones.
func (s *Server) OutboxPage(c *gin.Context) {
	if _, ok := s.ui.RequireApprover(c); !ok {
		return
	}
	var d outboxData
	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		if d.Counts, err = s.deps.Outbox.Counts(ctx); err != nil {
			return err
		}
		if d.Failed, err = s.deps.Outbox.List(ctx, rundb.OutboxFailed, outboxListed); err != nil {
			return err
		}
		d.Recent, err = s.deps.Outbox.List(ctx, "", outboxListed)
		return err
	}) {
		return
	}
	d.Page = s.ui.Page(c, "Notifications outbox")
	s.ui.Render(c, http.StatusOK, "admin_notifications", d)
}
