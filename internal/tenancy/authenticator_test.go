package tenancy_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// countingTokens counts TokenGetByHash calls on a real store, and can send
// them to a second store (one that is down) instead.
type countingTokens struct {
	store.Tokens
	down     store.Tokens
	useDown  atomic.Bool
	getCalls atomic.Int64
}

func (c *countingTokens) TokenGetByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	c.getCalls.Add(1)
	if c.useDown.Load() {
		return c.down.TokenGetByHash(ctx, hash)
	}
	return c.Tokens.TokenGetByHash(ctx, hash)
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testBundle struct {
	tokens *countingTokens
	store  *pgengine.Store
	clock  *fakeClock
	auth   *tenancy.Authenticator
}

const testTTL = 5 * time.Second

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	_, pool := pgtest.NewDB(t)
	s := pgengine.New(pool)
	tokens := &countingTokens{Tokens: s}
	clock := &fakeClock{now: time.Now().UTC()}
	return t.Context(), &testBundle{
		tokens: tokens,
		store:  s,
		clock:  clock,
		auth:   tenancy.NewAuthenticator(tokens, testTTL, clock.Now),
	}
}

// TokenOpts are the options of createToken; the zero value means an acme
// support-bot token with billing:refund that does not expire.
type TokenOpts struct {
	TenantID  string
	ExpiresAt *time.Time
}

func createToken(ctx context.Context, t *testing.T, s store.Tokens, opts *TokenOpts) (secret string, tok *store.Token) {
	t.Helper()
	if opts == nil {
		opts = &TokenOpts{}
	}
	tenant := opts.TenantID
	if tenant == "" {
		tenant = "acme"
	}
	secret, id, err := tenancy.NewToken()
	require.NoError(t, err)
	tok, err = s.TokenInsert(ctx, &store.TokenInsertParams{
		ID: id, TenantID: tenant, UserID: "support-bot", Hash: tenancy.HashToken(secret),
		Scopes:    []string{"billing:refund", tenancy.ScopeOperationsRead},
		ExpiresAt: opts.ExpiresAt,
	})
	require.NoError(t, err)
	return secret, tok
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()

	t.Run("ValidToken", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, tok := createToken(ctx, t, b.store, nil)

		actor, err := b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.Equal(t, vocab.Actor{
			TenantID: "acme", UserID: "support-bot", TokenID: tok.ID,
			Scopes: []string{"billing:refund", tenancy.ScopeOperationsRead},
		}, actor)
	})

	t.Run("CacheHitDoesNotQuery", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, _ := createToken(ctx, t, b.store, nil)
		other, _ := createToken(ctx, t, b.store, &TokenOpts{TenantID: "beta"})

		for range 5 {
			_, err := b.auth.Authenticate(ctx, secret)
			require.NoError(t, err)
			b.clock.Advance(testTTL / 10)
		}
		require.EqualValues(t, 1, b.tokens.getCalls.Load())

		actor, err := b.auth.Authenticate(ctx, other)
		require.NoError(t, err)
		require.Equal(t, "beta", actor.TenantID)
		require.EqualValues(t, 2, b.tokens.getCalls.Load())

		// Past the TTL the row is read again.
		b.clock.Advance(testTTL)
		_, err = b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.EqualValues(t, 3, b.tokens.getCalls.Load())
	})

	t.Run("RevocationTakesEffectWithinTTL", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, tok := createToken(ctx, t, b.store, nil)

		_, err := b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		_, err = b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)

		// Until the cached row is TTL old, the revocation is not seen: the
		// documented window.
		b.clock.Advance(testTTL - time.Nanosecond)
		_, err = b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)

		b.clock.Advance(time.Nanosecond)
		_, err = b.auth.Authenticate(ctx, secret)
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
		// The revoked row is cached too: refusing it again costs no query.
		calls := b.tokens.getCalls.Load()
		_, err = b.auth.Authenticate(ctx, secret)
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
		require.Equal(t, calls, b.tokens.getCalls.Load())
	})

	t.Run("RevokedRefused", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, tok := createToken(ctx, t, b.store, nil)
		_, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)

		_, err = b.auth.Authenticate(ctx, secret)
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
	})

	t.Run("ExpiredRefused", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		// A long cache TTL: expiry must not wait for it.
		auth := tenancy.NewAuthenticator(b.tokens, time.Hour, b.clock.Now)
		expires := b.clock.Now().Add(time.Minute)
		secret, _ := createToken(ctx, t, b.store, &TokenOpts{ExpiresAt: &expires})

		_, err := auth.Authenticate(ctx, secret)
		require.NoError(t, err)

		b.clock.Advance(time.Minute)
		_, err = auth.Authenticate(ctx, secret)
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
		require.EqualValues(t, 1, b.tokens.getCalls.Load(), "expiry is checked against the clock, cached or not")

		past := b.clock.Now().Add(-time.Second)
		expired, _ := createToken(ctx, t, b.store, &TokenOpts{ExpiresAt: &past})
		_, err = auth.Authenticate(ctx, expired)
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
	})

	t.Run("UnknownRefused", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.auth.Authenticate(ctx, "idg_nobody_has_this_one")
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
		// Unknown hashes are not cached: random tokens cannot fill the cache.
		_, err = b.auth.Authenticate(ctx, "idg_nobody_has_this_one")
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
		require.EqualValues(t, 2, b.tokens.getCalls.Load())
	})

	t.Run("MalformedRefusedWithoutQuery", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		for _, bearer := range []string{"", "Bearer idg_abcdefgh", "idg_", "idg_abc", "tok_0123456789abcdef",
			"idg_abc.defgh", "idg_" + string(make([]byte, 300))} {
			_, err := b.auth.Authenticate(ctx, bearer)
			require.ErrorIs(t, err, tenancy.ErrUnauthenticated, "%q", bearer)
		}
		require.Zero(t, b.tokens.getCalls.Load())
	})

	t.Run("SameErrorForEveryRefusal", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		revoked, tok := createToken(ctx, t, b.store, nil)
		_, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)
		past := b.clock.Now().Add(-time.Second)
		expired, _ := createToken(ctx, t, b.store, &TokenOpts{ExpiresAt: &past})

		for _, bearer := range []string{"", "idg_unknown_token", revoked, expired} {
			_, err := b.auth.Authenticate(ctx, bearer)
			require.Same(t, tenancy.ErrUnauthenticated, err, "%q", bearer)
		}
		require.Equal(t, vocab.CodeUnauthenticated, vocab.CodeOf(tenancy.ErrUnauthenticated))
	})

	t.Run("UnavailableNotCached", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		downPool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/nothing?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(downPool.Close)
		b.tokens.down = pgengine.New(downPool)
		secret, _ := createToken(ctx, t, b.store, nil)

		b.tokens.useDown.Store(true)
		_, err = b.auth.Authenticate(ctx, secret)
		require.ErrorIs(t, err, vocab.ErrUnavailable)
		require.NotErrorIs(t, err, tenancy.ErrUnauthenticated)

		b.tokens.useDown.Store(false)
		actor, err := b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.Equal(t, "acme", actor.TenantID)
		require.EqualValues(t, 2, b.tokens.getCalls.Load())
	})

	t.Run("CacheOff", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		auth := tenancy.NewAuthenticator(b.tokens, -1, b.clock.Now)
		secret, _ := createToken(ctx, t, b.store, nil)
		for range 3 {
			_, err := auth.Authenticate(ctx, secret)
			require.NoError(t, err)
		}
		require.EqualValues(t, 3, b.tokens.getCalls.Load())
	})

	t.Run("ActorScopesAreCopies", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, _ := createToken(ctx, t, b.store, nil)
		actor, err := b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		actor.Scopes[0] = tenancy.ScopeOpsAdmin

		again, err := b.auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.False(t, again.HasScope(tenancy.ScopeOpsAdmin))
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secrets := make([]string, 4)
		for i := range secrets {
			secrets[i], _ = createToken(ctx, t, b.store, nil)
		}
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				for j := range 20 {
					_, err := b.auth.Authenticate(ctx, secrets[(i+j)%len(secrets)])
					require.NoError(t, err)
					if j%5 == 0 {
						b.clock.Advance(time.Second)
					}
				}
			})
		}
		wg.Wait()
	})
}

