package journal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/rundb"
)

// The primary's lease is one document in the journal's database. The primary renews it every
// few seconds; an instance may take it once it has gone unrenewed for the lease's time to live
// (or when it names the instance itself: a restart), and taking it increments the epoch that
// fences the previous holder's writes (see Journal).

// leaseDoc is the lease document: which epoch is the primary's, and the newest epoch whose
// records a primary has absorbed into its own.
type leaseDoc struct {
	ID       string    `bson:"_id"`
	Epoch    int64     `bson:"epoch"`
	Holder   string    `bson:"holder"`
	Renewed  time.Time `bson:"renewed"`
	Absorbed int64     `bson:"absorbed"`
	// FileJournals are the epochs, not yet absorbed, whose journals are files (see
	// Options.Dir), and where.
	FileJournals []FileJournal `bson:"file_journals,omitempty"`
}

// FileJournal says that the journal of an epoch is kept in files, in Dir.
type FileJournal struct {
	Epoch int64  `bson:"epoch"`
	Dir   string `bson:"dir"`
}

// leaseID is the lease document's _id.
const leaseID = "primary"

// DefaultLeaseTTL is how long an unrenewed lease stays the holder's; the holder renews it every
// fifth of that.
const DefaultLeaseTTL = 10 * time.Second

// ErrLeaseHeld means another live instance holds the primary's lease.
var ErrLeaseHeld = errors.New("another instance holds the primary's lease")

// Lease is the lease document as stored.
type Lease struct {
	Epoch   int64
	Holder  string
	Renewed time.Time
	// Absorbed is the newest epoch whose journal a later primary has taken over.
	Absorbed int64
	// FileJournals are the later epochs whose journals are files.
	FileJournals []FileJournal
}

// leaseColl is the lease's collection, in d's journal database.
func leaseColl(d *rundb.DB) *mongo.Collection { return d.JournalDB().Collection("lease") }

// AcquireLease takes the primary's lease for holder, at now, if it is free: never taken, not
// renewed for ttl, or held by holder itself. It returns the lease with its new epoch (one more
// than the last); ErrLeaseHeld, with the holder, if another instance holds it.
func AcquireLease(ctx context.Context, d *rundb.DB, holder string, ttl time.Duration, now time.Time) (Lease, error) {
	filter := bson.D{{Key: "_id", Value: leaseID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "renewed", Value: bson.D{{Key: "$lt", Value: now.Add(-ttl)}}}},
		bson.D{{Key: "holder", Value: holder}},
	}}}
	update := bson.D{{Key: "$inc", Value: bson.D{{Key: "epoch", Value: int64(1)}}},
		{Key: "$set", Value: bson.D{{Key: "holder", Value: holder}, {Key: "renewed", Value: now}}}}
	var doc leaseDoc
	err := leaseColl(d).FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&doc)
	if mongo.IsDuplicateKeyError(err) {
		// The lease exists and matched neither condition: it is live and someone else's.
		cur, rerr := ReadLease(ctx, d)
		if rerr != nil {
			return Lease{}, fmt.Errorf("%w (and reading it: %v)", ErrLeaseHeld, rerr)
		}
		return cur, fmt.Errorf("%w: %s, epoch %d, renewed %s ago", ErrLeaseHeld, cur.Holder, cur.Epoch,
			now.Sub(cur.Renewed).Round(time.Millisecond))
	}
	if err != nil {
		return Lease{}, fmt.Errorf("take the primary's lease: %w", err)
	}
	return doc.lease(), nil
}

// RenewLease records that the holder of epoch is alive at now; ErrFenced if the lease has a
// newer epoch.
func RenewLease(ctx context.Context, d *rundb.DB, epoch int64, now time.Time) error {
	res, err := leaseColl(d).UpdateOne(ctx, bson.D{{Key: "_id", Value: leaseID}, {Key: "epoch", Value: epoch}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "renewed", Value: now}}}})
	if err != nil {
		return fmt.Errorf("renew the primary's lease: %w", err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%w: the lease is no longer epoch %d's", ErrFenced, epoch)
	}
	return nil
}

// ReleaseLease gives up the lease of epoch, so that a standby takes it at once rather than
// after its time to live: a graceful stop. Nothing if a newer epoch holds it.
func ReleaseLease(ctx context.Context, d *rundb.DB, epoch int64) error {
	_, err := leaseColl(d).UpdateOne(ctx, bson.D{{Key: "_id", Value: leaseID}, {Key: "epoch", Value: epoch}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "renewed", Value: time.Time{}}}}})
	if err != nil {
		return fmt.Errorf("release the primary's lease: %w", err)
	}
	return nil
}

// addFileJournal records in the lease of epoch that its journal is kept in files in dir;
// ErrFenced if a newer epoch holds the lease.
func addFileJournal(ctx context.Context, d *rundb.DB, epoch int64, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	res, err := leaseColl(d).UpdateOne(ctx, bson.D{{Key: "_id", Value: leaseID}, {Key: "epoch", Value: epoch}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "file_journals", Value: FileJournal{Epoch: epoch, Dir: abs}}}}})
	if err != nil {
		return fmt.Errorf("journal: record where the journal is: %w", err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%w: the lease moved on while this primary started", ErrFenced)
	}
	return nil
}

// markAbsorbed records in the lease of epoch that every earlier epoch's journal is absorbed into
// it, and that only its own journal may be in files (in dir, unless that is ""); ErrFenced if a
// newer epoch holds the lease.
func markAbsorbed(ctx context.Context, d *rundb.DB, epoch int64, dir string) error {
	files := bson.A{}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		files = append(files, FileJournal{Epoch: epoch, Dir: abs})
	}
	res, err := leaseColl(d).UpdateOne(ctx, bson.D{{Key: "_id", Value: leaseID}, {Key: "epoch", Value: epoch}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "absorbed", Value: epoch - 1}, {Key: "file_journals", Value: files}}}})
	if err != nil {
		return fmt.Errorf("journal: record the absorbed epochs: %w", err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%w: the lease moved on while this primary started", ErrFenced)
	}
	return nil
}

// ReadLease returns the lease as stored; ErrNotFound if no primary ever took it.
func ReadLease(ctx context.Context, d *rundb.DB) (Lease, error) {
	var doc leaseDoc
	err := leaseColl(d).FindOne(ctx, bson.D{{Key: "_id", Value: leaseID}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Lease{}, rundb.ErrNotFound
	}
	if err != nil {
		return Lease{}, err
	}
	return doc.lease(), nil
}

func (l leaseDoc) lease() Lease {
	return Lease{Epoch: l.Epoch, Holder: l.Holder, Renewed: l.Renewed, Absorbed: l.Absorbed, FileJournals: l.FileJournals}
}
