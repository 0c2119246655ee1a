package rundb

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// exactFold matches a whole string, ignoring case.
func exactFold(s string) bson.Regex {
	return bson.Regex{Pattern: "^" + regexp.QuoteMeta(s) + "$", Options: "i"}
}

// Taken reports whether a user exists whose username equals username, or whose email equals
// email, ignoring case: a new account may not look like an existing one. An empty email
// matches nothing.
func (s *UserStore) Taken(ctx context.Context, username, email string) (nameTaken, emailTaken bool, err error) {
	n, err := s.coll.CountDocuments(ctx, bson.D{{Key: "username", Value: exactFold(username)}})
	if err != nil {
		return false, false, fmt.Errorf("look up username %s: %w", username, mapError(err))
	}
	nameTaken = n > 0
	if email != "" {
		n, err = s.coll.CountDocuments(ctx, bson.D{{Key: "email", Value: exactFold(email)}})
		if err != nil {
			return false, false, fmt.Errorf("look up email of %s: %w", username, mapError(err))
		}
		emailTaken = n > 0
	}
	return nameTaken, emailTaken, nil
}

// SetProfile sets what a user edits on their profile besides the password: the email address
// and the default tests repository ("" for none). ErrNotFound if there is no such user.
func (s *UserStore) SetProfile(ctx context.Context, username, email, testsRepo string) error {
	return s.update(ctx, username, bson.D{{Key: "$set", Value: bson.D{
		{Key: "email", Value: email}, {Key: "tests_repo", Value: testsRepo}}}})
}

// DeletePending deletes a user whose account is still pending approval (a rejected signup).
// ErrNotFound if there is no such pending user: an accepted account is never deleted here.
func (s *UserStore) DeletePending(ctx context.Context, username string) error {
	res, err := s.coll.DeleteOne(ctx, bson.D{{Key: "username", Value: username}, {Key: "pending", Value: true}})
	s.cache.invalidate(username)
	if err != nil {
		return fmt.Errorf("delete pending user %s: %w", username, mapError(err))
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("delete pending user %s: %w", username, ErrNotFound)
	}
	return nil
}

// The groups of users the user management page shows.
const (
	UsersPending   = "pending"   // waiting for an approver
	UsersBlocked   = "blocked"   // blocked by an approver
	UsersIdle      = "idle"      // never contributed: no user_cache entry
	UsersApprovers = "approvers" // members of ApproversGroup
	UsersAll       = "all"
)

// UserQuery selects one page of users.
type UserQuery struct {
	Group  string // one of the Users* groups; "" is UsersAll
	Search string // a part of the username, any case ("" for all)
	// Sort is "username", "registration", "groups" or "email" ("" is username); ties are
	// broken by username.
	Sort  string
	Desc  bool
	Skip  int
	Limit int // 0: no limit
}

// UserGroupCounts is how many users each group of the user management page has.
type UserGroupCounts struct {
	Pending, Blocked, Idle, Approvers, All int
}

// userListProjection leaves the password out of listings.
var userListProjection = bson.D{{Key: "password", Value: 0}, {Key: "password_hash", Value: 0}}

// userGroupFilter returns the filter selecting a group of users; idle needs the usernames
// that have contributor totals.
func (d *DB) userGroupFilter(ctx context.Context, group string) (bson.D, error) {
	switch group {
	case UsersPending:
		return bson.D{{Key: "pending", Value: true}}, nil
	case UsersBlocked:
		return bson.D{{Key: "blocked", Value: true}}, nil
	case UsersApprovers:
		return bson.D{{Key: "groups", Value: ApproversGroup}}, nil
	case UsersIdle:
		names, err := distinctStrings(ctx, d.UserCache.coll, "username")
		if err != nil {
			return nil, fmt.Errorf("list contributors: %w", err)
		}
		return bson.D{{Key: "username", Value: bson.D{{Key: "$nin", Value: names}}}}, nil
	case UsersAll, "":
		return bson.D{}, nil
	}
	return nil, fmt.Errorf("%w: no user group %q", ErrInvalid, group)
}

