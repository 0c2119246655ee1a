package rundb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func mustToken(t *testing.T, users *rundb.UserStore, username, name string, scope rundb.TokenScope, life time.Duration) string {
	t.Helper()
	tok, _, err := users.CreateToken(context.Background(), username, rundb.NewToken{Name: name, Scope: scope, Lifetime: life})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func workerAccess(username, secret string) rundb.Access {
	return rundb.Access{Username: username, Secret: secret, Scope: rundb.ScopeWorker, Address: "192.0.2.1"}
}

func TestTokenIsStoredHashedAndShownOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	tok := mustToken(t, db.Users, "alice", "box-1", rundb.ScopeWorker, 0)
	if name, ok := rundb.TokenUsername(tok); !ok || name != "alice" || len(tok) < 30 {
		t.Fatalf("token %q: TokenUsername = %q, %v", tok, name, ok)
	}
	raw, err := rundbtest.Collection(t, db, "users").FindOne(ctx, bson.M{"username": "alice"}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw.String(), tok) || strings.Contains(raw.String(), tok[len(tok)-26:]) {
		t.Error("the token appears in the stored document")
	}
	list, err := db.Users.Tokens(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].Name != "box-1" || list[0].Scope != rundb.ScopeWorker || list[0].LastUse != nil {
		t.Fatalf("Tokens = %+v, %v", list, err)
	}
	if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); err != nil {
		t.Fatalf("the worker token in the password field: %v", err)
	}
	if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", "secret")); err != nil {
		t.Fatalf("the password still works on the worker path: %v", err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", tok); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Errorf("a token logs into the web UI: %v", err)
	}
}

func TestTokenScopes(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	mustCreateUser(t, db, rundb.NewUser{Username: "bob", Password: "secret", Accepted: true})
	worker := mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, 0)
	api := mustToken(t, db.Users, "alice", "a", rundb.ScopeAPI, 0)
	for _, tc := range []struct {
		name string
		a    rundb.Access
		ok   bool
	}{
		{"a worker token on the worker path", workerAccess("alice", worker), true},
		{"an api token on the worker path", workerAccess("alice", api), false},
		{"an api token as a Bearer", rundb.Access{Username: "alice", Secret: api, Scope: rundb.ScopeAPI, TokenOnly: true}, true},
		{"a worker token as a Bearer", rundb.Access{Username: "alice", Secret: worker, Scope: rundb.ScopeAPI, TokenOnly: true}, false},
		{"a password as a Bearer", rundb.Access{Username: "alice", Secret: "secret", Scope: rundb.ScopeAPI, TokenOnly: true}, false},
		{"alice's token for bob", workerAccess("bob", worker), false},
		{"a token for a user that does not exist", workerAccess("carol", worker), false},
		{"a token with a changed letter", workerAccess("alice", changeLast(worker)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.Users.AuthenticateAccessCached(ctx, tc.a)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, rundb.ErrBadCredentials) {
				t.Fatalf("got %v, want ErrBadCredentials", err)
			}
		})
	}
}

func TestTokenExpires(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	db.Users.SetUserClock(clock)
	tok := mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, time.Hour)
	if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("an expired token: %v, want ErrBadCredentials", err)
	}
	if u, cached, err := db.Users.AuthenticateAccessIfCached(ctx, workerAccess("alice", tok)); cached && err == nil {
		t.Fatalf("an expired token let in from the cache: %v", u.Username)
	}
	// An expired token's name may be used again.
	mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, time.Hour)
}

func TestTokenRevocationBound(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	other := db.Users.Second() // another instance's store
	var mu sync.Mutex
	now := time.Now()
	other.SetUserCacheClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	tok := mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, 0)
	for _, users := range []*rundb.UserStore{db.Users, other} {
		if _, err := users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Users.RevokeToken(ctx, "alice", "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("on the revoking instance: %v, want ErrBadCredentials at once", err)
	}
	mu.Lock()
	now = now.Add(rundb.UserCacheTTL)
	mu.Unlock()
	if _, err := other.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("on another instance after UserCacheTTL: %v, want ErrBadCredentials", err)
	}
	if err := db.Users.RevokeToken(ctx, "alice", "w"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("revoking it again: %v, want ErrNotFound", err)
	}
}

