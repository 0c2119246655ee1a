package rundb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/singleflight"
)

// The three ways authentication fails, with the texts fishtest's workers and pages show.
var (
	ErrBadCredentials = errors.New("Invalid username or password.")
	ErrBlocked        = errors.New("Your account is blocked.")
	ErrPending        = errors.New("Your account is pending approval.")
)

// ErrInvalid means a value given to a store breaks its rules (a username with a space, say).
var ErrInvalid = errors.New("invalid")

// ApproversGroup is the group whose members approve tests and accept users.
const ApproversGroup = "group:approvers"

// DefaultMachineLimit is the number of active tasks one IP may hold for a user whose document
// sets no limit.
const DefaultMachineLimit = 16

// maxPasswordBytes is bcrypt's input limit; fishtest's forms allow the same length.
const maxPasswordBytes = 72

// usernamePattern is the worker protocol's rule for usernames.
var usernamePattern = regexp.MustCompile(`^[A-Za-z0-9]{2,}$`)

// User is a person who submits tests or runs workers.
//
// Passwords are stored as bcrypt hashes in password_hash. A document imported from fishtest
// keeps its plaintext in password until the first successful login replaces it with a hash.
type User struct {
	ID               ObjectID  `bson:"_id,omitempty" json:"-"`
	Username         string    `bson:"username" json:"username"`
	Password         string    `bson:"password,omitempty" json:"-"`
	PasswordHash     string    `bson:"password_hash,omitempty" json:"-"`
	RegistrationTime time.Time `bson:"registration_time" json:"registration_time"`
	Pending          bool      `bson:"pending" json:"pending"`
	Blocked          bool      `bson:"blocked" json:"blocked"`
	Email            string    `bson:"email" json:"email"`
	Groups           []string  `bson:"groups" json:"groups"`
	TestsRepo        string    `bson:"tests_repo" json:"tests_repo"`
	MachineLimit     int       `bson:"machine_limit,omitempty" json:"machine_limit"`
	// Sessions are the user's open web sessions: a session cookie is honoured only while its
	// id is here and unexpired, so logging out, "log out everywhere", a block or a password
	// change end it on the server, whatever copies of the cookie exist.
	Sessions []UserSession `bson:"shoal_sessions,omitempty" json:"-"`
	// Tokens are the user's tokens for workers and scripts (tokens.go); TokenUses their last
	// uses by token ID, apart so that recording a use never rewrites the tokens; TokensVersion
	// counts the changes of the tokens.
	Tokens        []APIToken          `bson:"shoal_tokens,omitempty" json:"-"`
	TokenUses     map[string]TokenUse `bson:"shoal_token_use,omitempty" json:"-"`
	TokensVersion int64               `bson:"shoal_tokens_version,omitempty" json:"-"`

	Extra Extra `bson:",inline" json:"-"`
}

// UserSession is one open web session: a hash of its id (the cookie holds the id), and when it
// ends at the latest.
type UserSession struct {
	ID      string    `bson:"id"`
	Expires time.Time `bson:"expires"`
}

// MaxUserSessions is how many web sessions a user keeps open at once; opening one more ends
// the oldest.
const MaxUserSessions = 20

// HasSession reports whether the session with id is open at now.
func (u *User) HasSession(id string, now time.Time) bool {
	for _, s := range u.Sessions {
		if s.ID == id && now.Before(s.Expires) {
			return true
		}
	}
	return false
}

// IsApprover reports whether u may approve tests and accept users.
func (u *User) IsApprover() bool { return slices.Contains(u.Groups, ApproversGroup) }

// EffectiveMachineLimit is u's machine limit, or the default when the document sets none.
func (u *User) EffectiveMachineLimit() int {
	if u.MachineLimit > 0 {
		return u.MachineLimit
	}
	return DefaultMachineLimit
}

// storedSecret is what a password is checked against: the hash, or the legacy plaintext.
func (u *User) storedSecret() string {
	if u.PasswordHash != "" {
		return u.PasswordHash
	}
	return u.Password
}