// ListUsers returns one page of the users in q's group, without their passwords, and how many
// the group has in all (with the search applied). ErrInvalid for an unknown group or sort.
func (d *DB) ListUsers(ctx context.Context, q UserQuery) ([]*User, int, error) {
	filter, err := d.userGroupFilter(ctx, q.Group)
	if err != nil {
		return nil, 0, err
	}
	if q.Search != "" {
		filter = append(filter, bson.E{Key: "username", Value: bson.Regex{Pattern: regexp.QuoteMeta(q.Search), Options: "i"}})
	}
	field, ok := map[string]string{"": "username", "username": "username", "registration": "registration_time",
		"groups": "groups", "email": "email"}[q.Sort]
	if !ok {
		return nil, 0, fmt.Errorf("%w: cannot sort users by %q", ErrInvalid, q.Sort)
	}
	dir := 1
	if q.Desc {
		dir = -1
	}
	sort := bson.D{{Key: field, Value: dir}}
	if field != "username" {
		sort = append(sort, bson.E{Key: "username", Value: 1})
	}
	n, err := d.Users.coll.CountDocuments(ctx, filter)
	if err != nil {
		return nil, 0, fmt.Errorf("count users: %w", mapError(err))
	}
	opts := options.Find().SetSort(sort).SetProjection(userListProjection).SetSkip(int64(q.Skip))
	if q.Limit > 0 {
		opts.SetLimit(int64(q.Limit))
	}
	cur, err := d.Users.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("list users: %w", mapError(err))
	}
	out := []*User{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, 0, fmt.Errorf("list users: %w", mapError(err))
	}
	return out, int(n), nil
}

// CountUserGroups counts the users of every group of the user management page.
func (d *DB) CountUserGroups(ctx context.Context) (UserGroupCounts, error) {
	var c UserGroupCounts
	for _, g := range []struct {
		group string
		n     *int
	}{{UsersPending, &c.Pending}, {UsersBlocked, &c.Blocked}, {UsersIdle, &c.Idle},
		{UsersApprovers, &c.Approvers}, {UsersAll, &c.All}} {
		filter, err := d.userGroupFilter(ctx, g.group)
		if err != nil {
			return c, err
		}
		n, err := d.Users.coll.CountDocuments(ctx, filter)
		if err != nil {
			return c, fmt.Errorf("count %s users: %w", g.group, mapError(err))
		}
		*g.n = int(n)
	}
	return c, nil
}

// CountPending returns how many accounts wait for an approver.
func (s *UserStore) CountPending(ctx context.Context) (int, error) {
	n, err := s.coll.CountDocuments(ctx, bson.D{{Key: "pending", Value: true}})
	if err != nil {
		return 0, fmt.Errorf("count pending users: %w", mapError(err))
	}
	return int(n), nil
}

// --- Contributors ---

// MonthlyContributors returns the store of the last month's contributor totals (fishtest's
// top_month collection), which has user_cache's shape.
func (d *DB) MonthlyContributors() *UserCacheStore {
	return &UserCacheStore{coll: d.db.Collection("top_month")}
}

// ContributorQuery selects one page of contributors.
type ContributorQuery struct {
	// Sort is "cpu_hours", "games", "games_per_hour", "tests", "tests_repo", "last_updated" or
	// "username" ("" is cpu_hours); ties are broken by username.
	Sort  string
	Desc  bool
	Skip  int
	Limit int // 0: no limit
}

// contributorSort returns the sort document of q, or ErrInvalid.
func contributorSort(q ContributorQuery) (field string, dir int, sort bson.D, err error) {
	field = q.Sort
	if field == "" {
		field = "cpu_hours"
	}
	switch field {
	case "cpu_hours", "games", "games_per_hour", "tests", "tests_repo", "last_updated", "username":
	default:
		return "", 0, nil, fmt.Errorf("%w: cannot sort contributors by %q", ErrInvalid, q.Sort)
	}
	dir = 1
	if q.Desc {
		dir = -1
	}
	sort = bson.D{{Key: field, Value: dir}}
	if field != "username" {
		sort = append(sort, bson.E{Key: "username", Value: 1})
	}
	return field, dir, sort, nil
}

