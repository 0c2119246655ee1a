package rundb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// The worker API authenticates through the cache; what an admin does through this process must
// still bite on the very next call.
func TestAuthenticateCachedSeesThisProcessChangesAtOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	users := db.Users
	if _, err := users.AuthenticateCached(ctx, "alice", "secret"); err != nil {
		t.Fatal(err)
	}
	if err := users.SetBlocked(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := users.AuthenticateCached(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBlocked) {
		t.Fatalf("right after a block: %v, want ErrBlocked", err)
	}
	if err := users.SetBlocked(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	if err := users.SetMachineLimit(ctx, "alice", 3); err != nil {
		t.Fatal(err)
	}
	u, err := users.AuthenticateCached(ctx, "alice", "secret")
	if err != nil {
		t.Fatalf("right after an unblock: %v", err)
	}
	if u.EffectiveMachineLimit() != 3 {
		t.Errorf("machine limit %d right after it was set to 3", u.EffectiveMachineLimit())
	}
	if err := users.SetPassword(ctx, "alice", "a new secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := users.AuthenticateCached(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBadCredentials) {
		t.Fatalf("the old password right after a change: %v, want ErrBadCredentials", err)
	}
	if _, err := users.AuthenticateCached(ctx, "alice", "a new secret"); err != nil {
		t.Fatalf("the new password right after a change: %v", err)
	}
	// A caller changing what it got must not change the cached copy.
	u.Groups = append(u.Groups, rundb.ApproversGroup)
	u.Blocked = true
	again, err := users.AuthenticateCached(ctx, "alice", "a new secret")
	if err != nil || again.IsApprover() {
		t.Errorf("the cached user changed with a returned copy: %v, approver %v", err, again != nil && again.IsApprover())
	}
}

// A change made elsewhere (another instance, the CLI) is seen within UserCacheTTL, and not
// before: the cache does spare the database its reads.
func TestAuthenticateCachedSeesOtherChangesWithinTTL(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	mustCreateUser(t, db, rundb.NewUser{Username: "alice", Password: "secret", Accepted: true})
	var mu sync.Mutex
	now := time.Now()
	db.Users.SetUserCacheClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	if _, err := db.Users.AuthenticateCached(ctx, "alice", "secret"); err != nil {
		t.Fatal(err)
	}
	if err := db.Users.UpdateBehindCache(ctx, "alice", bson.D{{Key: "blocked", Value: true}}); err != nil {
		t.Fatal(err)
	}
	advance(rundb.UserCacheTTL / 2)
	if _, err := db.Users.AuthenticateCached(ctx, "alice", "secret"); err != nil {
		t.Fatalf("within the TTL the cached document answers: %v", err)
	}
	if _, err := db.Users.Authenticate(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBlocked) {
		t.Fatalf("Authenticate reads the database: %v, want ErrBlocked", err)
	}
	advance(rundb.UserCacheTTL/2 + time.Millisecond)
	if _, err := db.Users.AuthenticateCached(ctx, "alice", "secret"); !errors.Is(err, rundb.ErrBlocked) {
		t.Fatalf("after the TTL: %v, want ErrBlocked", err)
	}
}

// request_task checks every worker against the blocked list through a cache that remembers
// absent records too; a block made through this process must bite on the worker's next call.
func TestWorkerGetCachedSeesABlockAtOnce(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	const name = "alice-8cores-0123abcd"
	if _, err := db.Workers.GetCached(ctx, name, nil); !errors.Is(err, rundb.ErrNotFound) {
		t.Fatalf("a worker never noted: %v, want ErrNotFound", err)
	}
	if err := db.Workers.Put(ctx, &rundb.Worker{WorkerName: name, Blocked: true, Message: "bad results"}); err != nil {
		t.Fatal(err)
	}
	w, err := db.Workers.GetCached(ctx, name, nil)
	if err != nil || !w.Blocked || w.Message != "bad results" {
		t.Fatalf("right after the block: %+v, %v", w, err)
	}
	if err := db.Workers.Put(ctx, &rundb.Worker{WorkerName: name, Blocked: false}); err != nil {
		t.Fatal(err)
	}
	if w, err := db.Workers.GetCached(ctx, name, nil); err != nil || w.Blocked {
		t.Fatalf("right after the unblock: %+v, %v", w, err)
	}
}

// A block made by another instance reaches request_task's check within UserCacheTTL, and the
// check reads no database before then.
func TestWorkerGetCachedSeesOtherBlocksWithinTTL(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	const name = "bob-4cores-89abcdef"
	var mu sync.Mutex
	now := time.Now()
	db.Workers.SetWorkerIndexClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	if err := db.Workers.Put(ctx, &rundb.Worker{WorkerName: name, Message: "noted"}); err != nil {
		t.Fatal(err)
	}
	if w, err := db.Workers.GetCached(ctx, name, nil); err != nil || w.Blocked {
		t.Fatalf("before the block: %+v, %v", w, err)
	}
	if err := db.Workers.SetBlockedBehindIndex(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	advance(rundb.UserCacheTTL / 2)
	if w, err := db.Workers.GetCached(ctx, name, nil); err != nil || w.Blocked {
		t.Fatalf("within the TTL the copy answers: %+v, %v", w, err)
	}
	advance(rundb.UserCacheTTL/2 + time.Millisecond)
	if w, err := db.Workers.GetCached(ctx, name, nil); err != nil || !w.Blocked {
		t.Fatalf("after the TTL: %+v, %v, want blocked", w, err)
	}
}
