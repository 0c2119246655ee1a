package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the driver FerretDB's SQLite backend uses, for IndexDatabase
)

// The embedded database's SQLite backend finds a document by _id with
// `WHERE _ferretdb_sjson->'$._id' = ?`, but indexes _id under another spelling of that
// expression, which SQLite's planner does not match: every lookup, update or replace by _id
// scans the table and parses every document's JSON. A run write (a replace by _id) then costs
// two parses of the whole runs collection: 0.7 s for 50 runs of 400 tasks, most of the
// embedded server's CPU. An index on the exact expression turns those scans into searches.
// FerretDB does not know of it and never uses it by name; SQLite maintains it and drops it
// with its table.

// idExpr is the expression the SQLite backend filters _id with.
const idExpr = `_ferretdb_sjson->'$._id'`

// idIndexSuffix names the index on a table: <table>_shoal_id.
const idIndexSuffix = "_shoal_id"

// IndexIDLookups creates the _id lookup index on every collection, of every database the
// embedded database holds, that lacks it; where nothing lacks one it only reads. `shoal db`
// runs it every few seconds: the servers that create its collections reach it by URI and
// cannot touch its files. (A server that started the database itself indexes its database in
// EnsureIndexes.) A database dropped meanwhile is skipped.
func (e *Server) IndexIDLookups(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(e.dir, "db", "*"+sqliteExt))
	if err != nil {
		return fmt.Errorf("list the embedded database's files: %w", err)
	}
	var errs []error
	for _, f := range files {
		if err := IndexDatabase(ctx, e.dir, strings.TrimSuffix(filepath.Base(f), sqliteExt)); err != nil {
			if _, statErr := os.Stat(f); errors.Is(statErr, fs.ErrNotExist) {
				continue // dropped meanwhile
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sqliteExt ends the name of each database's file (FerretDB's SQLite backend names it so).
const sqliteExt = ".sqlite"

// IndexDatabase creates the _id lookup index on every collection of database, in the embedded
// database of data directory dir, that lacks it. It is idempotent; collections created
// afterwards get theirs on the next call. SQLite's locking lets it run beside FerretDB, in this
// process or another.
func IndexDatabase(ctx context.Context, dir, database string) error {
	conn, err := openSQLite(dir, database)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections
		WHERE table_name || '`+idIndexSuffix+`' NOT IN (SELECT name FROM sqlite_master WHERE type = 'index')`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return nil // no collection yet
		}
		return fmt.Errorf("list the embedded database's tables: %w", err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (%s)`, quoteIdent(t+idIndexSuffix), quoteIdent(t), idExpr)
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("index _id lookups of %s: %w", t, err)
		}
	}
	return nil
}

// openSQLite opens a connection of our own to database's SQLite file, next to FerretDB's: the file
// is in WAL mode, and a busy timeout waits out FerretDB's writes. It never creates the file
// (mode=rw): a database FerretDB dropped must stay dropped.
func openSQLite(dir, database string) (*sql.DB, error) {
	path := filepath.Join(dir, "db", database+sqliteExt)
	conn, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	conn.SetMaxOpenConns(1)
	return conn, nil
}

// quoteIdent quotes an SQLite identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