func TestPasswordChangeAndBlockRevokeTokens(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	for _, tc := range []struct {
		name   string
		revoke func() error
	}{
		{"a password change", func() error { return db.Users.SetPassword(ctx, "alice", "another secret") }},
		{"a block", func() error { return db.Users.SetBlocked(ctx, "alice", true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := db.Users.SetBlocked(ctx, "alice", false); err != nil {
				t.Fatal(err)
			}
			tok := mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, 0)
			if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); err != nil {
				t.Fatal(err)
			}
			if err := tc.revoke(); err != nil {
				t.Fatal(err)
			}
			if list, err := db.Users.Tokens(ctx, "alice"); err != nil || len(list) != 0 {
				t.Errorf("tokens left: %+v, %v", list, err)
			}
			if err := db.Users.SetBlocked(ctx, "alice", false); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Users.AuthenticateAccessCached(ctx, workerAccess("alice", tok)); !errors.Is(err, rundb.ErrBadCredentials) {
				t.Fatalf("the token after %s: %v, want ErrBadCredentials", tc.name, err)
			}
		})
	}
}

func TestTokenBadInputChangesNothing(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	mustToken(t, db.Users, "alice", "taken", rundb.ScopeWorker, 0)
	for _, tc := range []struct {
		name string
		nt   rundb.NewToken
		want error
	}{
		{"an empty name", rundb.NewToken{Name: "", Scope: rundb.ScopeWorker}, rundb.ErrInvalid},
		{"a name with a space", rundb.NewToken{Name: "my box", Scope: rundb.ScopeWorker}, rundb.ErrInvalid},
		{"a name with an underscore", rundb.NewToken{Name: "my_box", Scope: rundb.ScopeWorker}, rundb.ErrInvalid},
		{"a name too long", rundb.NewToken{Name: strings.Repeat("a", 41), Scope: rundb.ScopeWorker}, rundb.ErrInvalid},
		{"an unknown scope", rundb.NewToken{Name: "x", Scope: "admin"}, rundb.ErrInvalid},
		{"no scope", rundb.NewToken{Name: "x"}, rundb.ErrInvalid},
		{"an expiry over a year", rundb.NewToken{Name: "x", Scope: rundb.ScopeAPI, Lifetime: 367 * 24 * time.Hour}, rundb.ErrInvalid},
		{"an expiry in the past", rundb.NewToken{Name: "x", Scope: rundb.ScopeAPI, Lifetime: -time.Hour}, rundb.ErrInvalid},
		{"a name in use", rundb.NewToken{Name: "taken", Scope: rundb.ScopeAPI}, rundb.ErrTokenExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, _, err := db.Users.CreateToken(ctx, "alice", tc.nt)
			if !errors.Is(err, tc.want) || tok != "" {
				t.Fatalf("got %q, %v; want %v", tok, err, tc.want)
			}
			if list, _ := db.Users.Tokens(ctx, "alice"); len(list) != 1 {
				t.Fatalf("tokens now %+v", list)
			}
		})
	}
	if _, _, err := db.Users.CreateToken(ctx, "nobody", rundb.NewToken{Name: "x", Scope: rundb.ScopeAPI}); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a token for no user: %v", err)
	}
}

func TestAtMostMaxTokensEvenAtOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	var wg sync.WaitGroup
	for i := range rundb.MaxTokens + 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "t" + string(rune('a'+i)), Scope: rundb.ScopeWorker})
		}()
	}
	wg.Wait()
	list, err := db.Users.Tokens(ctx, "alice")
	if err != nil || len(list) > rundb.MaxTokens {
		t.Fatalf("%d tokens, %v; at most %d", len(list), err, rundb.MaxTokens)
	}
	for len(list) < rundb.MaxTokens { // the ones that lost a race may be retried
		mustToken(t, db.Users, "alice", "late"+string(rune('a'+len(list))), rundb.ScopeWorker, 0)
		list, _ = db.Users.Tokens(ctx, "alice")
	}
	if _, _, err := db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "one-more", Scope: rundb.ScopeWorker}); !errors.Is(err, rundb.ErrInvalid) {
		t.Fatalf("token %d: %v, want ErrInvalid", rundb.MaxTokens+1, err)
	}
}

