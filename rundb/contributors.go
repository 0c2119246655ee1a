package rundb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The store methods behind the contributor statistics (user_cache and top_month), which the
// scheduler's "update contributors" job keeps up to date as fishtest's delta_update_users script
// does.

// statsProjection is what contributor statistics read of a run: who submitted it, its time
// control and threads, its times, and each task's worker, last update and results.
var statsProjection = bson.D{
	{Key: "_id", Value: 1}, {Key: "start_time", Value: 1}, {Key: "last_updated", Value: 1},
	{Key: "finished", Value: 1}, {Key: "deleted", Value: 1},
	{Key: "args.username", Value: 1}, {Key: "args.tc", Value: 1}, {Key: "args.threads", Value: 1},
	{Key: "tasks.worker_info.username", Value: 1}, {Key: "tasks.last_updated", Value: 1},
	{Key: "tasks.stats", Value: 1},
}

// EachFinished calls fn with every finished run last updated at or after since, deleted ones
// too (their games were played all the same), most recently updated first, stopping at fn's
// first error. The runs hold only what contributor statistics need: ID, StartTime, LastUpdated,
// Finished, Deleted, Args.Username, Args.TC, Args.Threads and, per task, WorkerInfo.Username,
// LastUpdated and Stats; every other field is zero. Runs are read one at a time, so a scan of
// every finished run (a first update) does not hold them all in memory.
//
// On the embedded database the scan is paced (eachFinishedPaced): there the query reads and
// decodes every run, the unfinished ones with all their tasks, in one stretch of the database's
// CPU (3.9 s for 50 runs at 500,000 equivalent workers), which on a server given one core took
// half of it from the requests for as long, right after a start, when a returning fleet needs
// it most.
func (s *RunStore) EachFinished(ctx context.Context, since time.Time, fn func(*Run) error) error {
	if s.scanDuty > 0 {
		return s.eachFinishedPaced(ctx, since, fn)
	}
	filter := bson.D{{Key: "finished", Value: true}}
	if !since.IsZero() {
		filter = append(filter, bson.E{Key: "last_updated", Value: bson.D{{Key: "$gte", Value: since.UTC()}}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "last_updated", Value: -1}}).SetProjection(statsProjection)
	var fnErr error
	err := s.eachWithHint(ctx, filter, opts, "finished_runs", func(r *Run) error {
		fnErr = fn(r)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return fmt.Errorf("list finished runs since %s: %w", since.UTC().Format(time.RFC3339), mapError(err))
	}
	return err
}

// ferretScanDuty is the share of its time a paced scan keeps the embedded database busy.
const ferretScanDuty = 0.25

// eachFinishedPaced is EachFinished in steps the database can interleave with other work: it
// lists every run's _id, finished and last_updated one run per round trip (the embedded
// database still decodes each whole, but one at a time), then reads the finished ones by _id,
// and after each read waits long enough that reads take at most scanDuty of the time.
func (s *RunStore) eachFinishedPaced(ctx context.Context, since time.Time, fn func(*Run) error) error {
	type entry struct {
		ID          ObjectID  `bson:"_id"`
		Finished    bool      `bson:"finished"`
		LastUpdated time.Time `bson:"last_updated"`
	}
	opts := options.Find().SetBatchSize(1).SetProjection(bson.D{
		{Key: "_id", Value: 1}, {Key: "finished", Value: 1}, {Key: "last_updated", Value: 1}})
	p := pacer{duty: s.scanDuty, since: time.Now()}
	cur, err := s.coll.Find(ctx, bson.D{}, opts)
	if err != nil {
		return fmt.Errorf("list runs: %w", mapError(err))
	}
	defer cur.Close(ctx)
	var found []entry
	for cur.Next(ctx) {
		var e entry
		if err := cur.Decode(&e); err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		if e.Finished && !e.LastUpdated.Before(since) {
			found = append(found, e)
		}
		if err := p.wait(ctx); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("list runs: %w", mapError(err))
	}
	// Most recently updated first, as the query with its sort gives them.
	slices.SortFunc(found, func(a, b entry) int {
		if c := b.LastUpdated.Compare(a.LastUpdated); c != 0 {
			return c
		}
		return a.ID.Compare(b.ID)
	})
	ids := make([]ObjectID, len(found))
	for i, e := range found {
		ids[i] = e.ID
	}
	p.since = time.Now()
	return s.EachByID(ctx, ids, func(r *Run) error {
		if err := p.wait(ctx); err != nil {
			return err
		}
		if !r.Finished {
			return nil // resumed meanwhile
		}
		return fn(r)
	})
}

// pacer spaces out a scan's steps: wait, after a step that began at since, waits long enough
// that the steps take at most duty of the time, and starts the clock on the next.
type pacer struct {
	duty  float64
	since time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	t := time.NewTimer(time.Duration(float64(time.Since(p.since)) * (1 - p.duty) / p.duty))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		p.since = time.Now()
		return nil
	}
}

