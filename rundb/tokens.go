package rundb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TokenScope is what a token may be used for.
type TokenScope string

const (
	// ScopeWorker tokens are accepted by the worker API only, in the password field of
	// fishtest's protocol, so fishtest's worker runs with one where its password was.
	ScopeWorker TokenScope = "worker"
	// ScopeAPI tokens are accepted by the JSON API a script uses (creating, approving,
	// stopping and modifying runs), sent as "Authorization: Bearer <token>".
	ScopeAPI TokenScope = "api"
)

// ParseTokenScope returns the scope called s; ErrInvalid for any other word.
func ParseTokenScope(s string) (TokenScope, error) {
	switch TokenScope(s) {
	case ScopeWorker, ScopeAPI:
		return TokenScope(s), nil
	}
	return "", fmt.Errorf("%w: token scope %q must be %q or %q", ErrInvalid, s, ScopeWorker, ScopeAPI)
}

const (
	// MaxTokens is how many tokens one user holds at once.
	MaxTokens = 20
	// MaxTokenLifetime is the longest expiry a token may be given.
	MaxTokenLifetime = 366 * 24 * time.Hour
	// TokenUseInterval is how often a token's last use is written, at most, by one instance:
	// never a write per call.
	TokenUseInterval = time.Minute
	// tokenPrefix starts every token, so that one is told from a password by its shape.
	tokenPrefix = "shoal_"
	// maxTokenNameLen bounds a token's name.
	maxTokenNameLen = 40
)

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// ValidTokenName reports whether name may name a token: 1 to 40 letters, digits or dashes.
func ValidTokenName(name string) bool {
	return tokenNamePattern.MatchString(name) && len(name) <= maxTokenNameLen
}

// APIToken is one of a user's tokens as stored: its SHA-256 hash, never the token. The token is
// random (130 bits), so a hash that is fast to compute is as safe as bcrypt would be, and the
// worker path pays microseconds for it.
type APIToken struct {
	ID      string     `bson:"id" json:"-"`
	Name    string     `bson:"name" json:"name"`
	Hash    string     `bson:"hash" json:"-"`
	Scope   TokenScope `bson:"scope" json:"scope"`
	Created time.Time  `bson:"created" json:"created"`
	// Expires is when the token stops working; zero: never.
	Expires time.Time `bson:"expires,omitempty" json:"expires,omitzero"`
}

// Expired reports whether t no longer works at now.
func (t *APIToken) Expired(now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}

// TokenUse is a token's last use, as written at most once per TokenUseInterval.
type TokenUse struct {
	Time    time.Time `bson:"time"`
	Address string    `bson:"address"`
}

// TokenInfo is a token as its owner's list shows it.
type TokenInfo struct {
	APIToken
	LastUse *TokenUse // nil: never used, or not yet recorded
}

// NewToken is what it takes to create a token.
type NewToken struct {
	Name  string
	Scope TokenScope
	// Lifetime is how long the token works; 0: until it is revoked.
	Lifetime time.Duration
}

// ErrTokenExists means the user holds a token of that name already.
var ErrTokenExists = errors.New("a token of that name exists")

// validate checks a new token's fields against the rules.
func (nt NewToken) validate() error {
	switch {
	case !ValidTokenName(nt.Name):
		return fmt.Errorf("%w: token name %q must be 1 to %d letters, digits or dashes", ErrInvalid, nt.Name, maxTokenNameLen)
	case nt.Lifetime < 0:
		return fmt.Errorf("%w: token expiry must be in the future", ErrInvalid)
	case nt.Lifetime > MaxTokenLifetime:
		return fmt.Errorf("%w: token expiry must be at most a year", ErrInvalid)
	}
	_, err := ParseTokenScope(string(nt.Scope))
	return err
}

// hashToken is the stored form of a token.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenUsername returns the username a token was made for, and whether s has a token's shape
// at all. A token names its user, so that a Bearer header alone finds the user's document by
// its unique index, through the same cache as the worker path.
func TokenUsername(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return "", false
	}
	user, secret, ok := strings.Cut(rest, "_")
	if !ok || secret == "" || len(user) < 2 || strings.ContainsFunc(user, notAlphanumeric) {
		return "", false
	}
	return user, true
}

