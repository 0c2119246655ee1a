package rundb

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/rundb/embedded"
)

// index is one index fishtest's deployments have, by collection.
type index struct {
	coll    string
	name    string
	keys    bson.D
	partial bson.D
	unique  bool
	text    bool
}

func asc(fields ...string) bson.D {
	d := make(bson.D, len(fields))
	for i, f := range fields {
		d[i] = bson.E{Key: f, Value: 1}
	}
	return d
}

var (
	finishedNotDeleted = bson.D{{Key: "finished", Value: true}, {Key: "deleted", Value: false}}
	// indexes lists the indexes of fishtest's create_indexes, with the same names, so that
	// creating them on a fishtest database finds them already there.
	indexes = []index{
		{coll: "runs", name: "unfinished_runs", keys: asc("finished"),
			partial: bson.D{{Key: "finished", Value: false}}},
		{coll: "runs", name: "finished_runs",
			keys:    bson.D{{Key: "finished", Value: 1}, {Key: "last_updated", Value: -1}, {Key: "deleted", Value: 1}},
			partial: bson.D{{Key: "finished", Value: true}}},
		{coll: "runs", name: "finished_green_runs", keys: asc("finished", "is_green", "last_updated"),
			partial: bson.D{{Key: "finished", Value: true}, {Key: "is_green", Value: true}, {Key: "deleted", Value: false}}},
		{coll: "runs", name: "finished_yellow_runs", keys: asc("finished", "is_yellow", "last_updated"),
			partial: bson.D{{Key: "finished", Value: true}, {Key: "is_yellow", Value: true}, {Key: "deleted", Value: false}}},
		{coll: "runs", name: "finished_ltc_runs", keys: asc("finished", "last_updated", "tc_base"),
			partial: bson.D{{Key: "finished", Value: true}, {Key: "tc_base", Value: bson.D{{Key: "$gte", Value: 40}}}, {Key: "deleted", Value: false}}},
		{coll: "runs", name: "user_runs", keys: asc("args.username", "last_updated")},
		{coll: "runs", name: "finished_user_runs", keys: asc("args.username", "finished", "last_updated"),
			partial: finishedNotDeleted},
		{coll: "runs", name: "finished_runs_text", keys: bson.D{{Key: "args.info", Value: "text"}},
			partial: finishedNotDeleted, text: true},

		{coll: "pgns", name: "run_id_1", keys: asc("run_id")},
		{coll: "nns", name: "name_1", keys: asc("name")},
		{coll: "users", name: "username_1", keys: asc("username"), unique: true},
		{coll: "workers", name: "worker_name_1", keys: asc("worker_name"), unique: true},
		{coll: "user_cache", name: "username_1", keys: asc("username")},

		{coll: "actions", name: "actions_time_id", keys: bson.D{{Key: "time", Value: -1}, {Key: "_id", Value: -1}}},
		{coll: "actions", name: "actions_user_time_id", keys: bson.D{{Key: "username", Value: 1}, {Key: "time", Value: -1}, {Key: "_id", Value: -1}}},
		{coll: "actions", name: "actions_action_time_id", keys: bson.D{{Key: "action", Value: 1}, {Key: "time", Value: -1}, {Key: "_id", Value: -1}}},
		{coll: "actions", name: "actions_run_time_id", keys: bson.D{{Key: "run_id", Value: 1}, {Key: "time", Value: -1}, {Key: "_id", Value: -1}}},
		{coll: "actions", name: "username_1__id_1", keys: asc("username", "_id")},
		{coll: "actions", name: "action_1__id_1", keys: asc("action", "_id")},
		{coll: "actions", name: "run_id_1__id_1", keys: asc("run_id", "_id")},
		{coll: "actions", name: "actions_text", text: true, keys: bson.D{
			{Key: "action", Value: "text"}, {Key: "username", Value: "text"}, {Key: "worker", Value: "text"},
			{Key: "message", Value: "text"}, {Key: "run", Value: "text"}, {Key: "user", Value: "text"}, {Key: "nn", Value: "text"}}},
	}
)

// Server error codes EnsureIndexes acts on.
const (
	codeIndexOptionsConflict  = 85
	codeIndexKeySpecsConflict = 86
	codeNotImplemented        = 238
	codeNamespaceNotFound     = 26
	codeNamespaceExists       = 48
)

