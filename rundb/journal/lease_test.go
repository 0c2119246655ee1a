package journal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb/journal"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// The lease goes to one instance at a time: a live lease is refused to others (and readable,
// to say who holds it), taken back by its holder at a restart, and taken over once it lapses,
// with a new epoch that fences the old holder's renewals.
func TestLeaseGoesToOneInstanceAtATime(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	const ttl = 10 * time.Second
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

	a, err := journal.AcquireLease(ctx, db, "a", ttl, t0)
	if err != nil || a.Epoch != 1 || a.Holder != "a" {
		t.Fatalf("first acquire: %+v, %v; want epoch 1 for a", a, err)
	}
	if held, err := journal.AcquireLease(ctx, db, "b", ttl, t0.Add(ttl/2)); !errors.Is(err, journal.ErrLeaseHeld) || held.Holder != "a" {
		t.Fatalf("b while a's lease is live: %+v, %v; want ErrLeaseHeld naming a", held, err)
	}
	if err := journal.RenewLease(ctx, db, a.Epoch, t0.Add(ttl/2)); err != nil {
		t.Fatal(err)
	}
	// Renewed at ttl/2, the lease is still live just before 1.5 ttl.
	if _, err := journal.AcquireLease(ctx, db, "b", ttl, t0.Add(ttl+ttl/2-time.Millisecond)); !errors.Is(err, journal.ErrLeaseHeld) {
		t.Fatalf("b just before the renewed lease lapses: %v, want ErrLeaseHeld", err)
	}
	again, err := journal.AcquireLease(ctx, db, "a", ttl, t0.Add(ttl))
	if err != nil || again.Epoch != 2 {
		t.Fatalf("a restarting: %+v, %v; want its lease back with epoch 2", again, err)
	}
	b, err := journal.AcquireLease(ctx, db, "b", ttl, t0.Add(3*ttl))
	if err != nil || b.Epoch != 3 || b.Holder != "b" {
		t.Fatalf("b after the lease lapsed: %+v, %v; want epoch 3 for b", b, err)
	}
	if err := journal.RenewLease(ctx, db, again.Epoch, t0.Add(3*ttl)); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a renewing after b took over: %v, want ErrFenced", err)
	}
	if cur, err := journal.ReadLease(ctx, db); err != nil || cur.Holder != "b" || cur.Epoch != 3 {
		t.Fatalf("lease now %+v, %v; want b's, epoch 3", cur, err)
	}
}

// A primary whose lease another instance took finds out at its next renewal and is told to step
// down, even if no worker call comes to fail on the fence.
func TestJournalReportsALostLease(t *testing.T) {
	ctx := context.Background()
	db := rundbtest.Open(t)
	lost := make(chan error, 1)
	j, err := journal.Open(ctx, db, journal.Options{Holder: "a", LeaseTTL: 500 * time.Millisecond,
		OnFenced: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// b takes the lease as if a had stopped renewing it long ago.
	if _, err := journal.AcquireLease(ctx, db, "b", time.Millisecond, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, journal.ErrFenced) {
			t.Fatalf("told %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the journal did not report the lost lease within 10 s")
	}
}
