package rundb

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the driver FerretDB's SQLite backend uses, for indexIDLookups
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

// indexIDLookups creates the _id lookup index on every collection of database that lacks it.
// It is idempotent; collections created afterwards get theirs on the next call.
func (e *embedded) indexIDLookups(ctx context.Context, database string) error {
	conn, err := e.sqlite(database)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections`)
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

// sqlite opens a connection of our own to database's SQLite file, next to FerretDB's: the file
// is in WAL mode, and a busy timeout waits out FerretDB's writes.
func (e *embedded) sqlite(database string) (*sql.DB, error) {
	path := filepath.Join(e.dir, "db", database+".sqlite")
	conn, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	conn.SetMaxOpenConns(1)
	return conn, nil
}

// quoteIdent quotes an SQLite identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