// EachByID calls fn with each of the runs named by ids that exists, in the order of ids, holding
// what EachFinished's runs hold, stopping at fn's first error. Each is read by its _id, the one
// filter the embedded database answers without reading every run: the way to read a few runs
// known to have changed without a scan of them all.
func (s *RunStore) EachByID(ctx context.Context, ids []ObjectID, fn func(*Run) error) error {
	opts := options.FindOne().SetProjection(statsProjection)
	for _, id := range ids {
		raw, err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read run %s: %w", id, mapError(err))
		}
		r, err := s.decode(raw)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// TestsRepos returns every user's default tests repository ("" for none), by username: the
// users contributor statistics are kept for.
func (s *UserStore) TestsRepos(ctx context.Context) (map[string]string, error) {
	opts := options.Find().SetProjection(bson.D{{Key: "username", Value: 1}, {Key: "tests_repo", Value: 1}, {Key: "_id", Value: 0}})
	cur, err := s.coll.Find(ctx, bson.D{}, opts)
	if err != nil {
		return nil, fmt.Errorf("list users' tests repositories: %w", mapError(err))
	}
	var rows []struct {
		Username  string `bson:"username"`
		TestsRepo string `bson:"tests_repo"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("list users' tests repositories: %w", mapError(err))
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Username] = r.TestsRepo
	}
	return out, nil
}

// All returns every contributor's totals, in no particular order.
func (s *UserCacheStore) All(ctx context.Context) ([]*UserStats, error) {
	cur, err := s.coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.coll.Name(), mapError(err))
	}
	out := []*UserStats{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list %s: %w", s.coll.Name(), mapError(err))
	}
	return out, nil
}

// Delete removes the totals of the named contributors; names without totals are ignored.
func (s *UserCacheStore) Delete(ctx context.Context, usernames ...string) error {
	if len(usernames) == 0 {
		return nil
	}
	_, err := s.coll.DeleteMany(ctx, bson.D{{Key: "username", Value: bson.D{{Key: "$in", Value: usernames}}}})
	if err != nil {
		return fmt.Errorf("delete %d entries of %s: %w", len(usernames), s.coll.Name(), mapError(err))
	}
	return nil
}

// creditedPerDocument is how many run IDs one document of the deltas collection holds, as in
// fishtest, which keeps each document well under MongoDB's 16 MB limit.
const creditedPerDocument = 10000

// deltas is fishtest's deltas collection: the IDs of the finished runs whose games user_cache
// already counts, as the keys (with null values) of documents holding up to
// creditedPerDocument of them each.
func (d *DB) deltas() *mongo.Collection { return d.db.Collection("deltas") }

// CreditedRuns returns the finished runs whose games the contributor totals already count
// (fishtest's deltas collection). Keys that are not run IDs are ignored.
func (d *DB) CreditedRuns(ctx context.Context) (map[ObjectID]bool, error) {
	cur, err := d.deltas().Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}}))
	if err != nil {
		return nil, fmt.Errorf("read credited runs: %w", mapError(err))
	}
	defer cur.Close(ctx)
	out := map[ObjectID]bool{}
	for cur.Next(ctx) {
		elems, err := cur.Current.Elements()
		if err != nil {
			return nil, fmt.Errorf("read credited runs: %w", err)
		}
		for _, e := range elems {
			if id, err := ParseObjectID(e.Key()); err == nil {
				out[id] = true
			}
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read credited runs: %w", mapError(err))
	}
	return out, nil
}

// AddCreditedRuns records runs as counted. It fills the newest document of the collection up to
// creditedPerDocument IDs and inserts new documents for the rest, so each write is atomic on
// its own and the collection keeps the shape fishtest reads and writes.
func (d *DB) AddCreditedRuns(ctx context.Context, ids []ObjectID) error {
	if len(ids) == 0 {
		return nil
	}
	coll := d.deltas()
	last, err := coll.FindOne(ctx, bson.D{}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Raw()
	switch {
	case err == nil:
		elems, err := last.Elements()
		if err != nil {
			return fmt.Errorf("record credited runs: %w", err)
		}
		room := creditedPerDocument + 1 - len(elems) // _id is one of the elements
		if room > 0 {
			n := min(room, len(ids))
			set := make(bson.D, n)
			for i, id := range ids[:n] {
				set[i] = bson.E{Key: id.Hex(), Value: nil}
			}
			if _, err := coll.UpdateOne(ctx, idFilter(last.Lookup("_id")),
				bson.D{{Key: "$set", Value: set}}); err != nil {
				return fmt.Errorf("record credited runs: %w", mapError(err))
			}
			ids = ids[n:]
		}
	case !errors.Is(mapError(err), ErrNotFound):
		return fmt.Errorf("record credited runs: %w", mapError(err))
	}
	for len(ids) > 0 {
		n := min(creditedPerDocument, len(ids))
		doc := bson.D{{Key: "_id", Value: NewObjectID()}}
		for _, id := range ids[:n] {
			doc = append(doc, bson.E{Key: id.Hex(), Value: nil})
		}
		if _, err := coll.InsertOne(ctx, doc); err != nil {
			return fmt.Errorf("record credited runs: %w", mapError(err))
		}
		ids = ids[n:]
	}
	return nil
}
