package rundb

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The queries of the web UI's run pages: searching and counting finished runs, and finding
// usernames by a part of them.

// RunSearch selects finished, undeleted runs for the web UI. The zero value matches every one;
// the set fields must all match.
type RunSearch struct {
	// Usernames keeps the runs of these users only; nil means everyone's and an empty,
	// non-nil slice matches nothing (a user search that found no user).
	Usernames []string
	// Text keeps the runs whose info contains it, ignoring case.
	Text        string
	SuccessOnly bool       // green runs
	YellowOnly  bool       // yellow runs
	LTCOnly     bool       // tc_base >= LTCMinTCBase
	Since       *time.Time // last updated at or after this instant
}

// matchesNothing reports whether the search cannot match any run.
func (f RunSearch) matchesNothing() bool { return f.Usernames != nil && len(f.Usernames) == 0 }

// filter is the search as a MongoDB filter.
func (f RunSearch) filter() bson.D {
	filter := bson.D{{Key: "finished", Value: true}, {Key: "deleted", Value: false}}
	switch len(f.Usernames) {
	case 0:
	case 1:
		filter = append(filter, bson.E{Key: "args.username", Value: f.Usernames[0]})
	default:
		filter = append(filter, bson.E{Key: "args.username", Value: bson.D{{Key: "$in", Value: f.Usernames}}})
	}
	if f.Text != "" {
		filter = append(filter, bson.E{Key: "args.info", Value: bson.Regex{Pattern: regexp.QuoteMeta(f.Text), Options: "i"}})
	}
	if f.LTCOnly {
		filter = append(filter, bson.E{Key: "tc_base", Value: bson.D{{Key: "$gte", Value: LTCMinTCBase}}})
	}
	if f.SuccessOnly {
		filter = append(filter, bson.E{Key: "is_green", Value: true})
	}
	if f.YellowOnly {
		filter = append(filter, bson.E{Key: "is_yellow", Value: true})
	}
	if f.Since != nil {
		filter = append(filter, bson.E{Key: "last_updated", Value: bson.D{{Key: "$gte", Value: f.Since.UTC()}}})
	}
	return filter
}

// hint is the index fishtest would pick for the search, in its order of preference.
func (f RunSearch) hint() string {
	switch {
	case len(f.Usernames) == 1:
		return "finished_user_runs"
	case f.SuccessOnly:
		return "finished_green_runs"
	case f.YellowOnly:
		return "finished_yellow_runs"
	case f.LTCOnly:
		return "finished_ltc_runs"
	}
	return "finished_runs"
}

// SearchFinished returns up to limit runs matching f after skipping skip of them, most recently
// updated first, without their tasks, bad tasks and SPSA history.
func (s *RunStore) SearchFinished(ctx context.Context, f RunSearch, skip, limit int) ([]*Run, error) {
	if skip < 0 || limit < 1 {
		return nil, fmt.Errorf("search finished runs: skip %d, limit %d: skip must be at least 0 and limit at least 1", skip, limit)
	}
	if f.matchesNothing() {
		return nil, nil
	}
	opts := options.Find().
		SetSort(bson.D{{Key: "last_updated", Value: -1}, {Key: "_id", Value: -1}}).
		SetProjection(listingProjection).
		SetSkip(int64(skip)).
		SetLimit(int64(limit))
	runs, err := s.findWithHint(ctx, f.filter(), opts, f.hint())
	if err != nil {
		return nil, fmt.Errorf("search finished runs: %w", err)
	}
	return runs, nil
}

// CountFinished counts the runs matching f, stopping at limit when limit > 0, so that a broad
// search on a large database costs no more than the pages it may show.
func (s *RunStore) CountFinished(ctx context.Context, f RunSearch, limit int) (int, error) {
	if f.matchesNothing() {
		return 0, nil
	}
	opts := options.Count()
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	n, err := s.coll.CountDocuments(ctx, f.filter(), opts)
	if err != nil {
		return 0, fmt.Errorf("count finished runs: %w", err)
	}
	return int(n), nil
}

// UsernamesContaining returns up to limit usernames that contain part, ignoring case: the exact
// match first (ignoring case), then those starting with part, then the rest, each group in
// alphabetical order.
func (s *UserStore) UsernamesContaining(ctx context.Context, part string, limit int) ([]string, error) {
	part = strings.TrimSpace(part)
	if part == "" || limit < 1 {
		return nil, nil
	}
	filter := bson.D{{Key: "username", Value: bson.Regex{Pattern: regexp.QuoteMeta(part), Options: "i"}}}
	opts := options.Find().SetProjection(bson.D{{Key: "username", Value: 1}}).
		SetSort(bson.D{{Key: "username", Value: 1}})
	cur, err := s.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("find usernames containing %q: %w", part, err)
	}
	var docs []struct {
		Username string `bson:"username"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("find usernames containing %q: %w", part, err)
	}
	names := make([]string, 0, len(docs))
	for _, d := range docs {
		names = append(names, d.Username)
	}
	lower := strings.ToLower(part)
	rank := func(name string) int {
		n := strings.ToLower(name)
		switch {
		case n == lower:
			return 0
		case strings.HasPrefix(n, lower):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	if len(names) > limit {
		names = names[:limit]
	}
	return names, nil
}
