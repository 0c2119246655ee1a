package rundb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The notifications' two collections live in Shoal's own database (JournalDatabase), beside the
// journal and the lease, not in fishtest's: a fishtest database opened by Shoal gains no
// collection, and the users' documents keep fishtest's shape.
const (
	notifySettingsCollection = "notify_settings"
	outboxCollection         = "notify_outbox"
	claimsCollection         = "notify_claims"
)

// NotifyWebhook is one webhook a user is told through: its URL and the shape of its payload
// (notify.FormatJSON, FormatDiscord, FormatSlack).
type NotifyWebhook struct {
	URL    string `bson:"url"`
	Format string `bson:"format"`
}

// NotifySettings is where and about what one user wants to be told.
type NotifySettings struct {
	Username string          `bson:"_id"`
	Webhooks []NotifyWebhook `bson:"webhooks"`
	Email    string          `bson:"email,omitempty"`
	// Events are the kinds of event the user is told about (notify.Kind* values).
	Events  []string  `bson:"events"`
	Updated time.Time `bson:"updated"`
}

// NotifySettingsStore reads and writes users' notification settings. Safe for concurrent use.
type NotifySettingsStore struct {
	coll *mongo.Collection
}

// Get returns username's settings; ErrNotFound if they never saved any.
func (s *NotifySettingsStore) Get(ctx context.Context, username string) (*NotifySettings, error) {
	var out NotifySettings
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: username}}).Decode(&out)
	if err != nil {
		return nil, fmt.Errorf("get notification settings of %s: %w", username, mapError(err))
	}
	return &out, nil
}

// Put replaces the settings of ns.Username with ns.
func (s *NotifySettingsStore) Put(ctx context.Context, ns *NotifySettings) error {
	_, err := s.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: ns.Username}}, ns, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("put notification settings of %s: %w", ns.Username, mapError(err))
	}
	return nil
}

// The states of an outbox entry: waiting for its next attempt, claimed by a sender, delivered,
// or given up after its last attempt.
const (
	OutboxPending = "pending"
	OutboxSending = "sending"
	OutboxSent    = "sent"
	OutboxFailed  = "failed"
)

// OutboxEntry is one delivery of one event to one target.
type OutboxEntry struct {
	ID      ObjectID  `bson:"_id"`
	Created time.Time `bson:"created"`
	// Username is the user told; Kind, RunID, Run, Worker and Message describe the event.
	Username string `bson:"username"`
	Kind     string `bson:"kind"`
	RunID    string `bson:"run_id,omitempty"`
	Run      string `bson:"run,omitempty"`
	Worker   string `bson:"worker,omitempty"`
	Message  string `bson:"message,omitempty"`
	// Channel is "webhook" or "email"; Target its URL or address; Format a webhook's payload.
	Channel string `bson:"channel"`
	Target  string `bson:"target"`
	Format  string `bson:"format,omitempty"`

	State    string    `bson:"state"`
	Attempts int       `bson:"attempts"`
	NextAt   time.Time `bson:"next_at"`
	// Owner is the claim of the sender that holds a sending entry, until LeaseUntil.
	Owner      string    `bson:"owner,omitempty"`
	Claims     int       `bson:"claims"` // how many times a sender claimed it
	LeaseUntil time.Time `bson:"lease_until"`
	LastError  string    `bson:"last_error,omitempty"`
	Done       time.Time `bson:"done"`
}

// OutboxStore is the durable queue of deliveries. Entries are claimed one at a time (Claim),
// each claim naming its sender and a deadline, so that two senders on one database never hold
// the same entry, and an entry whose sender died is claimed again after its deadline. Safe for
// concurrent use.
type OutboxStore struct {
	coll   *mongo.Collection
	claims *mongo.Collection
}

// Add stores entries as pending, due at once; it fills in their ids.
func (s *OutboxStore) Add(ctx context.Context, entries []*OutboxEntry) error {
	if len(entries) == 0 {
		return nil
	}
	docs := make([]any, len(entries))
	for i, e := range entries {
		if e.ID.IsZero() {
			e.ID = NewObjectID()
		}
		e.State = OutboxPending
		if e.NextAt.IsZero() {
			e.NextAt = e.Created
		}
		docs[i] = e
	}
	if _, err := s.coll.InsertMany(ctx, docs); err != nil {
		return fmt.Errorf("add %d outbox entries: %w", len(entries), mapError(err))
	}
	return nil
}

