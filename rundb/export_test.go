package rundb

import "context"

// DisableCredentialCache makes every password check pay for bcrypt, for benchmarks that compare
// the two paths.
func (s *UserStore) DisableCredentialCache() { s.creds.max = 0; s.creds.ttl = 0 }

// SetHashCost changes the bcrypt cost of new hashes.
func (s *UserStore) SetHashCost(cost int) { s.hashCost = cost }

// HashLegacyPassword runs the plaintext-to-hash migration step on its own, so tests can order it
// against a concurrent password change.
func (s *UserStore) HashLegacyPassword(ctx context.Context, username, password string) error {
	return s.hashLegacyPassword(ctx, username, password)
}

// Has reports whether the run is in the cache, without loading it.
func (c *RunCache) Has(id ObjectID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[id]
	return ok
}
