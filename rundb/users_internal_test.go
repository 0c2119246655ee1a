package rundb

import (
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func TestCredentialCacheExpiresAndBounds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newCredentialCache(time.Minute, 3, func() time.Time { return now })
	k := c.key("alice", "hash", "secret")
	if k == c.key("alice", "hash2", "secret") || k == c.key("alice", "hash", "secret2") || k == c.key("alic", "ehash", "secret") {
		t.Fatal("different credentials share a key")
	}
	if k != c.key("alice", "hash", "secret") {
		t.Fatal("the same credentials get another key from a reused HMAC state")
	}
	c.put(k, true)
	if ok, found := c.get(k); !ok || !found {
		t.Fatalf("fresh entry: ok=%v found=%v", ok, found)
	}
	now = now.Add(time.Minute)
	if _, found := c.get(k); found {
		t.Error("an entry outlived its TTL")
	}
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		c.put(c.key("u", "h", p), false)
	}
	if len(c.entries) > 3 {
		t.Errorf("cache holds %d entries, bound is 3", len(c.entries))
	}
	if ok, found := c.get(c.key("u", "h", "e")); ok || !found {
		t.Errorf("the newest negative entry: ok=%v found=%v, want remembered as wrong", ok, found)
	}
}

// BenchmarkCredentialCheck compares the two ways a password check ends: a hit in the
// credential cache, and a bcrypt comparison at the default cost.
func BenchmarkCredentialCheck(b *testing.B) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.DefaultCost)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cache-hit", func(b *testing.B) {
		c := newCredentialCache(time.Hour, 10, time.Now)
		c.put(c.key("alice", string(hash), "secret"), true)
		for b.Loop() {
			if ok, found := c.get(c.key("alice", string(hash), "secret")); !ok || !found {
				b.Fatal("miss")
			}
		}
	})
	b.Run("bcrypt", func(b *testing.B) {
		for b.Loop() {
			if bcrypt.CompareHashAndPassword(hash, []byte("secret")) != nil {
				b.Fatal("mismatch")
			}
		}
	})
}
