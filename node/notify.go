package node

import (
	"fmt"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
)

// sendPeriod is how often the primary's sender looks for deliveries due; pruning runs hourly.
const (
	sendPeriod  = 2 * time.Second
	prunePeriod = time.Hour
)

// smtpOf is the operator's mail server from cfg; nil when none is configured.
func smtpOf(cfg config.Notify) *notify.SMTP {
	if cfg.SMTPHost == "" {
		return nil
	}
	return &notify.SMTP{Host: cfg.SMTPHost, Port: cfg.SMTPPort, From: cfg.SMTPFrom,
		Username: cfg.SMTPUsername, Password: cfg.SMTPPassword, StartTLS: cfg.SMTPStartTLS}
}

// notifications are the primary's parts of the notifications: the outbox the scheduler queues
// deliveries in, and the jobs that send and prune them. Every instance could send (claims keep
// a delivery to one sender), but only the primary does, as it alone makes the events.
func (inst *Instance) notifications() (*notify.Outbox, []scheduler.Job, error) {
	cfg := inst.cfg.Notify
	allow, err := config.ParseAllowNetworks(cfg.WebhookAllowNetworks) // Load checked them
	if err != nil {
		return nil, nil, fmt.Errorf("webhook_allow_networks: %w", err)
	}
	mail := smtpOf(cfg)
	outbox := notify.NewOutbox(inst.db.NotifySettings, inst.db.Outbox, mail.Enabled())
	sender := notify.NewSender(inst.db.Outbox, notify.SenderConfig{
		Name: inst.holder(), Timeout: cfg.Timeout, MaxAttempts: cfg.MaxAttempts, Retention: cfg.Retention,
		Policy: notify.Policy{Allow: allow}, SMTP: mail, Metrics: inst.metrics,
		Logger: inst.logger.With("component", "notify"),
	})
	jobs := []scheduler.Job{
		{Name: "send notifications", Period: sendPeriod, MinDelay: sendPeriod / 2, Jitter: 0.1, Run: sender.Pass},
		{Name: "prune notifications", Period: prunePeriod, Initial: time.Minute, Jitter: 0.05, Run: sender.Prune},
	}
	return outbox, jobs, nil
}

// The outbox is what the scheduler tells, and the database's stores are what notify needs.
var (
	_ scheduler.Notifier = (*notify.Outbox)(nil)
	_ notify.Store       = (*rundb.NotifySettingsStore)(nil)
	_ notify.Queue       = (*rundb.OutboxStore)(nil)
)
