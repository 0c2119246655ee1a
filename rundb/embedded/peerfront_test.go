package embedded_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

// Finding 3: the embedded database is not open to every local account. By default it listens
// on a Unix socket in a directory only Shoal's user may enter, and on no TCP port; a TCP
// address is opened only when asked for, and then admits only processes of Shoal's own user:
// another user's connection is closed before it reads or writes anything.
func TestSecurityEmbeddedDatabaseIsPrivate(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	db, err := rundb.Open(ctx, rundb.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if !strings.HasPrefix(db.URI(), "mongodb://%2F") || db.SharedURI() != db.URI() || strings.Contains(db.URI(), "127.0.0.1") {
		t.Errorf("the default embedded database is reached at %q (shared as %q), want only its Unix socket", db.URI(), db.SharedURI())
	}
	info, err := os.Stat(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("the database's directory (holding its socket and files) has mode %o, want 0700", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, "db", embedded.SocketName)); err != nil {
		t.Errorf("no socket in the private directory: %v", err)
	}
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "secret-password", Accepted: true}); err != nil {
		t.Fatal(err)
	}

	// Asked for TCP: this user's processes get in through the front...
	dir2 := t.TempDir()
	shared, err := rundb.Open(ctx, rundb.Options{DataDir: dir2, EmbeddedAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close(ctx)
	if !strings.HasPrefix(shared.SharedURI(), "mongodb://127.0.0.1:") {
		t.Fatalf("shared URI %q, want the TCP front", shared.SharedURI())
	}
	if err := pingURI(shared.SharedURI()); err != nil {
		t.Errorf("this user's process through the TCP front: %v", err)
	}
	// ...and a front that stands for another user (Shoal's user is not the caller's) lets
	// nothing through.
	frontAddr, closeFront, err := embedded.StartFrontFor("127.0.0.1:0", filepath.Join(dir2, "db", embedded.SocketName), os.Getuid()+1, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFront()
	if err := pingURI("mongodb://" + frontAddr + "/"); err == nil {
		t.Error("a process of another user reached the database through the TCP front")
	}
}

// pingURI connects to uri and pings, within a few seconds.
func pingURI(uri string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	if err := client.Ping(ctx, nil); err != nil {
		return err
	}
	err = client.Database("fishtest_new").Collection("users").FindOne(ctx, bson.D{}).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil // read, and found nothing: the database answered
	}
	return err
}

// The socket's URI survives the characters a data directory's path may hold: the driver reads
// a "+" of the host part as a space, and a test's name puts "+", "," and "[" in its directory.
func TestEmbeddedSocketURIWithAwkwardPath(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	dir := filepath.Join(t.TempDir(), "a+b, c[0]")
	db, err := rundb.Open(context.Background(), rundb.Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if err := pingURI(db.URI()); err != nil {
		t.Errorf("connect to %s: %v", db.URI(), err)
	}
}

// The premise of the loopback-only rule (docs/SECURITY.md): FerretDB's SQLite handler, as
// embedded, accepts any user and password, and offers no mechanism that checks one. If an
// upgrade makes this fail, the database may be able to face other machines with a password.
func TestEmbeddedDatabaseChecksNoPasswords(t *testing.T) {
	if os.Getenv("SHOAL_TEST_MONGO_URI") != "" {
		t.Skip("tests the embedded database")
	}
	e, err := embedded.Start(t.TempDir(), "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	hostPort := strings.TrimSuffix(strings.TrimPrefix(e.SharedURI(), "mongodb://"), "/")
	if err := pingURI("mongodb://nobody:made-up@" + hostPort + "/?authMechanism=PLAIN"); err != nil {
		t.Errorf("a made-up user and password (PLAIN) were refused: %v; FerretDB checks passwords now", err)
	}
	err = pingURI("mongodb://nobody:made-up@" + hostPort + "/?authMechanism=SCRAM-SHA-256")
	if err == nil || !strings.Contains(err.Error(), "Unsupported authentication mechanism") {
		t.Errorf("SCRAM-SHA-256: %v; want it unsupported, as in FerretDB 1.24 embedded", err)
	}
}
