package rundb

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A read that began before a change must not put the old document back in the cache.
func TestUserCacheReadRacingAnInvalidation(t *testing.T) {
	c := newReadCache(time.Minute, time.Now, copyUser)
	var reads atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	old := func(context.Context) (*User, error) {
		reads.Add(1)
		close(started)
		<-release
		return &User{Username: "alice", Blocked: false}, nil
	}
	done := make(chan *User)
	go func() {
		u, err := c.get(context.Background(), "alice", old)
		if err != nil {
			t.Error(err)
		}
		done <- u
	}()
	<-started
	c.invalidate("alice") // the block lands while the read is under way
	close(release)
	if u := <-done; u.Blocked {
		t.Fatal("the racing read returned a document it never read")
	}
	fresh := func(context.Context) (*User, error) {
		reads.Add(1)
		return &User{Username: "alice", Blocked: true}, nil
	}
	u, err := c.get(context.Background(), "alice", fresh)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Blocked || reads.Load() != 2 {
		t.Errorf("after the change: blocked %v after %d reads; want the new document from a second read", u.Blocked, reads.Load())
	}
}

// A thousand callers arriving at an empty cache cost one read.
func TestUserCacheConcurrentMissesShareARead(t *testing.T) {
	c := newReadCache(time.Minute, time.Now, copyUser)
	var reads atomic.Int32
	gate := make(chan struct{})
	read := func(context.Context) (*User, error) {
		reads.Add(1)
		<-gate
		return &User{Username: "alice"}, nil
	}
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			if _, err := c.get(context.Background(), "alice", read); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let the callers pile up behind the first read
	close(gate)
	wg.Wait()
	// Callers that arrive after the shared read finished find the entry; none reads again.
	if n := reads.Load(); n != 1 {
		t.Errorf("1000 concurrent misses cost %d reads, want 1", n)
	}
}