// notAlphanumeric reports whether r is outside the usernames' alphabet (usernamePattern).
func notAlphanumeric(r rune) bool {
	return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
}

// tokenVersionField counts the changes of a user's tokens: every change is written only if the
// count is still the one read, so two changes at once never lose one, and a token revoked is
// never brought back by a change made from an older read.
const tokenVersionField = "shoal_tokens_version"

// CreateToken makes a token for the user and returns it, the only time it is seen, with its
// stored form. ErrInvalid for a bad name, scope or expiry, or a user holding MaxTokens
// already; ErrTokenExists for a name in use; ErrNotFound for no such user.
func (s *UserStore) CreateToken(ctx context.Context, username string, nt NewToken) (string, *APIToken, error) {
	if err := nt.validate(); err != nil {
		return "", nil, err
	}
	token := tokenPrefix + username + "_" + rand.Text()
	now := s.now().UTC().Truncate(time.Millisecond)
	t := &APIToken{ID: rand.Text()[:16], Name: nt.Name, Hash: hashToken(token), Scope: nt.Scope, Created: now}
	if nt.Lifetime > 0 {
		t.Expires = now.Add(nt.Lifetime)
	}
	err := s.changeTokens(ctx, username, func(u *User) ([]APIToken, error) {
		live := liveTokens(u.Tokens, s.now())
		if slices.ContainsFunc(live, func(o APIToken) bool { return o.Name == nt.Name }) {
			return nil, fmt.Errorf("%w: %q", ErrTokenExists, nt.Name)
		}
		if len(live) >= MaxTokens {
			return nil, fmt.Errorf("%w: a user holds at most %d tokens; revoke one first", ErrInvalid, MaxTokens)
		}
		return append(live, *t), nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("create token %s of %s: %w", nt.Name, username, err)
	}
	return token, t, nil
}

// RevokeToken removes the user's token called name: it stops working at once through this
// store, and within UserCacheTTL on other instances. ErrNotFound if there is none.
func (s *UserStore) RevokeToken(ctx context.Context, username, name string) error {
	err := s.changeTokens(ctx, username, func(u *User) ([]APIToken, error) {
		i := slices.IndexFunc(u.Tokens, func(t APIToken) bool { return t.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("token %q: %w", name, ErrNotFound)
		}
		return slices.Delete(slices.Clone(u.Tokens), i, i+1), nil
	})
	if err != nil {
		return fmt.Errorf("revoke token %s of %s: %w", name, username, err)
	}
	return nil
}

// Tokens lists the user's tokens, expired ones included until they are revoked or replaced,
// with their last use, by name.
func (s *UserStore) Tokens(ctx context.Context, username string) ([]TokenInfo, error) {
	u, err := s.Get(ctx, username)
	if err != nil {
		return nil, err
	}
	out := make([]TokenInfo, 0, len(u.Tokens))
	for _, t := range u.Tokens {
		ti := TokenInfo{APIToken: t}
		if use, ok := u.TokenUses[t.ID]; ok {
			ti.LastUse = &use
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(a, b TokenInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// liveTokens are ts without the expired ones, which a new token may replace.
func liveTokens(ts []APIToken, now time.Time) []APIToken {
	return slices.DeleteFunc(slices.Clone(ts), func(t APIToken) bool { return t.Expired(now) })
}

// changeTokens replaces the user's tokens with what change makes of the user as read, if no
// other change came between (tokenVersionField), retrying a few times if one did. The last
// uses of tokens that are gone are dropped with them.
func (s *UserStore) changeTokens(ctx context.Context, username string, change func(*User) ([]APIToken, error)) error {
	for range 5 {
		u, err := s.Get(ctx, username)
		if err != nil {
			return err
		}
		tokens, err := change(u)
		if err != nil {
			return err
		}
		uses := bson.D{}
		for _, t := range tokens {
			if use, ok := u.TokenUses[t.ID]; ok {
				uses = append(uses, bson.E{Key: t.ID, Value: use})
			}
		}
		version := bson.E{Key: tokenVersionField, Value: u.TokensVersion}
		if u.TokensVersion == 0 {
			version.Value = bson.D{{Key: "$in", Value: bson.A{0, nil}}}
		}
		res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "username", Value: username}, version}, bson.D{
			{Key: "$set", Value: bson.D{{Key: "shoal_tokens", Value: tokens}, {Key: "shoal_token_use", Value: uses}}},
			{Key: "$inc", Value: bson.D{{Key: tokenVersionField, Value: 1}}},
		})
		s.cache.invalidate(username)
		if err != nil {
			return mapError(err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
	}
	return fmt.Errorf("%w: the tokens changed meanwhile; try again", ErrConflict)
}

// revokeAllTokens is the part of a password change or a block that ends every token.
func revokeAllTokens() bson.D {
	return bson.D{{Key: "shoal_tokens", Value: bson.A{}}, {Key: "shoal_token_use", Value: bson.D{}}}
}

// matchToken returns the user's token that secret is, nil if it is none of them. The hashes
// are compared as plain strings: the time a comparison takes tells of the hash of what was
// sent, which a guesser cannot steer towards a stored hash without a preimage of SHA-256.
func matchToken(u *User, secret string) *APIToken {
	if len(u.Tokens) == 0 {
		return nil
	}
	want := hashToken(secret)
	for i := range u.Tokens {
		if u.Tokens[i].Hash == want {
			return &u.Tokens[i]
		}
	}
	return nil
}

// tokenUses remembers when this store last wrote each token's last use, so that a token used
// on every call is written once per TokenUseInterval. Safe for concurrent use.
type tokenUses struct {
	mu      sync.Mutex
	written map[string]time.Time // by token ID
}

// due reports whether the use of token id at now should be written.
func (t *tokenUses) due(id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.written[id]
	return !ok || now.Sub(last) >= TokenUseInterval
}

// claim marks the use of token id at now as written, and reports whether it was due (only one
// of several calls at once writes it).
func (t *tokenUses) claim(id string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last, ok := t.written[id]; ok && now.Sub(last) < TokenUseInterval {
		return false
	}
	if t.written == nil {
		t.written = make(map[string]time.Time)
	}
	if len(t.written) >= readCacheSize {
		for k, w := range t.written {
			if now.Sub(w) >= TokenUseInterval {
				delete(t.written, k)
			}
		}
	}
	t.written[id] = now
	return true
}

// recordTokenUse writes a token's last use if it is due. The write touches only that token's
// entry of shoal_token_use, never the tokens themselves, so it cannot bring back a token
// revoked meanwhile; and it leaves the user cache as it is, as no check depends on it. A
// failure is not the caller's: the call was authenticated, and the next use writes again.
func (s *UserStore) recordTokenUse(ctx context.Context, username string, t *APIToken, addr string) {
	now := s.now()
	if !s.tokenUses.claim(t.ID, now) {
		return
	}
	use := TokenUse{Time: now.UTC().Truncate(time.Millisecond), Address: addr}
	_, err := s.coll.UpdateOne(ctx,
		bson.D{{Key: "username", Value: username}, {Key: "shoal_tokens.id", Value: t.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "shoal_token_use." + t.ID, Value: use}}}})
	if err != nil {
		s.tokenUses.mu.Lock()
		delete(s.tokenUses.written, t.ID)
		s.tokenUses.mu.Unlock()
	}
}

// TokenMadeAction is the event log's record of a token made for username ("new_token"): its
// scope, name and expiry, never the token. via says where, when not on the profile page.
func TokenMadeAction(username string, t *APIToken, via string) *Action {
	msg := fmt.Sprintf("%s token %s", t.Scope, t.Name)
	if !t.Expires.IsZero() {
		msg += ", expires " + t.Expires.UTC().Format("2006-01-02 15:04 UTC")
	}
	return tokenAction("new_token", username, msg, via)
}

// TokenRevokedAction is the event log's record of the token name of username revoked
// ("revoke_token").
func TokenRevokedAction(username, name, via string) *Action {
	return tokenAction("revoke_token", username, "token "+name, via)
}

func tokenAction(action, username, msg, via string) *Action {
	if via != "" {
		msg += " (" + via + ")"
	}
	return &Action{Action: action, Username: username, User: username, Message: msg}
}