// List returns one page of contributors in q's order and how many there are in all.
func (s *UserCacheStore) List(ctx context.Context, q ContributorQuery) ([]*UserStats, int, error) {
	_, _, sort, err := contributorSort(q)
	if err != nil {
		return nil, 0, err
	}
	n, err := s.coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		return nil, 0, fmt.Errorf("count contributors: %w", mapError(err))
	}
	opts := options.Find().SetSort(sort).SetSkip(int64(q.Skip))
	if q.Limit > 0 {
		opts.SetLimit(int64(q.Limit))
	}
	cur, err := s.coll.Find(ctx, bson.D{}, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("list contributors: %w", mapError(err))
	}
	out := []*UserStats{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, 0, fmt.Errorf("list contributors: %w", mapError(err))
	}
	return out, int(n), nil
}

// Find returns the contributor a search names: the one whose username equals search in any
// case, else the first in q's order whose username contains it. ErrNotFound if none does.
func (s *UserCacheStore) Find(ctx context.Context, q ContributorQuery, search string) (string, error) {
	_, _, sort, err := contributorSort(q)
	if err != nil {
		return "", err
	}
	var doc struct {
		Username string `bson:"username"`
	}
	opts := options.FindOne().SetSort(sort).SetProjection(bson.D{{Key: "username", Value: 1}})
	err = s.coll.FindOne(ctx, bson.D{{Key: "username", Value: exactFold(search)}}, opts).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		part := bson.Regex{Pattern: regexp.QuoteMeta(search), Options: "i"}
		err = s.coll.FindOne(ctx, bson.D{{Key: "username", Value: part}}, opts).Decode(&doc)
	}
	if err != nil {
		return "", fmt.Errorf("find contributor %q: %w", search, mapError(err))
	}
	return doc.Username, nil
}

// Rank returns how many contributors come before username in q's order (0 for the first).
// ErrNotFound if username has no totals.
func (s *UserCacheStore) Rank(ctx context.Context, q ContributorQuery, username string) (int, error) {
	field, dir, _, err := contributorSort(q)
	if err != nil {
		return 0, err
	}
	var doc bson.M
	if err := s.coll.FindOne(ctx, bson.D{{Key: "username", Value: username}}).Decode(&doc); err != nil {
		return 0, fmt.Errorf("rank contributor %s: %w", username, mapError(err))
	}
	before := "$lt"
	if dir < 0 {
		before = "$gt"
	}
	var filter bson.D
	if field == "username" {
		filter = bson.D{{Key: "username", Value: bson.D{{Key: before, Value: username}}}}
	} else {
		v := doc[field]
		filter = bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: field, Value: bson.D{{Key: before, Value: v}}}},
			bson.D{{Key: field, Value: v}, {Key: "username", Value: bson.D{{Key: "$lt", Value: username}}}},
		}}}
	}
	n, err := s.coll.CountDocuments(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("rank contributor %s: %w", username, mapError(err))
	}
	return int(n), nil
}

// ContributorTotals sums a contributor collection.
type ContributorTotals struct {
	Contributors int
	CPUHours     float64
	Games        int64
	Tests        int64
}

// Totals returns the sums over every contributor. It adds them up here rather than in the
// database: the embedded database's $group computes only the first of several sums, and a
// contributor collection holds one small document per person.
func (s *UserCacheStore) Totals(ctx context.Context) (ContributorTotals, error) {
	opts := options.Find().SetProjection(bson.D{{Key: "cpu_hours", Value: 1}, {Key: "games", Value: 1},
		{Key: "tests", Value: 1}, {Key: "_id", Value: 0}})
	cur, err := s.coll.Find(ctx, bson.D{}, opts)
	if err != nil {
		return ContributorTotals{}, fmt.Errorf("sum contributors: %w", mapError(err))
	}
	defer cur.Close(ctx)
	var t ContributorTotals
	for cur.Next(ctx) {
		var row struct {
			CPUHours float64 `bson:"cpu_hours"`
			Games    float64 `bson:"games"`
			Tests    float64 `bson:"tests"`
		}
		if err := cur.Decode(&row); err != nil {
			return ContributorTotals{}, fmt.Errorf("sum contributors: %w", err)
		}
		t.Contributors++
		t.CPUHours += row.CPUHours
		t.Games += int64(row.Games)
		t.Tests += int64(row.Tests)
	}
	if err := cur.Err(); err != nil {
		return ContributorTotals{}, fmt.Errorf("sum contributors: %w", mapError(err))
	}
	return t, nil
}