// IndexReport says what EnsureIndexes could not create as asked.
type IndexReport struct {
	// WithoutFilter lists indexes created without their partial filter because the server does
	// not support partial indexes (the embedded database): they are larger, not wrong.
	WithoutFilter []string
	// Skipped lists indexes that exist under the same name with other options (an older
	// fishtest deployment) or that the server cannot build at all (text indexes on the embedded
	// database), with the reason. Queries that hint them fall back to no hint.
	Skipped []string
	// NotOnEmbedded lists the non-unique indexes left out (and dropped if an older Shoal made
	// them) on the embedded database (FerretDB, started here or reached by URI), whose SQLite
	// backend filters and sorts in Go, using no index but _id's: each one only cost a parse of
	// the whole document on every write, 25 parses of a 400 kB run per run write for the runs
	// collection's seven.
	NotOnEmbedded []string
}

// EnsureIndexes creates every index fishtest's deployments have. It is idempotent: an index that
// already exists is left alone. Indexes the server cannot build as specified are degraded or
// skipped and listed in the report rather than failing start-up.
func (d *DB) EnsureIndexes(ctx context.Context) (IndexReport, error) {
	var rep IndexReport
	present := map[string][]string{} // collection -> its indexes, listed once, on FerretDB
	for _, ix := range indexes {
		label := ix.coll + "." + ix.name
		if d.ferret && !ix.unique {
			// Unique indexes stay: they enforce a rule, not a speed-up.
			have, listed := present[ix.coll]
			if !listed {
				var err error
				if have, err = d.existingIndexes(ctx, ix.coll); err != nil {
					return rep, err
				}
				present[ix.coll] = have
			}
			if slices.Contains(have, ix.name) {
				if err := d.db.Collection(ix.coll).Indexes().DropOne(ctx, ix.name); err != nil {
					return rep, fmt.Errorf("drop index %s: %w", label, err)
				}
			}
			rep.NotOnEmbedded = append(rep.NotOnEmbedded, label)
			continue
		}
		err := createIndex(ctx, d.db.Collection(ix.coll), ix, true)
		var ce mongo.CommandError
		switch {
		case err == nil:
		case len(ix.partial) > 0 && serverCode(err) == codeNotImplemented:
			if err := createIndex(ctx, d.db.Collection(ix.coll), ix, false); err != nil {
				if ix.text {
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%v)", label, err))
					continue
				}
				return rep, fmt.Errorf("create index %s: %w", label, err)
			}
			rep.WithoutFilter = append(rep.WithoutFilter, label)
		case serverCode(err) == codeIndexOptionsConflict, serverCode(err) == codeIndexKeySpecsConflict:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%v)", label, err))
		case ix.text && errors.As(err, &ce):
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%v)", label, err))
		default:
			return rep, fmt.Errorf("create index %s: %w", label, err)
		}
	}
	if d.embedded != nil {
		// Every collection exists from the start, so that each gets its _id lookup index.
		created := map[string]bool{}
		for _, ix := range indexes {
			if created[ix.coll] {
				continue
			}
			created[ix.coll] = true
			err := d.db.CreateCollection(ctx, ix.coll)
			var se mongo.ServerError
			if err != nil && !(errors.As(err, &se) && se.HasErrorCode(codeNamespaceExists)) {
				return rep, fmt.Errorf("create collection %s: %w", ix.coll, err)
			}
		}
		if err := embedded.IndexDatabase(ctx, d.embedded.Dir(), d.db.Name()); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func createIndex(ctx context.Context, coll *mongo.Collection, ix index, withFilter bool) error {
	opts := options.Index().SetName(ix.name)
	if ix.unique {
		opts.SetUnique(true)
	}
	if ix.text {
		opts.SetDefaultLanguage("none")
	}
	if withFilter && len(ix.partial) > 0 {
		opts.SetPartialFilterExpression(ix.partial)
	}
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix.keys, Options: opts})
	return err
}

// existingIndexes is IndexNames, with none for a collection that does not exist yet.
func (d *DB) existingIndexes(ctx context.Context, coll string) ([]string, error) {
	names, err := d.IndexNames(ctx, coll)
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(codeNamespaceNotFound) {
		return nil, nil
	}
	return names, err
}

// serverCode returns the error code a server reply carried, or 0.
func serverCode(err error) int {
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range []int{codeIndexOptionsConflict, codeIndexKeySpecsConflict, codeNotImplemented} {
			if se.HasErrorCode(c) {
				return c
			}
		}
	}
	return 0
}

// IndexNames lists the names of the indexes on a collection, for tests and diagnostics.
func (d *DB) IndexNames(ctx context.Context, coll string) ([]string, error) {
	specs, err := d.db.Collection(coll).Indexes().ListSpecifications(ctx)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", coll, err)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names, nil
}
