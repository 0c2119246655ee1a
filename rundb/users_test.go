package rundb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func mustCreateUser(t *testing.T, db *rundb.DB, nu rundb.NewUser) *rundb.User {
	t.Helper()
	u, err := db.Users.Create(context.Background(), nu)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCreateUser(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	u := mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Email: "a@example.org", Approver: true})
	if !u.Pending {
		t.Error("a new user is not pending by default")
	}
	if !u.IsApprover() || u.EffectiveMachineLimit() != 16 {
		t.Errorf("approver=%v machine limit=%d, want true and 16", u.IsApprover(), u.EffectiveMachineLimit())
	}
	raw, err := rundbtest.Collection(t, db, "users").FindOne(ctx, bson.M{"username": "alice"}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.LookupErr("password"); err == nil {
		t.Error("the users document has a password field: passwords must be stored hashed only")
	}
	hash := raw.Lookup("password_hash").StringValue()
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte("secret")) != nil {
		t.Errorf("password_hash %q is not a bcrypt hash of the password", hash)
	}
	if strings.Contains(raw.String(), "secret") {
		t.Error("the plaintext password appears in the stored document")
	}
	if got := raw.Lookup("registration_time").Type; got != bson.TypeDateTime {
		t.Errorf("registration_time stored as %v", got)
	}
	if v := raw.Lookup("groups", "0").StringValue(); v != rundb.ApproversGroup {
		t.Errorf("groups[0] = %q", v)
	}
	if n, err := db.Users.Count(ctx); err != nil || n != 1 {
		t.Errorf("Count = %d, %v; want 1", n, err)
	}
}

func TestCreateUserRejectsBadInput(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret"})
	for _, tc := range []struct {
		name string
		nu   rundb.NewUser
		want error
	}{
		{"a taken username", rundb.NewUser{Username: "alice", Password: "x"}, rundb.ErrConflict},
		{"a one-letter username", rundb.NewUser{Username: "a", Password: "x"}, rundb.ErrInvalid},
		{"a username with a space", rundb.NewUser{Username: "al ice", Password: "x"}, rundb.ErrInvalid},
		{"an empty password", rundb.NewUser{Username: "bob", Password: ""}, rundb.ErrInvalid},
		{"a password longer than bcrypt takes", rundb.NewUser{Username: "bob", Password: strings.Repeat("p", 73)}, rundb.ErrInvalid},
		{"a negative machine limit", rundb.NewUser{Username: "bob", Password: "x", MachineLimit: -1}, rundb.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Users.Create(ctx, tc.nu); !errors.Is(err, tc.want) {
				t.Errorf("Create: %v, want %v", err, tc.want)
			}
		})
	}
	if n, _ := db.Users.Count(ctx); n != 1 {
		t.Errorf("rejected creations left %d users, want 1", n)
	}
}

func TestAuthenticate(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	mustCreateUser(t, db, rundb.NewUser{Username: "pending", Password: "secret"})
	for _, tc := range []struct {
		name, user, password string
		want                 error
	}{
		{"the right password", "alice", "secret", nil},
		{"a wrong password", "alice", "Secret", rundb.ErrBadCredentials},
		{"an empty password", "alice", "", rundb.ErrBadCredentials},
		{"an unknown user", "nobody", "secret", rundb.ErrBadCredentials},
		{"a pending user", "pending", "secret", rundb.ErrPending},
		{"a pending user with a wrong password", "pending", "nope", rundb.ErrBadCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := db.Users.Authenticate(ctx, tc.user, tc.password)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Authenticate: %v, want %v", err, tc.want)
			}
			if err == nil && u.Username != tc.user {
				t.Errorf("Authenticate returned user %q", u.Username)
			}
		})
	}
	if got := rundb.ErrBadCredentials.Error(); got != "Invalid username or password." {
		t.Errorf("the bad-credentials text is %q; workers and people see fishtest's text", got)
	}
}

func TestCredentialCacheSkipsBcrypt(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	for range 5 {
		if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		if _, err := db.Users.Authenticate(ctx, "alice", "wrong"); !errors.Is(err, rundb.ErrBadCredentials) {
			t.Fatal(err)
		}
	}
	if got := db.Users.SlowChecks(); got != 2 {
		t.Errorf("10 checks of 2 distinct passwords cost %d bcrypt comparisons, want 2", got)
	}
}

func TestCredentialCacheConcurrentChecksShareOneBcrypt(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	db.Users.SetHashCost(bcrypt.DefaultCost) // a comparison long enough for all to arrive during it
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	// All 20 miss the empty cache at about the same time; they must share one comparison. (A
	// straggler that misses the cache just before the shared comparison ends may pay a second.)
	if got := db.Users.SlowChecks(); got < 1 || got > 2 {
		t.Errorf("20 concurrent checks cost %d bcrypt comparisons, want 1", got)
	}
}

func TestBlockTakesEffectAtOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetBlocked(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBlocked) {
		t.Fatalf("right after a block: %v, want ErrBlocked", err)
	}
	if err := db.Users.SetBlocked(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
		t.Fatalf("after unblocking: %v", err)
	}
	// A block made by another instance (another connection) counts too.
	other := rundbtest.OpenNamed(t, db.Name())
	if err := other.Users.SetBlocked(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBlocked) {
		t.Fatalf("after a block by another instance: %v, want ErrBlocked", err)
	}
}

func TestPasswordChangeTakesEffectAtOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "old", Accepted: true})
	if _, err := db.Users.Authenticate(ctx, "alice", "old"); err != nil {
		t.Fatal(err)
	}
	// Changed through another connection, as by another instance.
	other := rundbtest.OpenNamed(t, db.Name())
	if err := other.Users.SetPassword(ctx, "alice", "new"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "old"); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("the old password after a change: %v, want ErrBadCredentials", err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "new"); err != nil {
		t.Fatalf("the new password: %v", err)
	}
	if err := db.Users.SetPassword(ctx, "nobody", "x"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("SetPassword of an unknown user: %v, want ErrNotFound", err)
	}
}

// A users document imported from fishtest holds its password in plaintext. It still logs in,
// and the first successful login replaces the plaintext with a hash.
func TestLegacyPlaintextPasswordIsMigrated(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	users := rundbtest.Collection(t, db, "users")
	_, err := users.InsertOne(ctx, bson.D{
		{Key: "username", Value: "veteran"}, {Key: "password", Value: "hunter2"},
		{Key: "registration_time", Value: bson.NewDateTimeFromTime(at("2015-01-01T00:00:00Z"))},
		{Key: "pending", Value: false}, {Key: "blocked", Value: false}, {Key: "email", Value: "v@example.org"},
		{Key: "groups", Value: bson.A{}}, {Key: "tests_repo", Value: "https://github.com/veteran/Stockfish"},
		{Key: "machine_limit", Value: int32(32)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "veteran", "wrong"); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("a wrong password against plaintext: %v", err)
	}
	raw, _ := users.FindOne(ctx, bson.M{"username": "veteran"}).Raw()
	if raw.Lookup("password").StringValue() != "hunter2" {
		t.Fatal("a failed login changed the stored password")
	}
	u, err := db.Users.Authenticate(ctx, "veteran", "hunter2")
	if err != nil {
		t.Fatalf("the plaintext password does not log in: %v", err)
	}
	if u.EffectiveMachineLimit() != 32 || u.TestsRepo == "" {
		t.Errorf("imported fields lost: %+v", u)
	}
	if stored, _ := db.Users.Get(ctx, "veteran"); u.SessionStamp() != stored.SessionStamp() {
		t.Error("the migrating login returned the user as it was before the migration (a web session opened with it would end at the next click)")
	}
	raw, _ = users.FindOne(ctx, bson.M{"username": "veteran"}).Raw()
	if _, err := raw.LookupErr("password"); err == nil {
		t.Error("the plaintext password is still stored after a successful login")
	}
	if bcrypt.CompareHashAndPassword([]byte(raw.Lookup("password_hash").StringValue()), []byte("hunter2")) != nil {
		t.Error("password_hash does not verify the password")
	}
	if raw.Lookup("email").StringValue() != "v@example.org" {
		t.Error("migration touched other fields")
	}
	if _, err := db.Users.Authenticate(ctx, "veteran", "hunter2"); err != nil {
		t.Fatalf("the password after migration: %v", err)
	}
}

// The migration of a plaintext password must not undo a password change that happened between
// the login's read and the migration's write.
func TestLegacyMigrationDoesNotUndoAPasswordChange(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	_, err := rundbtest.Collection(t, db, "users").InsertOne(ctx, bson.D{
		{Key: "username", Value: "veteran"}, {Key: "password", Value: "hunter2"},
		{Key: "pending", Value: false}, {Key: "blocked", Value: false}, {Key: "groups", Value: bson.A{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetPassword(ctx, "veteran", "changed"); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.HashLegacyPassword(ctx, "veteran", "hunter2"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.Authenticate(ctx, "veteran", "changed"); err != nil {
		t.Errorf("the changed password: %v", err)
	}
	if _, err := db.Users.Authenticate(ctx, "veteran", "hunter2"); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Errorf("the old plaintext password after a change: %v, want ErrBadCredentials", err)
	}
}

func TestUserUpdates(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret"})
	if err := db.Users.Accept(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetApprover(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetMachineLimit(ctx, "alice", 4); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.SetMachineLimit(ctx, "alice", 0); !errors.Is(err, rundb.ErrInvalid) {
		t.Errorf("machine limit 0: %v, want ErrInvalid", err)
	}
	u, err := db.Users.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.Pending || !u.IsApprover() || u.EffectiveMachineLimit() != 4 {
		t.Errorf("after accept, approve and limit 4: pending=%v approver=%v limit=%d", u.Pending, u.IsApprover(), u.EffectiveMachineLimit())
	}
	if err := db.Users.SetApprover(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	if u, _ := db.Users.Get(ctx, "alice"); u.IsApprover() {
		t.Error("SetApprover(false) kept the approvers group")
	}
	if err := db.Users.Accept(ctx, "nobody"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("Accept of an unknown user: %v, want ErrNotFound", err)
	}
}

// BenchmarkAuthenticate measures one worker credential check with the default bcrypt cost,
// with and without the credential cache. Both include the read of the user document.
func BenchmarkAuthenticate(b *testing.B) {
	for _, cached := range []bool{true, false} {
		name := "cached"
		if !cached {
			name = "uncached"
		}
		b.Run(name, func(b *testing.B) {
			db := rundbtest.Open(b)
			ctx := context.Background()
			db.Users.SetHashCost(bcrypt.DefaultCost)
			if !cached {
				db.Users.DisableCredentialCache()
			}
			if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true}); err != nil {
				b.Fatal(err)
			}
			if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := db.Users.Authenticate(ctx, "alice", "secret"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
