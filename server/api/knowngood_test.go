package api

import (
	"fmt"
	"testing"
	"time"
)

func TestKnownGoodCredentials(t *testing.T) {
	k := newKnownGood(time.Minute, 3)
	now := time.Now()
	if k.has(k.sum("wrk", "pw"), now) {
		t.Fatal("unseen credentials are known good")
	}
	k.settle(k.sum("wrk", "pw"), true, now)
	if !k.has(k.sum("wrk", "pw"), now.Add(30*time.Second)) || k.has(k.sum("wrk", "other"), now) || k.has(k.sum("wrk2", "pw"), now) {
		t.Error("a success is not remembered for exactly its own username and password")
	}
	if k.has(k.sum("wrk", "pw"), now.Add(time.Minute)) {
		t.Error("a success is remembered past the ttl")
	}
	k.settle(k.sum("wrk", "pw"), false, now)
	if k.has(k.sum("wrk", "pw"), now) {
		t.Error("a failure (a changed password) leaves the credentials known good")
	}
	for i := range 10 {
		k.settle(k.sum(fmt.Sprint("u", i), "pw"), true, now)
	}
	if n := len(k.seen); n > 3 {
		t.Errorf("%d entries, want at most 3", n)
	}
}