// --- Workers ---

// Blocked returns every blocked worker, most recently changed first.
func (s *WorkerStore) Blocked(ctx context.Context) ([]*Worker, error) {
	opts := options.Find().SetSort(bson.D{{Key: "last_updated", Value: -1}, {Key: "worker_name", Value: 1}})
	cur, err := s.coll.Find(ctx, bson.D{{Key: "blocked", Value: true}}, opts)
	if err != nil {
		return nil, fmt.Errorf("list blocked workers: %w", mapError(err))
	}
	out := []*Worker{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list blocked workers: %w", mapError(err))
	}
	return out, nil
}

// Quarantined lists the workers ever quarantined (Quarantines > 0), quarantined now or not,
// for the approvers' list of users whose machines are quarantined again and again.
func (s *WorkerStore) Quarantined(ctx context.Context) ([]*Worker, error) {
	cur, err := s.coll.Find(ctx, bson.D{{Key: "quarantines", Value: bson.D{{Key: "$gt", Value: 0}}}},
		options.Find().SetSort(bson.D{{Key: "worker_name", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("list quarantined workers: %w", mapError(err))
	}
	out := []*Worker{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list quarantined workers: %w", mapError(err))
	}
	return out, nil
}

// --- The event log ---

// HiddenActions are the kinds of action the event log leaves out unless asked for by name:
// frequent and of interest to operators only.
var HiddenActions = []string{"system_event", "update_stats", "dead_task"}

// ActionQuery selects one page of the event log (Query) or counts its matches (Count).
type ActionQuery struct {
	// Action is the one kind wanted; "" means every kind but HiddenActions. "system_event"
	// includes the older "update_stats".
	Action string
	// Usernames are the users whose actions are wanted; nil means everyone's, an empty
	// non-nil list no one's.
	Usernames []string
	// Text is a part of the message, the worker, the run, the user acted on, the network, the
	// kind or the username, in any case ("" for any).
	Text   string
	RunID  string   // the run's id ("" for any)
	Before *float64 // Unix seconds: only actions at or before this time
	After  *float64 // Unix seconds: only actions at or after this time (the search's window)
	// Sort is "time", "event", "source", "target" or "comment" ("" is time); ties are broken
	// newest first.
	Sort  string
	Desc  bool
	Skip  int
	Limit int // 0: no limit
	// Max, if positive, bounds the log to its newest Max matching actions: sorting and paging
	// happen within them, and Count returns at most Max.
	Max int
}

// actionTextFields are the fields ActionQuery.Text searches.
var actionTextFields = []string{"message", "worker", "run", "user", "nn", "action", "username"}

// actionSortFields are the fields each sort of the event log orders by.
var actionSortFields = map[string][]string{
	"":        {"time"},
	"time":    {"time"},
	"event":   {"action"},
	"source":  {"username", "worker"},
	"target":  {"run", "task_id", "user", "nn", "worker"},
	"comment": {"message"},
}

// actionFilter returns the filter of q, or ok false when it matches nothing at all.
func actionFilter(q ActionQuery) (filter bson.D, ok bool) {
	switch q.Action {
	case "":
		filter = append(filter, bson.E{Key: "action", Value: bson.D{{Key: "$nin", Value: HiddenActions}}})
	case "system_event":
		filter = append(filter, bson.E{Key: "action", Value: bson.D{{Key: "$in", Value: bson.A{"system_event", "update_stats"}}}})
	default:
		filter = append(filter, bson.E{Key: "action", Value: q.Action})
	}
	if q.Usernames != nil {
		if len(q.Usernames) == 0 {
			return nil, false
		}
		filter = append(filter, bson.E{Key: "username", Value: bson.D{{Key: "$in", Value: q.Usernames}}})
	}
	if q.Text != "" {
		// The fields of fishtest's text index, searched for the text as a part, in any case
		// (the embedded database has no text indexes).
		part := bson.Regex{Pattern: regexp.QuoteMeta(q.Text), Options: "i"}
		var anyOf bson.A
		for _, f := range actionTextFields {
			anyOf = append(anyOf, bson.D{{Key: f, Value: part}})
		}
		filter = append(filter, bson.E{Key: "$or", Value: anyOf})
	}
	if q.RunID != "" {
		filter = append(filter, bson.E{Key: "run_id", Value: q.RunID})
	}
	if q.Before != nil || q.After != nil {
		var cond bson.D
		if q.After != nil {
			cond = append(cond, bson.E{Key: "$gte", Value: *q.After})
		}
		if q.Before != nil {
			cond = append(cond, bson.E{Key: "$lte", Value: *q.Before})
		}
		filter = append(filter, bson.E{Key: "time", Value: cond})
	}
	return filter, true
}

// Count returns how many actions match q's filters, at most q.Max when it is positive. Sort,
// Skip and Limit play no part.
func (s *ActionStore) Count(ctx context.Context, q ActionQuery) (int, error) {
	filter, ok := actionFilter(q)
	if !ok {
		return 0, nil
	}
	opts := options.Count()
	if q.Max > 0 {
		opts.SetLimit(int64(q.Max))
	}
	n, err := s.coll.CountDocuments(ctx, filter, opts)
	if err != nil {
		return 0, fmt.Errorf("count actions: %w", mapError(err))
	}
	return int(n), nil
}

// Query returns one page of the event log. ErrInvalid for an unknown sort.
func (s *ActionStore) Query(ctx context.Context, q ActionQuery) ([]*Action, error) {
	fields, ok := actionSortFields[q.Sort]
	if !ok {
		return nil, fmt.Errorf("%w: cannot sort actions by %q", ErrInvalid, q.Sort)
	}
	filter, ok := actionFilter(q)
	if !ok || (q.Max > 0 && q.Skip >= q.Max) {
		return []*Action{}, nil
	}
	newest := bson.D{{Key: "time", Value: -1}, {Key: "_id", Value: -1}}
	dir := 1
	if q.Desc {
		dir = -1
	}
	order := bson.D{}
	for _, f := range fields {
		order = append(order, bson.E{Key: f, Value: dir})
	}
	if fields[0] != "time" {
		order = append(order, newest...)
	} else {
		order = append(order, bson.E{Key: "_id", Value: dir})
	}
	pipeline := bson.A{bson.D{{Key: "$match", Value: filter}}}
	if q.Max > 0 {
		pipeline = append(pipeline, bson.D{{Key: "$sort", Value: newest}}, bson.D{{Key: "$limit", Value: q.Max}})
	}
	pipeline = append(pipeline, bson.D{{Key: "$sort", Value: order}})
	if q.Skip > 0 {
		pipeline = append(pipeline, bson.D{{Key: "$skip", Value: q.Skip}})
	}
	if q.Limit > 0 {
		pipeline = append(pipeline, bson.D{{Key: "$limit", Value: q.Limit}})
	}
	cur, err := s.coll.Aggregate(ctx, pipeline, options.Aggregate().SetAllowDiskUse(true))
	if err != nil {
		return nil, fmt.Errorf("list actions: %w", mapError(err))
	}
	out := []*Action{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list actions: %w", mapError(err))
	}
	return out, nil
}

// Usernames returns every username that appears in the event log, for resolving a part of a
// name to the users it may mean.
func (s *ActionStore) Usernames(ctx context.Context) ([]string, error) {
	names, err := distinctStrings(ctx, s.coll, "username")
	if err != nil {
		return nil, fmt.Errorf("list action usernames: %w", err)
	}
	return names, nil
}

// distinctStrings returns the different string values of field in coll (never nil). MongoDB
// answers the distinct command from an index; the embedded database shapes its reply in a way
// the driver cannot decode, so a failure falls back to grouping, which reads every document.
func distinctStrings(ctx context.Context, coll *mongo.Collection, field string) ([]string, error) {
	var values []any
	if err := coll.Distinct(ctx, field, bson.D{}).Decode(&values); err == nil {
		return stringsOf(values), nil
	}
	cur, err := coll.Aggregate(ctx, bson.A{bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + field}}}}})
	if err != nil {
		return nil, mapError(err)
	}
	var rows []struct {
		ID any `bson:"_id"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, mapError(err)
	}
	values = values[:0]
	for _, r := range rows {
		values = append(values, r.ID)
	}
	return stringsOf(values), nil
}

// stringsOf returns the strings among values.
func stringsOf(values []any) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
