package rundb_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// Finding 9: a login for a username that does not exist pays for a bcrypt comparison like a
// known one with a wrong password, so that its answer's timing does not tell which usernames
// exist. (Timed on the audit's machine: 4 ms against 65 ms.) The mechanism is checked, not the
// clock: both kinds of failure cost one slow check.
func TestSecurityUnknownUsernameCostsABcryptComparison(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "known", Password: "correct-horse-1", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ user, password string }{
		{"known", "wrong-password-1"},
		{"nobodyatall", "wrong-password-2"},
		{"nobodyatall", "wrong-password-3"},
	} {
		before := db.Users.SlowChecks()
		if _, err := db.Users.Authenticate(ctx, c.user, c.password); !errors.Is(err, rundb.ErrBadCredentials) {
			t.Fatalf("%s: %v, want the same ErrBadCredentials for both", c.user, err)
		}
		if got := db.Users.SlowChecks() - before; got != 1 {
			t.Errorf("a failed login as %s made %d bcrypt comparisons, want 1 like any other", c.user, got)
		}
	}
	if _, err := db.Users.Get(ctx, "nobodyatall"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a failed login made the unknown user: %v", err)
	}
}

// Finding 16: plaintext passwords imported from fishtest are hashed at start, not only at each
// user's next login; twice at once, or again, changes nothing more; hashed users are untouched.
func TestSecurityLegacyPasswordsAreHashedAtStart(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	users := rundbtest.Collection(t, db, "users")
	for _, name := range []string{"veteran1", "veteran2", "veteran3"} {
		if _, err := users.InsertOne(ctx, bson.D{{Key: "username", Value: name}, {Key: "password", Value: name + "-pw"},
			{Key: "pending", Value: false}, {Key: "blocked", Value: false}, {Key: "groups", Value: bson.A{}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "modern", Password: "modern-password-1", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	modernBefore, _ := db.Users.Get(ctx, "modern")

	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i := range counts { // two instances starting at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := db.Users.HashLegacyPasswords(ctx)
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	if counts[0]+counts[1] < 3 {
		t.Errorf("hashed %v passwords, want all 3", counts)
	}
	for _, name := range []string{"veteran1", "veteran2", "veteran3"} {
		raw, err := users.FindOne(ctx, bson.M{"username": name}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.LookupErr("password"); err == nil {
			t.Errorf("%s: the plaintext is still stored", name)
		}
		if bcrypt.CompareHashAndPassword([]byte(raw.Lookup("password_hash").StringValue()), []byte(name+"-pw")) != nil {
			t.Errorf("%s: the hash does not verify the password", name)
		}
		if _, err := db.Users.Authenticate(ctx, name, name+"-pw"); err != nil {
			t.Errorf("%s cannot log in after the migration: %v", name, err)
		}
	}
	if n, err := db.Users.HashLegacyPasswords(ctx); err != nil || n != 0 {
		t.Errorf("a second run hashed %d (%v), want 0", n, err)
	}
	if after, _ := db.Users.Get(ctx, "modern"); after.PasswordHash != modernBefore.PasswordHash {
		t.Error("a hashed user's password changed")
	}
}
