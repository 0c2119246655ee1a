package node

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	mongooptions "go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Finding 16: a primary hashes the plaintext passwords of a database imported from fishtest
// when it starts, without waiting for each user's next login.
func TestSecurityPrimaryHashesImportedPasswordsAtStart(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := Start(ctx, cfg, Env{Logger: logger, Getenv: envOf(nil), Stdout: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(mongooptions.Client().ApplyURI(first.DB().URI()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Database(cfg.Database).Collection("users").InsertOne(ctx, bson.D{
		{Key: "username", Value: "veteran"}, {Key: "password", Value: "hunter2-imported"},
		{Key: "pending", Value: false}, {Key: "blocked", Value: false}, {Key: "groups", Value: bson.A{}}})
	_ = client.Disconnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}

	inst := startTestInstance(t, cfg) // the next start, on the same data
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := inst.DB().Users.Get(ctx, "veteran")
		if err != nil {
			t.Fatal(err)
		}
		if u.PasswordHash != "" && u.Password == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the imported plaintext password is still stored 20 s after the start: %+v", u)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := inst.DB().Users.Authenticate(ctx, "veteran", "hunter2-imported"); err != nil {
		t.Errorf("the imported user cannot log in after the start hashed the password: %v", err)
	}
}
