package rundb_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-chess/shoal/rundb"
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
	if !db.Embedded() || db.Name() != rundb.DefaultDatabase || !strings.HasPrefix(db.URI(), "mongodb://127.0.0.1:") {
		t.Errorf("embedded=%v name=%q uri=%q", db.Embedded(), db.Name(), db.URI())
	}
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true}); err != nil {
		t.Fatal(err)
	}

	_, err = openEmbedded(t, dir)
	if !errors.Is(err, rundb.ErrDatabaseInUse) {
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
