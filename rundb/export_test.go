package rundb

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

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

// SetUserCacheClock replaces the user cache's clock.
func (s *UserStore) SetUserCacheClock(now func() time.Time) { s.cache.now = now }

// UpdateBehindCache changes a user document without telling this store's cache, as another
// instance or the CLI would.
func (s *UserStore) UpdateBehindCache(ctx context.Context, username string, set bson.D) error {
	_, err := s.coll.UpdateOne(ctx, bson.D{{Key: "username", Value: username}}, bson.D{{Key: "$set", Value: set}})
	return err
}

// SetWorkerIndexClock replaces the clock that ages the workers' in-memory copy.
func (s *WorkerStore) SetWorkerIndexClock(now func() time.Time) { s.index.now = now }

// SetBlockedBehindIndex changes a worker's record without telling this store's copy, as another
// instance would.
func (s *WorkerStore) SetBlockedBehindIndex(ctx context.Context, name string, blocked bool) error {
	_, err := s.coll.UpdateOne(ctx, bson.D{{Key: "worker_name", Value: name}}, bson.D{{Key: "$set", Value: bson.D{{Key: "blocked", Value: blocked}}}})
	return err
}

// SetScanDuty sets the share of its time EachFinished's paced scan keeps the database busy; 0
// reads with one query, as on MongoDB.
func SetScanDuty(s *RunStore, duty float64) { s.scanDuty = duty }

// SetUserClock replaces the clock that expires tokens and paces the writes of their last use.
func (s *UserStore) SetUserClock(now func() time.Time) { s.now = now }

// Second returns another store over the same users collection, as another instance holds.
func (s *UserStore) Second() *UserStore { return newUserStore(s.coll, s.hashCost) }