// SessionStamp identifies the user's current password without revealing it: a web session
// remembers the stamp it was opened with and ends when it no longer matches, so changing a
// password logs out every other session.
func (u *User) SessionStamp() string {
	sum := sha256.Sum256([]byte("shoal session stamp\x00" + u.storedSecret()))
	return hex.EncodeToString(sum[:8])
}

// NewUser is what it takes to create a user.
type NewUser struct {
	Username     string
	Password     string
	Email        string
	Approver     bool
	Accepted     bool // false: pending until an approver accepts
	MachineLimit int  // 0: the default
}

// UserStore reads and writes the users collection and checks credentials. Safe for concurrent
// use.
type UserStore struct {
	coll     *mongo.Collection
	hashCost int
	creds    *credentialCache
	verify   singleflight.Group
	cache    *readCache[User]
	now      func() time.Time
	// tokenUses says when each token's last use was written.
	tokenUses tokenUses
	// slowChecks counts password checks that missed the credential cache.
	slowChecks atomic.Int64
	// nobody is the hash compareWithNobody compares against, made once.
	nobodyOnce sync.Once
	nobody     []byte
}

func newUserStore(coll *mongo.Collection, hashCost int) *UserStore {
	if hashCost == 0 {
		hashCost = bcrypt.DefaultCost
	}
	return &UserStore{
		coll:     coll,
		hashCost: hashCost,
		creds:    newCredentialCache(credentialTTL, credentialCacheSize, time.Now),
		cache:    newReadCache(UserCacheTTL, time.Now, copyUser),
		now:      time.Now,
	}
}

// validatePassword applies the rules every stored password follows.
func validatePassword(p string) error {
	if p == "" {
		return fmt.Errorf("%w: password must not be empty", ErrInvalid)
	}
	if len(p) > maxPasswordBytes {
		return fmt.Errorf("%w: password longer than %d bytes", ErrInvalid, maxPasswordBytes)
	}
	return nil
}

// Create stores a new user. ErrConflict if the username is taken; ErrInvalid for a bad
// username, password or machine limit.
func (s *UserStore) Create(ctx context.Context, nu NewUser) (*User, error) {
	if !usernamePattern.MatchString(nu.Username) {
		return nil, fmt.Errorf("%w: username %q must be at least 2 letters or digits", ErrInvalid, nu.Username)
	}
	if err := validatePassword(nu.Password); err != nil {
		return nil, err
	}
	if nu.MachineLimit < 0 {
		return nil, fmt.Errorf("%w: machine limit %d is negative", ErrInvalid, nu.MachineLimit)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(nu.Password), s.hashCost)
	if err != nil {
		return nil, fmt.Errorf("hash password: %w", err)
	}
	u := &User{
		ID:               NewObjectID(),
		Username:         nu.Username,
		PasswordHash:     string(hash),
		RegistrationTime: s.now().UTC(),
		Pending:          !nu.Accepted,
		Email:            nu.Email,
		Groups:           []string{},
		MachineLimit:     nu.MachineLimit,
	}
	if u.MachineLimit == 0 {
		u.MachineLimit = DefaultMachineLimit
	}
	if nu.Approver {
		u.Groups = append(u.Groups, ApproversGroup)
	}
	if _, err := s.coll.InsertOne(ctx, u); err != nil {
		return nil, fmt.Errorf("create user %s: %w", nu.Username, mapError(err))
	}
	return u, nil
}

// Get returns the user with exactly this username.
func (s *UserStore) Get(ctx context.Context, username string) (*User, error) {
	var u User
	err := s.coll.FindOne(ctx, bson.D{{Key: "username", Value: username}}).Decode(&u)
	if err != nil {
		return nil, fmt.Errorf("get user %s: %w", username, mapError(err))
	}
	return &u, nil
}

// Count returns the number of users.
func (s *UserStore) Count(ctx context.Context) (int64, error) {
	n, err := s.coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return n, nil
}

// Authenticate checks a username and password and returns the user. It fails with
// ErrBadCredentials, ErrBlocked or ErrPending (in that order of checks after the password), or a
// database error.
//
// The user document is read on every call, so a block or a password change made through any
// instance takes effect at once. The slow bcrypt comparison runs only when this exact username,
// password and stored hash have not been verified in the last few minutes.
func (s *UserStore) Authenticate(ctx context.Context, username, password string) (*User, error) {
	u, _, err := s.authenticate(ctx, Access{Username: username, Secret: password}, s.Get)
	return u, err
}

