package embedded_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

func openEmbedded(t *testing.T, dir string) (*rundb.DB, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return rundb.Open(ctx, rundb.Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PasswordHashCost: bcrypt.MinCost})
}

func TestEmbeddedDatabaseKeepsDataAndLocksItsDirectory(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	dir := t.TempDir()
	ctx := context.Background()
	db, err := openEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !db.Embedded() || db.Name() != rundb.DefaultDatabase || !strings.HasPrefix(db.URI(), "mongodb://%2F") || !strings.Contains(db.URI(), "mongodb.sock") {
		t.Errorf("embedded=%v name=%q uri=%q", db.Embedded(), db.Name(), db.URI())
	}
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true}); err != nil {
		t.Fatal(err)
	}

	_, err = openEmbedded(t, dir)
	if !errors.Is(err, embedded.ErrDatabaseInUse) {
		t.Fatalf("a second open of the same data directory: %v, want ErrDatabaseInUse", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("the error does not name the pid holding the lock: %v", err)
	}

	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err = openEmbedded(t, dir)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	defer db.Close(ctx)
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
		t.Errorf("the user did not survive a restart: %v", err)
	}
}

// The embedded database finds a run by _id (every run write) through an index, not by parsing
// every run in the collection: SQLite's plan for the backend's own statements searches.
func TestEmbeddedDatabaseIndexesIDLookups(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	dir := t.TempDir()
	ctx := context.Background()
	db, err := openEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsureIndexes(ctx); err != nil { // again, as every start does
		t.Fatalf("second EnsureIndexes: %v", err)
	}
	r := &rundb.Run{ID: rundb.NewObjectID(), Args: rundb.RunArgs{Username: "alice", NumGames: 1000}}
	if err := db.Runs.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Args.NumGames = 2000
	if err := db.Runs.Replace(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Runs.Get(ctx, r.ID); err != nil || got.Args.NumGames != 2000 {
		t.Fatalf("the replaced run: %+v, %v", got, err)
	}

	conn, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "db", db.Name()+".sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var table string
	if err := conn.QueryRow(`SELECT table_name FROM _ferretdb_collections WHERE name = 'runs'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`SELECT _ferretdb_sjson FROM "` + table + `" WHERE _ferretdb_sjson->'$._id' = ?`,
		`UPDATE "` + table + `" SET _ferretdb_sjson = ? WHERE _ferretdb_sjson->'$._id' = ?`,
	} {
		rows, err := conn.Query(`EXPLAIN QUERY PLAN `+stmt, make([]any, strings.Count(stmt, "?"))...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if joined := strings.Join(plan, "; "); !strings.Contains(joined, "USING INDEX") || strings.Contains(joined, "SCAN") {
			t.Errorf("%s\nplan: %s; want a search using an index", stmt, joined)
		}
	}
}

// The embedded database started on its own (as `shoal db` does) serves clients by URI, and
// indexes _id lookups of the collections they create: those clients cannot touch its files.
func TestStartEmbeddedServesClientsByURIAndIndexesTheirCollections(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	dir := t.TempDir()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := embedded.Start(dir, "127.0.0.1:0", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(e.SharedURI(), "mongodb://127.0.0.1:") || !strings.Contains(e.URI(), "mongodb.sock") {
		t.Errorf("SharedURI %q, URI %q: want the TCP front and the socket", e.SharedURI(), e.URI())
	}
	db, err := rundb.Open(ctx, rundb.Options{URI: e.SharedURI(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if db.Embedded() {
		t.Error("a client by URI says it started the embedded database")
	}
	r := &rundb.Run{ID: rundb.NewObjectID(), Args: rundb.RunArgs{Username: "alice", NumGames: 1000}}
	if err := db.Runs.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Runs.Get(ctx, r.ID); err != nil || got.Args.NumGames != 1000 {
		t.Fatalf("the run read back: %+v, %v", got, err)
	}

	runsIndexed := func() bool {
		conn, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "db", db.Name()+".sqlite")+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var n int
		err = conn.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name =
			(SELECT table_name || '_shoal_id' FROM _ferretdb_collections WHERE name = 'runs')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if runsIndexed() {
		t.Fatal("the runs collection is indexed before IndexIDLookups: the test proves nothing")
	}
	if err := e.IndexIDLookups(ctx); err != nil {
		t.Fatal(err)
	}
	if !runsIndexed() {
		t.Error("IndexIDLookups left the runs collection without its _id lookup index")
	}
	if err := e.IndexIDLookups(ctx); err != nil { // again, as every period does
		t.Errorf("a second IndexIDLookups: %v", err)
	}
	if got, err := db.Runs.Get(ctx, r.ID); err != nil || got.Args.NumGames != 1000 {
		t.Errorf("the run after indexing: %+v, %v", got, err)
	}
}

// Asked to listen where another machine could connect, the embedded database refuses before
// it creates or locks anything, and says how to reach it safely instead.
func TestStartEmbeddedRefusesNonLoopbackAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:27017", "[2001:db8::1]:27017"} {
		t.Run(addr, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			e, err := embedded.Start(dir, addr, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				e.Close()
				t.Fatal("it started")
			}
			if !errors.Is(err, embedded.ErrNotLoopback) || !strings.Contains(err.Error(), "SSH") {
				t.Errorf("error %q: want ErrNotLoopback, saying to use SSH", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}