// Claim takes the oldest entry due at now (pending and due, or sending with its deadline
// passed) for owner until now+lease. ErrNotFound: nothing is due.
//
// A claim is an insert into the claims collection under the entry's id and its next claim
// number: a unique key, so of two senders that read the same entry only one inserts it, on
// MongoDB and on the embedded database alike (whose find-and-modify is not atomic between
// concurrent callers: two of them can both update the document they found). The entry then
// records the claim, its owner and deadline.
func (s *OutboxStore) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration) (*OutboxEntry, error) {
	due := bson.A{
		bson.D{{Key: "state", Value: OutboxPending}, {Key: "next_at", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "state", Value: OutboxSending}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}},
	}
	var lost bson.A // entries another sender claimed first
	for range maxClaimTries {
		filter := bson.D{{Key: "$or", Value: due}}
		if len(lost) > 0 {
			filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$nin", Value: lost}}})
		}
		var e OutboxEntry
		err := s.coll.FindOne(ctx, filter, options.FindOne().SetSort(bson.D{{Key: "next_at", Value: 1}})).Decode(&e)
		if err != nil {
			return nil, fmt.Errorf("claim outbox entry: %w", mapError(err))
		}
		claim := e.Claims + 1
		_, err = s.claims.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s:%d", e.ID.Hex(), claim)},
			{Key: "owner", Value: owner}, {Key: "created", Value: now}})
		if errors.Is(mapError(err), ErrConflict) {
			lost = append(lost, e.ID)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("claim outbox entry %s: %w", e.ID.Hex(), mapError(err))
		}
		e.State, e.Owner, e.LeaseUntil, e.Claims = OutboxSending, owner, now.Add(lease), claim
		_, err = s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: e.ID}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "state", Value: e.State}, {Key: "owner", Value: owner}, {Key: "lease_until", Value: e.LeaseUntil},
			{Key: "claims", Value: claim}}}})
		if err != nil {
			return nil, fmt.Errorf("claim outbox entry %s: %w", e.ID.Hex(), mapError(err))
		}
		return &e, nil
	}
	return nil, fmt.Errorf("claim outbox entry: %w", ErrNotFound)
}

// maxClaimTries bounds how many due entries one Claim tries before it reports none: each try
// lost means another sender is at work on the outbox.
const maxClaimTries = 20

// ErrNotOwner means an outbox entry is no longer held by the sender that reports on it: its
// deadline passed and another sender claimed it.
var ErrNotOwner = errors.New("outbox entry claimed by another sender")

// Finish records the outcome of owner's attempt at entry id: sent (state OutboxSent), to be
// tried again at next (OutboxPending), or given up (OutboxFailed). ErrNotOwner if owner no
// longer holds it.
func (s *OutboxStore) Finish(ctx context.Context, id ObjectID, owner, state string, attempts int, next, now time.Time, lastErr string) error {
	set := bson.D{{Key: "state", Value: state}, {Key: "attempts", Value: attempts},
		{Key: "owner", Value: ""}, {Key: "last_error", Value: lastErr}}
	if state == OutboxPending {
		set = append(set, bson.E{Key: "next_at", Value: next})
	} else {
		set = append(set, bson.E{Key: "done", Value: now})
	}
	res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "owner", Value: owner}, {Key: "state", Value: OutboxSending}},
		bson.D{{Key: "$set", Value: set}})
	switch {
	case err != nil:
		return fmt.Errorf("finish outbox entry %s: %w", id.Hex(), mapError(err))
	case res.MatchedCount == 0:
		return fmt.Errorf("finish outbox entry %s: %w", id.Hex(), ErrNotOwner)
	}
	return nil
}

// Prune deletes the entries sent or failed before before, and returns how many.
func (s *OutboxStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.coll.DeleteMany(ctx, bson.D{
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{OutboxSent, OutboxFailed}}}},
		{Key: "done", Value: bson.D{{Key: "$lt", Value: before}}},
	})
	if err != nil {
		return 0, fmt.Errorf("prune outbox: %w", mapError(err))
	}
	// A claim older than the retention belongs to an entry pruned or claimed again since.
	if _, err := s.claims.DeleteMany(ctx, bson.D{{Key: "created", Value: bson.D{{Key: "$lt", Value: before}}}}); err != nil {
		return res.DeletedCount, fmt.Errorf("prune outbox claims: %w", mapError(err))
	}
	return res.DeletedCount, nil
}

// OutboxCounts is how many entries the outbox holds in each state.
type OutboxCounts struct {
	Pending, Sending, Sent, Failed int64
}

// Counts counts the entries in each state.
func (s *OutboxStore) Counts(ctx context.Context) (OutboxCounts, error) {
	var c OutboxCounts
	for state, n := range map[string]*int64{OutboxPending: &c.Pending, OutboxSending: &c.Sending,
		OutboxSent: &c.Sent, OutboxFailed: &c.Failed} {
		k, err := s.coll.CountDocuments(ctx, bson.D{{Key: "state", Value: state}})
		if err != nil {
			return c, fmt.Errorf("count outbox entries %s: %w", state, mapError(err))
		}
		*n = k
	}
	return c, nil
}

// List returns up to limit entries in state, newest first; all states if state is "".
func (s *OutboxStore) List(ctx context.Context, state string, limit int) ([]OutboxEntry, error) {
	filter := bson.D{}
	if state != "" {
		filter = bson.D{{Key: "state", Value: state}}
	}
	cur, err := s.coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "created", Value: -1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", mapError(err))
	}
	var out []OutboxEntry
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list outbox: %w", mapError(err))
	}
	return out, nil
}
