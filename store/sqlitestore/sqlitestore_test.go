package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate/gatesqlite"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/sqlitestore"
	"github.com/idemgate/idemgate/tenancy"
)

type testBundle struct {
	db    *sql.DB
	store *sqlitestore.Store
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	_, db := sqlitetest.NewDB(t)
	return t.Context(), &testBundle{db: db, store: sqlitestore.New(db)}
}

// insertToken inserts a token with a fresh secret; nil opts means defaults.
func insertToken(ctx context.Context, t *testing.T, s store.Tokens, p *store.TokenInsertParams) (secret string, tok *store.Token) {
	t.Helper()
	secret, id, err := tenancy.NewToken()
	require.NoError(t, err)
	if p == nil {
		p = &store.TokenInsertParams{}
	}
	q := *p
	q.ID, q.Hash = id, tenancy.HashToken(secret)
	if q.TenantID == "" {
		q.TenantID = "acme"
	}
	if q.UserID == "" {
		q.UserID = "support-bot"
	}
	if q.Scopes == nil {
		q.Scopes = []string{tenancy.ScopeBillingRefund}
	}
	tok, err = s.TokenInsert(ctx, &q)
	require.NoError(t, err)
	return secret, tok
}

func count(ctx context.Context, t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestTokens(t *testing.T) {
	t.Parallel()

	t.Run("InsertGet", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		// SQLite keeps milliseconds (gatesqlite.TimeFormat).
		expires := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		secret, tok := insertToken(ctx, t, b.store, &store.TokenInsertParams{
			TenantID: "acme", UserID: "ana", Scopes: []string{tenancy.ScopeBillingRefund, tenancy.ScopeOperationsRead},
			ExpiresAt: &expires,
		})
		require.True(t, strings.HasPrefix(tok.ID, "tok_"))
		require.Equal(t, "acme", tok.TenantID)
		require.Equal(t, "ana", tok.UserID)
		require.Equal(t, []string{tenancy.ScopeBillingRefund, tenancy.ScopeOperationsRead}, tok.Scopes)
		require.Equal(t, tenancy.HashToken(secret), tok.Hash)
		require.WithinDuration(t, time.Now(), tok.CreatedAt, time.Minute)
		require.Equal(t, time.UTC, tok.CreatedAt.Location())
		require.Equal(t, expires, *tok.ExpiresAt)
		require.Nil(t, tok.RevokedAt)

		got, err := b.store.TokenGetByHash(ctx, tenancy.HashToken(secret))
		require.NoError(t, err)
		require.Equal(t, tok, got)
	})

	t.Run("GetUnknown", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.TokenGetByHash(ctx, tenancy.HashToken("idg_nobody_has_this"))
		require.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("InsertDuplicateHash", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, tok := insertToken(ctx, t, b.store, nil)
		_, err := b.store.TokenInsert(ctx, &store.TokenInsertParams{
			ID: "tok_other", TenantID: "beta", UserID: "u", Scopes: tok.Scopes, Hash: tenancy.HashToken(secret),
		})
		require.ErrorIs(t, err, domain.ErrAlreadyExists)
	})

	t.Run("InsertInvalid", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.TokenInsert(ctx, &store.TokenInsertParams{ID: "tok_1", TenantID: "a", UserID: "u", Hash: []byte("short")})
		require.ErrorContains(t, err, "Hash must be 32 bytes")
	})

	t.Run("RevokeStillReturnedByGet", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		secret, tok := insertToken(ctx, t, b.store, nil)

		revoked, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
		require.Equal(t, tok.ID, revoked.ID)

		got, err := b.store.TokenGetByHash(ctx, tenancy.HashToken(secret))
		require.NoError(t, err)
		require.Equal(t, revoked, got)

		// Revoking again keeps the first revocation time.
		again, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)
		require.Equal(t, *revoked.RevokedAt, *again.RevokedAt)
	})

	t.Run("RevokeTenantScoped", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, tok := insertToken(ctx, t, b.store, &store.TokenInsertParams{TenantID: "acme"})

		_, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "beta"})
		require.ErrorIs(t, err, domain.ErrNotFound)

		revoked, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "acme"})
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
	})

	t.Run("RevokeUnknown", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: "tok_0000000000000000"})
		require.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		list, err := b.store.TokenList(ctx, &store.TokenListParams{TenantID: "acme"})
		require.NoError(t, err)
		require.Empty(t, list)

		_, first := insertToken(ctx, t, b.store, &store.TokenInsertParams{TenantID: "acme", UserID: "a"})
		_, second := insertToken(ctx, t, b.store, &store.TokenInsertParams{TenantID: "acme", UserID: "b"})
		insertToken(ctx, t, b.store, &store.TokenInsertParams{TenantID: "beta"})
		_, err = b.store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: first.ID})
		require.NoError(t, err)

		list, err = b.store.TokenList(ctx, &store.TokenListParams{TenantID: "acme"})
		require.NoError(t, err)
		require.Len(t, list, 2)
		ids := []string{list[0].ID, list[1].ID}
		require.ElementsMatch(t, []string{first.ID, second.ID}, ids)
		for _, tok := range list {
			if tok.ID == first.ID {
				require.NotNil(t, tok.RevokedAt)
			} else {
				require.Nil(t, tok.RevokedAt)
			}
		}
	})

	t.Run("ListRequiresTenant", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.TokenList(ctx, &store.TokenListParams{})
		require.ErrorContains(t, err, "TenantID is required")
	})

	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A file that cannot be opened: its directory does not exist.
		db, err := sql.Open(gatesqlite.DriverName, gatesqlite.DSN(filepath.Join(t.TempDir(), "no", "such", "dir", "db.sqlite3")))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		_, err = sqlitestore.New(db).TokenGetByHash(ctx, tenancy.HashToken("idg_whatever"))
		require.ErrorIs(t, err, domain.ErrUnavailable)
	})
}