// wrongHashTokens answers every lookup with a row whose hash differs from
// the one asked for, as a store with a lookup bug (prefix match, collation)
// would.
type wrongHashTokens struct {
	store.Tokens
	calls atomic.Int64
}

func (w *wrongHashTokens) TokenGetByHash(_ context.Context, hash []byte) (*store.Token, error) {
	w.calls.Add(1)
	other := append([]byte(nil), hash...)
	other[len(other)-1] ^= 1
	return &store.Token{ID: "tok_0000000000000000", TenantID: "acme", UserID: "u", Scopes: []string{"ops:admin"}, Hash: other}, nil
}

func TestAuthenticateComparesStoredHash(t *testing.T) {
	t.Parallel()
	tokens := &wrongHashTokens{}
	auth := tenancy.NewAuthenticator(tokens, time.Hour, nil)
	for range 2 {
		_, err := auth.Authenticate(t.Context(), "idg_test_acme")
		require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
	}
	require.EqualValues(t, 2, tokens.calls.Load(), "a row with another hash must not be cached")
}

// TestAuthenticatorComparesInConstantTime checks the source: the stored
// hash is compared with crypto/subtle.ConstantTimeCompare, and nothing in
// the Authenticator compares bytes with a short-circuiting function.
func TestAuthenticatorComparesInConstantTime(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "authenticator.go", nil, 0)
	require.NoError(t, err)
	calls := map[string]int{}
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok {
					calls[pkg.Name+"."+sel.Sel.Name]++
				}
			}
		}
		return true
	})
	require.Positive(t, calls["subtle.ConstantTimeCompare"])
	for _, short := range []string{"bytes.Equal", "bytes.Compare", "slices.Equal", "reflect.DeepEqual", "hex.EncodeToString"} {
		require.Zero(t, calls[short], "authenticator.go must not compare hashes with %s", short)
	}
}

// TestAuthenticateIdentityIDs: API keys of tenants and users as identity
// providers name them authenticate; a row whose id breaks domain.CheckID
// (written around CreateToken's check) is refused, saying which id.
func TestAuthenticateIdentityIDs(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	for i, ids := range [][2]string{{"acme", "auth0|64f1c2"}, {"ann@example.com", "Zoë"}, {strings.Repeat("t", 74), "u"}, {"acme", "bad\nuser"}} {
		secret, id, err := tenancy.NewToken()
		require.NoError(t, err)
		_, err = b.store.TokenInsert(ctx, &store.TokenInsertParams{ID: id, TenantID: ids[0], UserID: ids[1], Scopes: []string{"operations:read"}, Hash: tenancy.HashToken(secret)})
		require.NoError(t, err)
		actor, err := b.auth.Authenticate(ctx, secret)
		if i == 3 {
			require.ErrorIs(t, err, tenancy.ErrUnauthenticated)
			var ie *vocab.IdentityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, "user_id", ie.Field)
			require.NotContains(t, err.Error(), "bad\nuser")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, ids, [2]string{actor.TenantID, actor.UserID})
	}
}
