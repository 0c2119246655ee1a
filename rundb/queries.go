package rundb

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// listingProjection leaves out of run listings what only a single-run view needs: the tasks
// (thousands per run) and the SPSA history, as fishtest's listings do.
var listingProjection = bson.D{
	{Key: "tasks", Value: 0}, {Key: "bad_tasks", Value: 0}, {Key: "args.spsa.param_history", Value: 0},
}

// LTCMinTCBase is the smallest tc_base (seconds of base time) of a long-time-control run, as in
// fishtest; the finished_ltc_runs index has it in its filter.
const LTCMinTCBase = 40

// Active returns every unfinished run without its tasks, bad tasks and SPSA history, oldest
// first. The runs come from the database, so on the primary they may lag the run cache by up
// to one flush period.
func (s *RunStore) Active(ctx context.Context) ([]*Run, error) {
	filter := bson.D{{Key: "finished", Value: false}}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetProjection(listingProjection)
	runs, err := s.findWithHint(ctx, filter, opts, "unfinished_runs")
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	return runs, nil
}

// FinishedFilter narrows Finished. The zero value asks for every finished, undeleted run.
type FinishedFilter struct {
	Username    string     // only this user's runs ("" for everyone's)
	SuccessOnly bool       // only green runs
	YellowOnly  bool       // only yellow runs
	LTCOnly     bool       // only runs with tc_base >= LTCMinTCBase
	Since       *time.Time // only runs last updated at or after this instant
}

// Finished returns one page of finished, undeleted runs, most recently updated first, without
// their tasks, bad tasks and SPSA history. page counts from 1; a page past the end is empty.
// It uses the index fishtest would choose for the filter, by name, and runs without a hint if
// the server refuses it.
func (s *RunStore) Finished(ctx context.Context, f FinishedFilter, page, pageSize int) ([]*Run, error) {
	if page < 1 || pageSize < 1 {
		return nil, fmt.Errorf("list finished runs: page %d of size %d: both must be at least 1", page, pageSize)
	}
	search := RunSearch{SuccessOnly: f.SuccessOnly, YellowOnly: f.YellowOnly, LTCOnly: f.LTCOnly, Since: f.Since}
	if f.Username != "" {
		search.Usernames = []string{f.Username}
	}
	opts := options.Find().
		SetSort(bson.D{{Key: "last_updated", Value: -1}}). // the indexes' order: no in-memory sort
		SetProjection(listingProjection).
		SetSkip(int64(page-1) * int64(pageSize)).
		SetLimit(int64(pageSize))
	runs, err := s.findWithHint(ctx, search.filter(), opts, search.hint())
	if err != nil {
		return nil, fmt.Errorf("list finished runs: %w", err)
	}
	return runs, nil
}

// ActionFilter selects actions; every field left at its zero value (an empty string, a nil
// pointer) matches everything, and the set fields must all match.
type ActionFilter struct {
	Action   string // e.g. "failed_task"
	Username string // who did it
	RunID    string // the run's 24-hex-digit id
	Run      string // the run's display name ("<new_tag[:23]>-<hash>")
	Worker   string // a worker's long or short name
	User     string // the user acted on (block_user, accept_user)
	NN       string // the network (upload_nn)
	TaskID   *int
	Before   *float64 // Unix seconds: only actions at or before this time
	After    *float64 // Unix seconds: only actions at or after this time
}