func TestOrderGet(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	_, err := b.db.ExecContext(ctx, `INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency, refunded_cents)
		VALUES ('acme', 'ord_1', 'ch_1', 5000, 'usd', 1200)`)
	require.NoError(t, err)

	o, err := b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_1"})
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), o.CreatedAt, time.Minute)
	o.CreatedAt = time.Time{}
	require.Equal(t, &store.Order{TenantID: "acme", OrderID: "ord_1", ChargeID: "ch_1", AmountCents: 5000,
		RefundedCents: 1200, Currency: "usd"}, o)

	_, err = b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "beta", OrderID: "ord_1"})
	require.ErrorIs(t, err, domain.ErrNotFound)
	_, err = b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_2"})
	require.ErrorIs(t, err, domain.ErrNotFound)
}

const seedJSON = `{
  "orders":    [{"tenant": "acme", "order_id": "ord_9f2", "charge_id": "ch_123", "amount_cents": 5000, "currency": "usd"},
                {"tenant": "beta", "order_id": "ord_9f2", "charge_id": "ch_456", "amount_cents": 700, "currency": "eur"}],
  "customers": [{"tenant": "acme", "customer_id": "cus_1", "currency": "usd"}],
  "seats":     [{"tenant": "acme", "seat_id": "seat_1", "user_id": "usr_1"}, {"tenant": "acme", "seat_id": "seat_2"}],
  "users":     [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}],
  "tokens":    [{"tenant": "acme", "user": "support-bot", "scopes": ["billing:refund"], "token": "idg_test_acme"},
                {"tenant": "acme", "user": "ops", "scopes": ["ops:admin", "operations:read"], "expires_at": "2099-01-01T00:00:00Z"}]
}`

func parseSeed(t *testing.T, s string) *store.SeedFile {
	t.Helper()
	f, err := store.ParseSeed(strings.NewReader(s))
	require.NoError(t, err)
	return f
}