// Access is what a call presents to be let in: a username and a password or a token.
type Access struct {
	Username string
	// Secret is the password or the token.
	Secret string
	// Scope is the scope a token must have to be accepted here; "": no token is.
	Scope TokenScope
	// TokenOnly refuses passwords (a call that came with a Bearer header).
	TokenOnly bool
	// Address is the client's address, recorded as a token's last use.
	Address string
}

// AuthenticateCached is Authenticate for callers that authenticate every request (the worker
// and submit APIs): the user document comes from a cache kept for UserCacheTTL. A change made
// through this UserStore takes effect at once; one made elsewhere (another instance, the CLI)
// within UserCacheTTL, where fishtest's cache keeps a user for two minutes.
func (s *UserStore) AuthenticateCached(ctx context.Context, username, password string) (*User, error) {
	return s.AuthenticateAccessCached(ctx, Access{Username: username, Secret: password})
}

// AuthenticateAccessCached is AuthenticateCached for a password or a token of a.Scope. A
// token that is not the user's, revoked, expired or of another scope fails as a wrong
// password does, with ErrBadCredentials. A token's use is written here when it is due (at most
// once per TokenUseInterval).
func (s *UserStore) AuthenticateAccessCached(ctx context.Context, a Access) (*User, error) {
	u, tok, err := s.authenticate(ctx, a, s.getCached)
	if err == nil && tok != nil {
		s.recordTokenUse(ctx, u.Username, tok, a.Address)
	}
	return u, err
}

// AuthenticateIfCached is AuthenticateCached when the user's document is cached and its
// password hashed: then it reads nothing from the database, and cached is true. Otherwise it
// does nothing and cached is false; the caller goes on to AuthenticateCached, under whatever
// limit it puts on database work. The user is shared, as AuthenticateAccessIfCached's.
func (s *UserStore) AuthenticateIfCached(ctx context.Context, username, password string) (u *User, cached bool, err error) {
	return s.AuthenticateAccessIfCached(ctx, Access{Username: username, Secret: password})
}

// AuthenticateAccessIfCached is AuthenticateIfCached for AuthenticateAccessCached: a token
// whose last use is due to be written is not done here, as that is a write.
//
// The user returned is the cached document itself, not a copy (a copy on every worker call
// was a few percent of the server's allocations): it is shared with every caller, and the
// caller must not change it, nor anything it points to.
func (s *UserStore) AuthenticateAccessIfCached(ctx context.Context, a Access) (u *User, cached bool, err error) {
	cu, ok := s.cache.peekShared(a.Username)
	if !ok {
		return nil, false, nil
	}
	if cu.PasswordHash == "" && s.tokenFor(cu, a) == nil { // a legacy plaintext is replaced on its first match: a write
		return nil, false, nil
	}
	u, tok, err := s.authenticate(ctx, a, func(context.Context, string) (*User, error) { return cu, nil })
	if err == nil && tok != nil && s.tokenUses.due(tok.ID, s.now()) {
		return nil, false, nil
	}
	return u, true, err
}

// getCached is Get through the user cache.
func (s *UserStore) getCached(ctx context.Context, username string) (*User, error) {
	return s.cache.get(ctx, username, func(ctx context.Context) (*User, error) { return s.Get(ctx, username) })
}

// tokenFor returns the token of u that a presents, nil if a presents none of u's tokens (it
// may still be the password).
func (s *UserStore) tokenFor(u *User, a Access) *APIToken {
	if a.Scope == "" {
		return nil
	}
	if name, ok := TokenUsername(a.Secret); !ok || name != u.Username {
		return nil
	}
	return matchToken(u, a.Secret)
}

