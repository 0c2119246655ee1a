// Package rundbtest gives tests a real database: one embedded database per test binary, and a
// fresh database in it for each test, dropped when the test ends. When SHOAL_TEST_MONGO_URI is
// set, the databases are created on that server instead.
package rundbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
)

// server is the database server the test binary shares; set up by Main.
var server struct {
	sync.Mutex
	uri string
	db  *rundb.DB // the embedded database's own handle, nil with SHOAL_TEST_MONGO_URI
	dir string
}

// Main runs m with a database server: the one SHOAL_TEST_MONGO_URI names, or an embedded
// database in a temporary directory that is removed afterwards. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if uri := os.Getenv("SHOAL_TEST_MONGO_URI"); uri != "" {
		server.uri = uri
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "shoal-test-db-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rundbtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	db, err := rundb.Open(ctx, rundb.Options{DataDir: dir, Database: "shoal_test_admin", Logger: quietLogger()})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rundbtest: start embedded database:", err)
		return 1
	}
	server.uri, server.db, server.dir = db.URI(), db, dir
	defer db.Close(context.Background())
	return m.Run()
}

// URI returns the address of the test database server. Main must be running.
func URI(t testing.TB) string {
	t.Helper()
	server.Lock()
	defer server.Unlock()
	if server.uri == "" {
		t.Fatal("rundbtest: no database server; call rundbtest.Main from TestMain")
	}
	return server.uri
}

// NewName returns a database name no other test uses.
func NewName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_", ".", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

// Open returns a connection to a new, empty database with its indexes, dropped and closed when
// the test ends. Password hashing uses bcrypt's minimum cost so tests stay fast.
func Open(t testing.TB) *rundb.DB {
	t.Helper()
	return OpenNamed(t, NewName(t))
}

// OpenNamed is Open with a chosen database name; the database is dropped when the test ends.
func OpenNamed(t testing.TB, name string) *rundb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := rundb.Open(ctx, rundb.Options{
		URI: URI(t), Database: name, Logger: quietLogger(), PasswordHashCost: bcrypt.MinCost,
	})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	dropAtCleanup(t, db)
	if _, err := db.EnsureIndexes(ctx); err != nil {
		t.Fatalf("create indexes: %v", err)
	}
	return db
}

// OpenMetered opens a fresh test database, without indexes, whose commands report to a fresh
// registry; the database is dropped when the test ends.
func OpenMetered(t testing.TB) (*rundb.DB, *metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := rundb.Open(ctx, rundb.Options{URI: URI(t), Database: NewName(t), Metrics: m})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	dropAtCleanup(t, db)
	return db, m, reg
}

// dropAtCleanup drops db and closes it when the test ends.
func dropAtCleanup(t testing.TB, db *rundb.DB) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Errorf("drop test database: %v", err)
		}
		if err := db.Close(ctx); err != nil {
			t.Errorf("close test database: %v", err)
		}
	})
}

func quietLogger() *slog.Logger {
	if os.Getenv("SHOAL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Collection is a driver handle on one of the test database's collections, to write and read
// documents as fishtest would, behind rundb's back. It is disconnected when the test ends.
func Collection(t testing.TB, db *rundb.DB, name string) *mongo.Collection {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(URI(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database(db.Name()).Collection(name)
}