func TestSeed(t *testing.T) {
	t.Parallel()

	t.Run("TwiceIsIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		f := parseSeed(t, seedJSON)

		res, err := b.store.Seed(ctx, f)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Created: 2}, res.Orders)
		require.Equal(t, store.SeedCount{Created: 1}, res.Customers)
		require.Equal(t, store.SeedCount{Created: 2}, res.Seats)
		require.Equal(t, store.SeedCount{Created: 1}, res.Users)
		require.Equal(t, store.SeedCount{Created: 2}, res.Tokens)
		require.Len(t, res.CreatedTokens, 1, "only the token without a fixed value is reported")
		created := res.CreatedTokens[0]
		require.Equal(t, 1, created.Index)
		require.Equal(t, "ops", created.UserID)
		require.True(t, strings.HasPrefix(created.Token, "idg_"))

		// The minted token is stored by hash, with its expiry.
		tok, err := b.store.TokenGetByHash(ctx, tenancy.HashToken(created.Token))
		require.NoError(t, err)
		require.Equal(t, created.ID, tok.ID)
		require.Equal(t, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), *tok.ExpiresAt)
		// So is the fixed one.
		fixed, err := b.store.TokenGetByHash(ctx, tenancy.HashToken("idg_test_acme"))
		require.NoError(t, err)
		require.Equal(t, "support-bot", fixed.UserID)

		counts := func() map[string]int {
			m := map[string]int{}
			for _, table := range []string{"orders", "customers", "seats", "users", "api_tokens"} {
				m[table] = count(ctx, t, b.db, table)
			}
			return m
		}
		require.Equal(t, map[string]int{"orders": 2, "customers": 1, "seats": 2, "users": 1, "api_tokens": 2}, counts())

		// Second run: every row exists; only the valueless token is minted again.
		res, err = b.store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 2}, res.Orders)
		require.Equal(t, store.SeedCount{Existing: 1}, res.Customers)
		require.Equal(t, store.SeedCount{Existing: 2}, res.Seats)
		require.Equal(t, store.SeedCount{Existing: 1}, res.Users)
		require.Equal(t, store.SeedCount{Created: 1, Existing: 1}, res.Tokens)
		require.Len(t, res.CreatedTokens, 1)
		require.Equal(t, map[string]int{"orders": 2, "customers": 1, "seats": 2, "users": 1, "api_tokens": 3}, counts())

		// A file of fixed values only is a no-op the second time.
		fixedOnly := parseSeed(t, seedJSON)
		fixedOnly.Tokens = fixedOnly.Tokens[:1]
		_, err = b.store.Seed(ctx, fixedOnly)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"orders": 2, "customers": 1, "seats": 2, "users": 1, "api_tokens": 3}, counts())
	})

	t.Run("ExistingRowsUnchanged", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)

		changed := parseSeed(t, seedJSON)
		changed.Orders[0].AmountCents = 9999
		changed.Users[0].Email = "other@example.com"
		res, err := b.store.Seed(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 2}, res.Orders)

		o, err := b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_9f2"})
		require.NoError(t, err)
		require.EqualValues(t, 5000, o.AmountCents)
	})

	t.Run("FixedTokenOfAnotherTenantRefused", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)
		before := count(ctx, t, b.db, "api_tokens")

		f := parseSeed(t, `{
			"orders": [{"tenant": "gamma", "order_id": "ord_1", "charge_id": "ch_1", "amount_cents": 1, "currency": "usd"}],
			"tokens": [{"tenant": "gamma", "user": "support-bot", "scopes": ["billing:refund"], "token": "idg_test_acme"}]}`)
		_, err = b.store.Seed(ctx, f)
		require.ErrorContains(t, err, "tokens[0].token: this value is already token")
		// Nothing of the file was loaded: one transaction.
		require.Equal(t, before, count(ctx, t, b.db, "api_tokens"))
		_, err = b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "gamma", OrderID: "ord_1"})
		require.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("FixedTokenScopesInAnyOrder", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		f := parseSeed(t, `{"tokens": [{"tenant": "a", "user": "u", "scopes": ["seats:reset", "billing:refund"], "token": "idg_fixed_1"}]}`)
		_, err := b.store.Seed(ctx, f)
		require.NoError(t, err)
		f.Tokens[0].Scopes = []string{"billing:refund", "seats:reset"}
		res, err := b.store.Seed(ctx, f)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 1}, res.Tokens)
	})

	t.Run("ValidatesProgrammaticFiles", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		_, err := b.store.Seed(ctx, &store.SeedFile{Orders: []store.SeedOrder{{Tenant: "a", OrderID: "o", ChargeID: "c", Currency: "usd"}}})
		require.ErrorContains(t, err, "orders[0].amount_cents: must be positive")
		require.Zero(t, count(ctx, t, b.db, "orders"))
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		res, err := b.store.Seed(ctx, &store.SeedFile{})
		require.NoError(t, err)
		require.Equal(t, &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}, res)
	})
}