// authenticate checks a against the user that get reads, and returns the user and the token
// that let the call in (nil for a password).
func (s *UserStore) authenticate(ctx context.Context, a Access, get func(context.Context, string) (*User, error)) (*User, *APIToken, error) {
	u, err := get(ctx, a.Username)
	if errors.Is(err, ErrNotFound) {
		if !a.TokenOnly {
			s.compareWithNobody(a.Secret)
		}
		return nil, nil, ErrBadCredentials
	}
	if err != nil {
		return nil, nil, err
	}
	tok := s.tokenFor(u, a)
	var ok bool
	switch {
	case tok != nil:
		ok = tok.Scope == a.Scope && !tok.Expired(s.now())
	case a.TokenOnly:
		ok = false
	default:
		ok, err = s.checkPassword(ctx, u, a.Secret)
	}
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, ErrBadCredentials
	}
	u, err = s.afterLogin(ctx, u, tok == nil)
	return u, tok, err
}

// afterLogin is the rest of a successful check: the user as stored once a legacy plaintext
// that byPassword matched is replaced, then the block and the pending state.
func (s *UserStore) afterLogin(ctx context.Context, u *User, byPassword bool) (*User, error) {
	username := u.Username
	if byPassword && u.PasswordHash == "" {
		// A legacy plaintext that just matched has been replaced by its hash: return the user
		// as stored now, so that what callers derive from the secret (a web session's stamp)
		// matches the next read.
		if fresh, err := s.Get(ctx, username); err == nil {
			u = fresh
		}
	}
	switch {
	case u.Blocked:
		return nil, ErrBlocked
	case u.Pending:
		return nil, ErrPending
	}
	return u, nil
}

// checkPassword verifies password against u's stored secret, through the credential cache.
// A legacy plaintext password that matches is replaced by a hash.
func (s *UserStore) checkPassword(ctx context.Context, u *User, password string) (bool, error) {
	secret := u.storedSecret()
	if secret == "" || password == "" || len(password) > maxPasswordBytes {
		return false, nil
	}
	key := s.creds.key(u.Username, secret, password)
	if ok, found := s.creds.get(key); found {
		return ok, nil
	}
	// Callers with the same key share one comparison; it must not fail because the first
	// caller's request was cancelled.
	ctx = context.WithoutCancel(ctx)
	v, err, _ := s.verify.Do(string(key[:]), func() (any, error) {
		s.slowChecks.Add(1)
		var ok bool
		if u.PasswordHash != "" {
			ok = bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil
		} else {
			ok = subtle.ConstantTimeCompare([]byte(u.Password), []byte(password)) == 1
			if ok {
				if err := s.hashLegacyPassword(ctx, u.Username, password); err != nil {
					return false, err
				}
				return true, nil // the stored secret changed: nothing to cache under the old key
			}
		}
		s.creds.put(key, ok)
		return ok, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// compareWithNobody spends on a login for an unknown username the time a known one costs: a
// bcrypt comparison at the store's cost, against a hash of no one's password. Without it, an
// unknown user is answered in microseconds and a known one in tens of milliseconds, which tells
// anyone which usernames exist. Passwords that checkPassword refuses before comparing are
// refused as fast here.
func (s *UserStore) compareWithNobody(password string) {
	if password == "" || len(password) > maxPasswordBytes {
		return
	}
	s.nobodyOnce.Do(func() {
		hash, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), s.hashCost)
		if err == nil {
			s.nobody = hash
		}
	})
	s.slowChecks.Add(1)
	_ = bcrypt.CompareHashAndPassword(s.nobody, []byte(password))
}

// hashLegacyPassword replaces a plaintext password that just verified with its hash. The update
// only applies while the document still holds that plaintext and no hash, so a password set in
// the meantime is never overwritten with the old one.
func (s *UserStore) hashLegacyPassword(ctx context.Context, username, password string) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.hashCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	filter := bson.D{
		{Key: "username", Value: username},
		{Key: "password", Value: password},
		{Key: "password_hash", Value: bson.D{{Key: "$exists", Value: false}}},
	}
	_, err = s.coll.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: bson.D{{Key: "password_hash", Value: string(hash)}}},
		{Key: "$unset", Value: bson.D{{Key: "password", Value: ""}}},
	})
	s.cache.invalidate(username)
	if err != nil {
		return fmt.Errorf("replace plaintext password of %s: %w", username, mapError(err))
	}
	return nil
}

