// Package notify tells users about their tests and machines: the events they chose (a test
// finished, approved or stopped, a machine quarantined) go into an outbox in the database at
// the moment they happen, and a sender job on the primary delivers them to the users' webhooks
// and e-mail addresses, retrying with backoff. See docs/SECURITY.md for the rules a webhook's
// target must follow.
package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// The kinds of event a user can be told about.
const (
	KindFinished    = "finished"    // their test finished, with its verdict and Elo
	KindApproved    = "approved"    // an approver approved their test
	KindStopped     = "stopped"     // their test was stopped, by a person, a worker or failed builds
	KindQuarantined = "quarantined" // one of their machines was quarantined
)

// Kinds lists every kind, in the order the profile shows them.
var Kinds = []string{KindFinished, KindApproved, KindStopped, KindQuarantined}

// KindLabel is how the profile and the messages name a kind.
func KindLabel(kind string) string {
	switch kind {
	case KindFinished:
		return "test finished"
	case KindApproved:
		return "test approved"
	case KindStopped:
		return "test stopped"
	case KindQuarantined:
		return "machine quarantined"
	}
	return kind
}

// Event is something that happened that its user may want to hear of.
type Event struct {
	Kind string
	// Username is the user told: the run's owner, or the machine's.
	Username string
	RunID    string // the run's id, for run events
	Run      string // the run's label (its branch and the like), for run events
	Worker   string // the machine's name, for KindQuarantined
	// Message says what happened in a line: the verdict and Elo, why it stopped, why the
	// machine was quarantined.
	Message string
	Time    time.Time
}

// Store is what the Outbox needs of the database.
type Store interface {
	Get(ctx context.Context, username string) (*rundb.NotifySettings, error)
}

// OutboxWriter is where the Outbox puts its deliveries.
type OutboxWriter interface {
	Add(ctx context.Context, entries []*rundb.OutboxEntry) error
}

// Outbox turns events into deliveries, one for each of the user's targets, stored before
// Enqueue returns. Safe for concurrent use.
type Outbox struct {
	settings Store
	out      OutboxWriter
	// email says whether the operator configured SMTP; without it no e-mail is queued.
	email bool
}

// NewOutbox returns an Outbox reading users' settings from settings and storing deliveries in
// out; email says whether e-mail can be sent.
func NewOutbox(settings Store, out OutboxWriter, email bool) *Outbox {
	return &Outbox{settings: settings, out: out, email: email}
}

// Enqueue stores a delivery of ev to each target of its user, if the user asked to be told
// about ev's kind. A user without settings, or who did not choose the kind, gets nothing. The
// deliveries are written even if ctx is cancelled after the event happened: the event stands.
func (o *Outbox) Enqueue(ctx context.Context, ev Event) error {
	if o == nil || ev.Username == "" {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	ns, err := o.settings.Get(ctx, ev.Username)
	if errors.Is(err, rundb.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("notify %s of %s: %w", ev.Username, ev.Kind, err)
	}
	if !slices.Contains(ns.Events, ev.Kind) {
		return nil
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	var entries []*rundb.OutboxEntry
	entry := func(channel, target, format string) *rundb.OutboxEntry {
		return &rundb.OutboxEntry{Created: ev.Time, NextAt: ev.Time, Username: ev.Username, Kind: ev.Kind,
			RunID: ev.RunID, Run: ev.Run, Worker: ev.Worker, Message: ev.Message,
			Channel: channel, Target: target, Format: format}
	}
	for _, w := range ns.Webhooks {
		entries = append(entries, entry(ChannelWebhook, w.URL, w.Format))
	}
	if o.email && ns.Email != "" {
		entries = append(entries, entry(ChannelEmail, ns.Email, ""))
	}
	if err := o.out.Add(ctx, entries); err != nil {
		return fmt.Errorf("notify %s of %s: %w", ev.Username, ev.Kind, err)
	}
	return nil
}

// The channels a delivery goes through.
const (
	ChannelWebhook = "webhook"
	ChannelEmail   = "email"
)
