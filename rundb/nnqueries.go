package rundb

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// NNFilter selects networks for the networks page; the zero value selects them all.
type NNFilter struct {
	Name       string // a substring of the name, any case
	User       string // a substring of the uploader's name, any case
	MasterOnly bool   // only nets that became master's default net
}

func (f NNFilter) bson() bson.D {
	filter := bson.D{}
	if f.Name != "" {
		filter = append(filter, bson.E{Key: "name", Value: bson.Regex{Pattern: regexp.QuoteMeta(f.Name), Options: "i"}})
	}
	if f.User != "" {
		filter = append(filter, bson.E{Key: "user", Value: bson.Regex{Pattern: regexp.QuoteMeta(f.User), Options: "i"}})
	}
	if f.MasterOnly {
		filter = append(filter, bson.E{Key: "is_master", Value: true})
	}
	return filter
}

// NNTest is a run that tested a network: the first or the last one approved with it.
type NNTest struct {
	Date time.Time
	ID   string // the run's id
}

// NNInfo is one network as the networks page lists it.
type NNInfo struct {
	Name      string
	User      string
	Downloads int
	IsMaster  bool
	// Uploaded is when the network was recorded (the creation time of its ObjectId); zero if
	// its _id is not an ObjectId.
	Uploaded            time.Time
	FirstTest, LastTest *NNTest // nil when no approved run has used the network
}

// nnDoc is the shape the listing reads (the nns documents hold nothing large, but the
// projection keeps it that way).
type nnDoc struct {
	ID        any     `bson:"_id"`
	Name      string  `bson:"name"`
	User      string  `bson:"user"`
	Downloads int     `bson:"downloads"`
	IsMaster  bool    `bson:"is_master"`
	FirstTest *nnTest `bson:"first_test"`
	LastTest  *nnTest `bson:"last_test"`
}

type nnTest struct {
	Date time.Time `bson:"date"`
	ID   any       `bson:"id"` // a string in fishtest's documents; an ObjectId is accepted too
}

func (t *nnTest) info() *NNTest {
	if t == nil {
		return nil
	}
	out := &NNTest{Date: t.Date}
	switch id := t.ID.(type) {
	case string:
		out.ID = id
	case bson.ObjectID:
		out.ID = id.Hex()
	}
	return out
}

var nnListProjection = bson.D{
	{Key: "_id", Value: 1}, {Key: "name", Value: 1}, {Key: "user", Value: 1}, {Key: "downloads", Value: 1},
	{Key: "is_master", Value: 1}, {Key: "first_test", Value: 1}, {Key: "last_test", Value: 1},
}

// nnSortFields are the sort keys List accepts, and the field each sorts by. Uploaded is the
// _id's order, as ObjectIds begin with their creation time.
var nnSortFields = map[string]string{
	"time": "_id", "name": "name", "user": "user", "downloads": "downloads",
	"first_test": "first_test.date", "last_test": "last_test.date",
}

// NNSortKeys are the sort keys List accepts.
var NNSortKeys = []string{"time", "name", "user", "first_test", "last_test", "downloads"}

// List returns the networks matching f, sorted by key (one of NNSortKeys; networks that tie
// are in name order, then upload order, so pages never shuffle), skipping skip and returning
// at most limit (limit <= 0: all).
func (s *NNStore) List(ctx context.Context, f NNFilter, key string, desc bool, skip, limit int) ([]NNInfo, error) {
	field, ok := nnSortFields[key]
	if !ok {
		return nil, fmt.Errorf("list nns: unknown sort key %q", key)
	}
	dir := 1
	if desc {
		dir = -1
	}
	sort := bson.D{{Key: field, Value: dir}}
	for _, tie := range []string{"name", "_id"} {
		if tie != field {
			sort = append(sort, bson.E{Key: tie, Value: dir})
		}
	}
	opts := options.Find().SetSort(sort).SetProjection(nnListProjection).SetSkip(int64(max(skip, 0)))
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := s.coll.Find(ctx, f.bson(), opts)
	if err != nil {
		return nil, fmt.Errorf("list nns: %w", err)
	}
	var docs []nnDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("list nns: %w", err)
	}
	out := make([]NNInfo, len(docs))
	for i, d := range docs {
		out[i] = NNInfo{Name: d.Name, User: d.User, Downloads: d.Downloads, IsMaster: d.IsMaster,
			FirstTest: d.FirstTest.info(), LastTest: d.LastTest.info()}
		if id, ok := d.ID.(bson.ObjectID); ok {
			out[i].Uploaded = id.Timestamp().UTC()
		}
	}
	return out, nil
}

// NNSummary are the totals of a set of networks.
type NNSummary struct {
	Nets         int // how many
	MasterNets   int // how many became master's default net
	Contributors int // distinct uploaders
	Downloads    int // downloads of them all
}

// Summary totals the networks matching f. The nns collection is small (a few thousand
// documents), so it is computed here over a projection of the few fields it needs rather than
// with an aggregation pipeline.
func (s *NNStore) Summary(ctx context.Context, f NNFilter) (NNSummary, error) {
	proj := bson.D{{Key: "_id", Value: 0}, {Key: "user", Value: 1}, {Key: "downloads", Value: 1}, {Key: "is_master", Value: 1}}
	cur, err := s.coll.Find(ctx, f.bson(), options.Find().SetProjection(proj))
	if err != nil {
		return NNSummary{}, fmt.Errorf("summarise nns: %w", err)
	}
	defer cur.Close(ctx)
	var sum NNSummary
	users := map[string]bool{}
	for cur.Next(ctx) {
		var d struct {
			User      string `bson:"user"`
			Downloads int    `bson:"downloads"`
			IsMaster  bool   `bson:"is_master"`
		}
		if err := cur.Decode(&d); err != nil {
			return NNSummary{}, fmt.Errorf("summarise nns: %w", err)
		}
		sum.Nets++
		sum.Downloads += d.Downloads
		if d.IsMaster {
			sum.MasterNets++
		}
		if d.User != "" {
			users[d.User] = true
		}
	}
	if err := cur.Err(); err != nil {
		return NNSummary{}, fmt.Errorf("summarise nns: %w", err)
	}
	sum.Contributors = len(users)
	return sum, nil
}

// Delete removes a network's document; no such network is not an error. The upload uses it to
// take back a network whose upload could not be completed.
func (s *NNStore) Delete(ctx context.Context, name string) error {
	if _, err := s.coll.DeleteMany(ctx, bson.D{{Key: "name", Value: name}}); err != nil {
		return fmt.Errorf("delete nn %s: %w", name, mapError(err))
	}
	return nil
}