// HashLegacyPasswords replaces every plaintext password left by a database imported from
// fishtest with its hash, one user at a time, and returns how many it replaced. It is safe to
// run on several instances at once and again after an interruption: each replacement applies
// only while the document still holds that plaintext and no hash, and ctx stops it between
// users.
func (s *UserStore) HashLegacyPasswords(ctx context.Context) (int, error) {
	filter := bson.D{
		{Key: "password", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: ""}}},
		{Key: "password_hash", Value: bson.D{{Key: "$exists", Value: false}}},
	}
	cur, err := s.coll.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "username", Value: 1}, {Key: "password", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("find plaintext passwords: %w", mapError(err))
	}
	var legacy []struct {
		Username string `bson:"username"`
		Password string `bson:"password"`
	}
	if err := cur.All(ctx, &legacy); err != nil {
		return 0, fmt.Errorf("find plaintext passwords: %w", mapError(err))
	}
	n := 0
	for _, u := range legacy {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if len(u.Password) > maxPasswordBytes {
			continue // no login can match it; bcrypt would refuse it
		}
		if err := s.hashLegacyPassword(ctx, u.Username, u.Password); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// SlowChecks returns how many password checks have missed the credential cache and paid for a
// full comparison since the store was opened.
func (s *UserStore) SlowChecks() int64 { return s.slowChecks.Load() }

// SetPassword replaces a user's password with a hash of the new one and removes any legacy
// plaintext. Cached verifications of the old password stop matching at once, and every web
// session and token of the user ends.
func (s *UserStore) SetPassword(ctx context.Context, username, password string) error {
	if err := validatePassword(password); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.hashCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	set := append(bson.D{{Key: "password_hash", Value: string(hash)}, {Key: "shoal_sessions", Value: bson.A{}}}, revokeAllTokens()...)
	return s.update(ctx, username, bson.D{
		{Key: "$set", Value: set},
		{Key: "$unset", Value: bson.D{{Key: "password", Value: ""}}},
		{Key: "$inc", Value: bson.D{{Key: tokenVersionField, Value: 1}}},
	})
}

// SetBlocked blocks or unblocks a user; Authenticate refuses a blocked user from the next call,
// and a block ends every web session and revokes every token.
func (s *UserStore) SetBlocked(ctx context.Context, username string, blocked bool) error {
	set := bson.D{{Key: "blocked", Value: blocked}}
	if !blocked {
		return s.update(ctx, username, bson.D{{Key: "$set", Value: set}})
	}
	set = append(set, bson.E{Key: "shoal_sessions", Value: bson.A{}})
	return s.update(ctx, username, bson.D{
		{Key: "$set", Value: append(set, revokeAllTokens()...)},
		{Key: "$inc", Value: bson.D{{Key: tokenVersionField, Value: 1}}},
	})
}

// OpenSession records a web session of the user, open until expires, ending the expired ones
// and, beyond MaxUserSessions, the oldest.
func (s *UserStore) OpenSession(ctx context.Context, username, id string, expires time.Time) error {
	return s.changeSessions(ctx, username, func(open []UserSession) []UserSession {
		open = append(open, UserSession{ID: id, Expires: expires.UTC().Truncate(time.Millisecond)})
		return open[max(0, len(open)-MaxUserSessions):]
	})
}

// CloseSession ends one web session of the user (a logout).
func (s *UserStore) CloseSession(ctx context.Context, username, id string) error {
	return s.changeSessions(ctx, username, func(open []UserSession) []UserSession {
		return slices.DeleteFunc(open, func(s UserSession) bool { return s.ID == id })
	})
}

// CloseAllSessions ends every web session of the user ("log out everywhere").
func (s *UserStore) CloseAllSessions(ctx context.Context, username string) error {
	return s.update(ctx, username, bson.D{{Key: "$set", Value: bson.D{{Key: "shoal_sessions", Value: bson.A{}}}}})
}

// changeSessions rewrites the user's open sessions, the expired ones left out, with change.
// Two changes at the same moment can lose one of them: at worst a session opened then must be
// opened again (a login), never a closed one reopened, as a close only removes.
func (s *UserStore) changeSessions(ctx context.Context, username string, change func([]UserSession) []UserSession) error {
	u, err := s.Get(ctx, username)
	if err != nil {
		return err
	}
	now := s.now()
	open := slices.DeleteFunc(slices.Clone(u.Sessions), func(s UserSession) bool { return !now.Before(s.Expires) })
	open = change(open)
	if open == nil {
		open = []UserSession{}
	}
	return s.update(ctx, username, bson.D{{Key: "$set", Value: bson.D{{Key: "shoal_sessions", Value: open}}}})
}

// Accept ends a user's pending state.
func (s *UserStore) Accept(ctx context.Context, username string) error {
	return s.update(ctx, username, bson.D{{Key: "$set", Value: bson.D{{Key: "pending", Value: false}}}})
}

// SetApprover adds the user to, or removes them from, the approvers group.
func (s *UserStore) SetApprover(ctx context.Context, username string, approver bool) error {
	op := "$pull"
	if approver {
		op = "$addToSet"
	}
	return s.update(ctx, username, bson.D{{Key: op, Value: bson.D{{Key: "groups", Value: ApproversGroup}}}})
}

// SetMachineLimit sets how many active tasks one IP may hold for the user.
func (s *UserStore) SetMachineLimit(ctx context.Context, username string, limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: machine limit %d must be at least 1", ErrInvalid, limit)
	}
	return s.update(ctx, username, bson.D{{Key: "$set", Value: bson.D{{Key: "machine_limit", Value: limit}}}})
}

