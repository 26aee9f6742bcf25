package tenancy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// DefaultTokenCacheTTL is how long an Authenticator trusts a token row it
// has read. It is also the bound on how long a revoked token keeps working
// on a process that used it just before the revocation: revocation takes
// effect within this TTL. Expiry is exact: it is checked on every call.
const DefaultTokenCacheTTL = 5 * time.Second

// TokenCacheSize bounds how many token rows an Authenticator caches. When
// the cache is full, expired entries are dropped; if it is still full, the
// whole cache is dropped (the next calls go to the store). Only rows that
// exist are cached, so callers presenting random tokens cannot fill it.
const TokenCacheSize = 10_000

// ErrUnauthenticated is returned by Authenticate for a missing, malformed,
// unknown, revoked or expired token alike, so that a caller cannot probe
// which tokens exist. It is a *domain.Error with code
// domain.CodeUnauthenticated; compare with errors.Is.
var ErrUnauthenticated error = &vocab.Error{
	Code:    vocab.CodeUnauthenticated,
	Message: "a valid bearer token is required",
}

// Authenticator resolves bearer tokens to actors through store.Tokens and a
// small cache keyed by the token's hash (never the secret). It is safe for
// concurrent use.
type Authenticator struct {
	tokens store.Tokens
	ttl    time.Duration
	clock  func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cacheEntry
}

type cacheEntry struct {
	token   *store.Token
	fetched time.Time
}

// NewAuthenticator returns an Authenticator reading tokens from tokens.
// cacheTTL is how long a row read from the store is trusted: 0 means
// DefaultTokenCacheTTL, a negative value turns the cache off (every call
// reads the store). clock gives the time for the cache and for expiry; nil
// means time.Now. It panics if tokens is nil.
func NewAuthenticator(tokens store.Tokens, cacheTTL time.Duration, clock func() time.Time) *Authenticator {
	if tokens == nil {
		panic("tenancy.NewAuthenticator: tokens is nil")
	}
	if cacheTTL == 0 {
		cacheTTL = DefaultTokenCacheTTL
	}
	if clock == nil {
		clock = time.Now
	}
	return &Authenticator{
		tokens: tokens,
		ttl:    cacheTTL,
		clock:  clock,
		cache:  make(map[[sha256.Size]byte]cacheEntry),
	}
}

// Authenticate returns the actor that bearer (the token alone, as
// BearerFromHeader returns it) acts for. A missing, malformed, unknown,
// revoked or expired token is ErrUnauthenticated. A store that cannot be
// reached gives an error wrapping vocab.ErrUnavailable; failures are never
// cached, so the next call asks the store again.
func (a *Authenticator) Authenticate(ctx context.Context, bearer string) (vocab.Actor, error) {
	if !tokenspec.WellFormed(bearer) {
		return vocab.Actor{}, ErrUnauthenticated
	}
	hash := sha256.Sum256([]byte(bearer))
	now := a.clock()

	tok, hit := a.lookup(hash, now)
	if !hit {
		var err error
		tok, err = a.tokens.TokenGetByHash(ctx, hash[:])
		if errors.Is(err, vocab.ErrNotFound) {
			return vocab.Actor{}, ErrUnauthenticated
		}
		if err != nil {
			return vocab.Actor{}, fmt.Errorf("authenticate: look up token: %w", err)
		}
	}
	// The store found the row by hash; check it really is this hash, in
	// constant time, before trusting (or caching) it.
	if subtle.ConstantTimeCompare(tok.Hash, hash[:]) != 1 {
		return vocab.Actor{}, ErrUnauthenticated
	}
	if !hit {
		tok = cloneToken(tok)
		a.remember(hash, tok, now)
	}
	if tok.RevokedAt != nil || (tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt)) {
		return vocab.Actor{}, ErrUnauthenticated
	}
	// A row written around CreateToken and the seed file's checks.
	for _, id := range [][2]string{{"tenant_id", tok.TenantID}, {"user_id", tok.UserID}} {
		if err := vocab.CheckIdentity(id[0], id[1]); err != nil {
			return vocab.Actor{}, fmt.Errorf("%w: the token's %w", ErrUnauthenticated, err)
		}
	}
	return vocab.Actor{
		TenantID: tok.TenantID,
		UserID:   tok.UserID,
		TokenID:  tok.ID,
		Scopes:   slices.Clone(tok.Scopes),
	}, nil
}

// lookup returns the cached row for hash if it was read less than the TTL
// before now.
func (a *Authenticator) lookup(hash [sha256.Size]byte, now time.Time) (*store.Token, bool) {
	if a.ttl < 0 {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.cache[hash]
	if !ok {
		return nil, false
	}
	if !a.fresh(e, now) {
		delete(a.cache, hash)
		return nil, false
	}
	return e.token, true
}

// remember caches tok under hash, making room first if the cache is full.
func (a *Authenticator) remember(hash [sha256.Size]byte, tok *store.Token, now time.Time) {
	if a.ttl < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.cache[hash]; !ok && len(a.cache) >= TokenCacheSize {
		for h, e := range a.cache {
			if !a.fresh(e, now) {
				delete(a.cache, h)
			}
		}
		if len(a.cache) >= TokenCacheSize {
			clear(a.cache)
		}
	}
	a.cache[hash] = cacheEntry{token: tok, fetched: now}
}

// fresh reports whether e was read less than the TTL before now. A clock
// that went backwards makes the entry stale.
func (a *Authenticator) fresh(e cacheEntry, now time.Time) bool {
	age := now.Sub(e.fetched)
	return age >= 0 && age < a.ttl
}

// cloneToken copies t deeply enough that neither the store nor a caller can
// change a cached row.
func cloneToken(t *store.Token) *store.Token {
	c := *t
	c.Scopes = slices.Clone(t.Scopes)
	c.Hash = slices.Clone(t.Hash)
	return &c
}
