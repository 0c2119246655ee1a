package rundb

// DisableCredentialCache makes every password check pay for bcrypt, for benchmarks that compare
// the two paths.
func (s *UserStore) DisableCredentialCache() { s.creds.max = 0; s.creds.ttl = 0 }

// SetHashCost changes the bcrypt cost of new hashes.
func (s *UserStore) SetHashCost(cost int) { s.hashCost = cost }