func (s *UserStore) update(ctx context.Context, username string, update bson.D) error {
	res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "username", Value: username}}, update)
	// Dropped even on an error: the write may have landed.
	s.cache.invalidate(username)
	if err != nil {
		return fmt.Errorf("update user %s: %w", username, mapError(err))
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("update user %s: %w", username, ErrNotFound)
	}
	return nil
}

const (
	// credentialTTL bounds how long a verified password is trusted without bcrypt; changes to
	// the stored hash or the block flag take effect at once regardless.
	credentialTTL = 5 * time.Minute
	// credentialCacheSize bounds the cache's memory: about 100 bytes an entry.
	credentialCacheSize = 100_000
)

// credentialCache remembers the outcome of recent password checks. An entry is keyed by an HMAC
// of the username, the stored secret and the presented password under a key that lives only in
// this process, so the cache holds no password, a changed password or hash misses it, and a
// wrong password is remembered as wrong (which stops a misconfigured worker from costing a
// bcrypt per request). Safe for concurrent use.
type credentialCache struct {
	keys *KeyedHash // under a key of this process's
	ttl  time.Duration
	max  int
	now  func() time.Time

	mu      sync.Mutex
	entries map[[32]byte]credentialEntry
}

type credentialEntry struct {
	ok      bool
	expires time.Time
}

func newCredentialCache(ttl time.Duration, max int, now func() time.Time) *credentialCache {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(fmt.Sprintf("rundb: no randomness for the credential cache: %v", err))
	}
	return &credentialCache{keys: NewKeyedHash(key), ttl: ttl, max: max, now: now, entries: make(map[[32]byte]credentialEntry)}
}

func (c *credentialCache) key(username, secret, password string) [32]byte {
	return c.keys.Sum(username, secret, password)
}

func (c *credentialCache) get(k [32]byte) (ok, found bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.entries[k]
	if !found {
		return false, false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, k)
		return false, false
	}
	return e.ok, true
}

func (c *credentialCache) put(k [32]byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		// Make room for a tenth of the bound at once, so a full cache is swept once per
		// max/10 inserts rather than on every insert: expired entries first, then arbitrary
		// ones (map order is random).
		target := c.max - c.max/10 - 1
		now := c.now()
		for old, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, old)
			}
		}
		for old := range c.entries {
			if len(c.entries) <= target {
				break
			}
			delete(c.entries, old)
		}
	}
	c.entries[k] = credentialEntry{ok: ok, expires: c.now().Add(c.ttl)}
}