// Find returns up to limit actions matching f, newest first (limit <= 0: no limit). It picks
// the index fishtest would by name and runs without a hint if the server refuses it.
func (s *ActionStore) Find(ctx context.Context, f ActionFilter, limit int) ([]*Action, error) {
	filter := bson.D{}
	for _, e := range []struct{ key, value string }{
		{"action", f.Action}, {"username", f.Username}, {"run_id", f.RunID}, {"run", f.Run},
		{"worker", f.Worker}, {"user", f.User}, {"nn", f.NN},
	} {
		if e.value != "" {
			filter = append(filter, bson.E{Key: e.key, Value: e.value})
		}
	}
	if f.TaskID != nil {
		filter = append(filter, bson.E{Key: "task_id", Value: *f.TaskID})
	}
	if f.Before != nil || f.After != nil {
		var cond bson.D
		if f.After != nil {
			cond = append(cond, bson.E{Key: "$gte", Value: *f.After})
		}
		if f.Before != nil {
			cond = append(cond, bson.E{Key: "$lte", Value: *f.Before})
		}
		filter = append(filter, bson.E{Key: "time", Value: cond})
	}
	hint := "actions_time_id"
	switch {
	case f.Username != "":
		hint = "actions_user_time_id"
	case f.RunID != "":
		hint = "actions_run_time_id"
	case f.Action != "":
		hint = "actions_action_time_id"
	}
	opts := options.Find().SetSort(bson.D{{Key: "time", Value: -1}, {Key: "_id", Value: -1}})
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := s.coll.Find(ctx, filter, opts.SetHint(hint))
	if err != nil {
		cur, err = s.coll.Find(ctx, filter, opts.SetHint(nil))
		if err != nil {
			return nil, fmt.Errorf("find actions: %w", err)
		}
	}
	out := []*Action{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("find actions: %w", err)
	}
	return out, nil
}

// PGNInfo describes one stored task PGN without its bytes.
type PGNInfo struct {
	RunID  string // "<run id>-<task id>"
	TaskID int
	Size   int // the stored size field: the length of the gzip data
}

// ListForRun describes the PGNs stored for a run's tasks, in task order (numerically, so task 10
// comes after task 9). It does not read the data: a run can have thousands of PGNs, so callers
// fetch them one at a time with Get. No PGNs is an empty list, not an error.
func (s *PGNStore) ListForRun(ctx context.Context, runID string) ([]PGNInfo, error) {
	pattern := "^" + regexp.QuoteMeta(runID) + `-[0-9]+$`
	filter := bson.D{{Key: "run_id", Value: bson.Regex{Pattern: pattern}}}
	opts := options.Find().SetProjection(bson.D{{Key: "run_id", Value: 1}, {Key: "size", Value: 1}, {Key: "_id", Value: 0}})
	cur, err := s.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("list pgns of run %s: %w", runID, err)
	}
	var docs []struct {
		RunID string `bson:"run_id"`
		Size  int    `bson:"size"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("list pgns of run %s: %w", runID, err)
	}
	out := make([]PGNInfo, 0, len(docs))
	for _, d := range docs {
		n, err := strconv.Atoi(strings.TrimPrefix(d.RunID, runID+"-"))
		if err != nil { // digits too many for an int: no task has such an id
			continue
		}
		out = append(out, PGNInfo{RunID: d.RunID, TaskID: n, Size: d.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TaskID < out[j].TaskID })
	return out, nil
}

// CountDownload adds one to a network's download count; ErrNotFound if there is no such
// network.
func (s *NNStore) CountDownload(ctx context.Context, name string) error {
	res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "name", Value: name}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "downloads", Value: 1}}}})
	if err != nil {
		return fmt.Errorf("count download of nn %s: %w", name, mapError(err))
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("count download of nn %s: %w", name, ErrNotFound)
	}
	return nil
}

// Plain returns the extra fields with the database's own value types turned into plain Go
// values, for callers that show them (the read API) without knowing BSON: documents become
// map[string]any, arrays []any, datetimes UTC time.Time, ObjectIds ObjectID, binary data
// []byte and decimals their decimal string. Other values are returned as they are.
func (e Extra) Plain() map[string]any {
	if len(e) == 0 {
		return nil
	}
	out := make(map[string]any, len(e))
	for k, v := range e {
		out[k] = plainValue(v)
	}
	return out
}

func plainValue(v any) any {
	switch v := v.(type) {
	case bson.D:
		m := make(map[string]any, len(v))
		for _, e := range v {
			m[e.Key] = plainValue(e.Value)
		}
		return m
	case bson.M:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = plainValue(x)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = plainValue(x)
		}
		return m
	case bson.A:
		return plainSlice(v)
	case []any:
		return plainSlice(v)
	case bson.DateTime:
		return v.Time().UTC()
	case bson.ObjectID:
		return ObjectID(v)
	case bson.Binary:
		return v.Data
	case bson.Decimal128:
		return v.String()
	}
	return v
}

func plainSlice(v []any) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = plainValue(x)
	}
	return out
}