// A token's last use is written at most once per TokenUseInterval, never a write per call, and
// a use served from the cache reads and writes nothing until a write is due.
func TestTokenLastUseWrittenOncePerInterval(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	db.Users.SetUserClock(clock)
	tok := mustToken(t, db.Users, "alice", "w", rundb.ScopeWorker, 0)
	a := workerAccess("alice", tok)
	if _, cached, _ := db.Users.AuthenticateAccessIfCached(ctx, a); cached {
		t.Fatal("nothing cached yet")
	}
	if _, err := db.Users.AuthenticateAccessCached(ctx, a); err != nil {
		t.Fatal(err)
	}
	first := now
	list, _ := db.Users.Tokens(ctx, "alice")
	if list[0].LastUse == nil || !list[0].LastUse.Time.Equal(first.UTC().Truncate(time.Millisecond)) || list[0].LastUse.Address != "192.0.2.1" {
		t.Fatalf("last use %+v", list[0].LastUse)
	}
	mu.Lock()
	now = now.Add(TokenHalf)
	mu.Unlock()
	if u, cached, err := db.Users.AuthenticateAccessIfCached(ctx, a); !cached || err != nil || u.Username != "alice" {
		t.Fatalf("within the interval the cache answers: %v, %v", cached, err)
	}
	a.Address = "198.51.100.7"
	if _, err := db.Users.AuthenticateAccessCached(ctx, a); err != nil {
		t.Fatal(err)
	}
	if list, _ = db.Users.Tokens(ctx, "alice"); !list[0].LastUse.Time.Equal(first.UTC().Truncate(time.Millisecond)) {
		t.Fatalf("written again within the interval: %+v", list[0].LastUse)
	}
	mu.Lock()
	now = now.Add(TokenHalf)
	mu.Unlock()
	if _, cached, _ := db.Users.AuthenticateAccessIfCached(ctx, a); cached {
		t.Fatal("a due write is left to the caller with a token of the pool")
	}
	if _, err := db.Users.AuthenticateAccessCached(ctx, a); err != nil {
		t.Fatal(err)
	}
	if list, _ = db.Users.Tokens(ctx, "alice"); list[0].LastUse.Address != "198.51.100.7" {
		t.Fatalf("not written after the interval: %+v", list[0].LastUse)
	}
}

const TokenHalf = rundb.TokenUseInterval / 2

// changeLast returns s with its last letter changed.
func changeLast(s string) string {
	if strings.HasSuffix(s, "A") {
		return s[:len(s)-1] + "B"
	}
	return s[:len(s)-1] + "A"
}

// BenchmarkWorkerPathCredentials measures the worker path's check of a call whose user is in
// the user cache (AuthenticateAccessIfCached, no database work): a password verified in the
// last minutes (the credential cache), a password never verified (bcrypt at the default cost),
// and a worker token of a user holding the most tokens.
func BenchmarkWorkerPathCredentials(b *testing.B) {
	for _, kind := range []string{"password-cached", "password-bcrypt", "token"} {
		b.Run(kind, func(b *testing.B) {
			db := rundbtest.Open(b)
			ctx := context.Background()
			db.Users.SetHashCost(10) // bcrypt.DefaultCost
			if kind == "password-bcrypt" {
				db.Users.DisableCredentialCache()
			}
			if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true}); err != nil {
				b.Fatal(err)
			}
			secret := "secret"
			for i := range rundb.MaxTokens {
				tok, _, err := db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "t" + string(rune('a'+i)), Scope: rundb.ScopeWorker})
				if err != nil {
					b.Fatal(err)
				}
				if kind == "token" {
					secret = tok
				}
			}
			a := workerAccess("alice", secret)
			if _, err := db.Users.AuthenticateAccessCached(ctx, a); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, cached, err := db.Users.AuthenticateAccessIfCached(ctx, a); err != nil || !cached {
					b.Fatalf("cached %v, %v", cached, err)
				}
			}
		})
	}
}
