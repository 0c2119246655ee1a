package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
)

// Defaults of SenderConfig.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 8
	DefaultBackoff     = 30 * time.Second
	DefaultMaxBackoff  = time.Hour
	DefaultRetention   = 7 * 24 * time.Hour
	// maxPerPass bounds one pass of the sender, so that the job yields between passes.
	maxPerPass = 100
	// leaseMargin is how long past its timeout a claimed delivery stays the claimer's.
	leaseMargin = 30 * time.Second
)

// SenderConfig is what a Sender needs besides its queue.
type SenderConfig struct {
	// Name names the instance in the claims it makes (a random suffix is added).
	Name string
	// Timeout bounds one delivery; MaxAttempts is how many are made before an entry is left
	// failed; Backoff is the wait before the first retry, doubled for each next one up to
	// MaxBackoff. Zero values take the defaults.
	Timeout     time.Duration
	MaxAttempts int
	Backoff     time.Duration
	MaxBackoff  time.Duration
	// Retention is how long sent and failed entries are kept (Prune).
	Retention time.Duration
	// Policy says which addresses webhooks may reach.
	Policy Policy
	// SMTP is the mail server; nil or not Enabled: e-mails fail.
	SMTP    *SMTP
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
}

// Queue is what the Sender needs of the outbox.
type Queue interface {
	Claim(ctx context.Context, owner string, now time.Time, lease time.Duration) (*rundb.OutboxEntry, error)
	Finish(ctx context.Context, id rundb.ObjectID, owner, state string, attempts int, next, now time.Time, lastErr string) error
	Prune(ctx context.Context, before time.Time) (int64, error)
}

// Sender delivers the outbox's entries. Several Senders on one database (two instances during a
// takeover) never deliver an entry twice while each finishes within its lease: an entry is
// claimed atomically for one of them, with a deadline. A Sender's Pass runs one at a time
// (it is a periodic job's); Prune may run beside it.
type Sender struct {
	cfg    SenderConfig
	queue  Queue
	owner  string
	client *http.Client
	// seen, if set, is told of each address a webhook is about to be dialled at (tests).
	seen func(address string, err error)
}

// NewSender returns a Sender over queue.
func NewSender(queue Queue, cfg SenderConfig) *Sender {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Sender{cfg: cfg, queue: queue, owner: cfg.Name + "/" + hex.EncodeToString(b[:])}
	s.client = webhookClient(cfg.Policy, cfg.Timeout, func(a string, err error) {
		if s.seen != nil {
			s.seen(a, err)
		}
	})
	return s
}

// Pass delivers the entries due, one after the other, up to a bound, and returns how many it
// tried. A database error ends the pass; a delivery's error is the entry's, recorded on it.
func (s *Sender) Pass(ctx context.Context) error {
	for range maxPerPass {
		e, err := s.queue.Claim(ctx, s.owner, s.cfg.Now(), s.cfg.Timeout+leaseMargin)
		if errors.Is(err, rundb.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.deliverAndRecord(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// deliverAndRecord makes one attempt at e and records its outcome.
func (s *Sender) deliverAndRecord(ctx context.Context, e *rundb.OutboxEntry) error {
	err := s.deliver(ctx, e)
	now := s.cfg.Now()
	attempts := e.Attempts + 1
	state, next, lastErr, result := rundb.OutboxSent, time.Time{}, "", "sent"
	if err != nil {
		lastErr = truncate(err.Error(), 500)
		if attempts >= s.cfg.MaxAttempts {
			state, result = rundb.OutboxFailed, "failed"
			s.cfg.Logger.Warn("notification failed for good", "user", e.Username, "channel", e.Channel,
				"kind", e.Kind, "attempts", attempts, "err", err)
		} else {
			state, result, next = rundb.OutboxPending, "retry", now.Add(s.backoff(attempts))
		}
	}
	s.cfg.Metrics.NotificationDelivery(e.Channel, result)
	ferr := s.queue.Finish(context.WithoutCancel(ctx), e.ID, s.owner, state, attempts, next, now, lastErr)
	if errors.Is(ferr, rundb.ErrNotOwner) {
		// The lease ran out while delivering: another sender holds it now. A late success
		// may then be delivered twice; the lease is the timeout plus a margin to make that rare.
		s.cfg.Logger.Warn("notification outlived its lease", "id", e.ID.Hex())
		return nil
	}
	return ferr
}

// backoff is the wait after the attempts-th failed attempt: Backoff, doubled each time, at most
// MaxBackoff.
func (s *Sender) backoff(attempts int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < attempts && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.cfg.MaxBackoff)
}

// deliver makes one attempt at e, within the timeout.
func (s *Sender) deliver(ctx context.Context, e *rundb.OutboxEntry) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	switch e.Channel {
	case ChannelWebhook:
		return s.post(ctx, e)
	case ChannelEmail:
		return s.cfg.SMTP.send(ctx, e, s.cfg.Timeout, s.cfg.Now())
	}
	return fmt.Errorf("unknown channel %q", e.Channel)
}

// post sends e to its webhook; only a 2xx reply counts as delivered.
func (s *Sender) post(ctx context.Context, e *rundb.OutboxEntry) error {
	if err := CheckWebhookURL(e.Target); err != nil {
		return err
	}
	body, err := Payload(e)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Shoal-notifications")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("webhook answered %d, a redirect, which is not followed", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// Prune deletes the entries sent or failed longer ago than the retention.
func (s *Sender) Prune(ctx context.Context) error {
	n, err := s.queue.Prune(ctx, s.cfg.Now().Add(-s.cfg.Retention))
	if n > 0 {
		s.cfg.Logger.Info("notifications pruned", "entries", n)
	}
	return err
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
