// Package storetest is the conformance suite that every engine's store
// (store.Tokens, store.Orders, store.Seeder, store.Domain and
// store.ResetTokens) must pass.
// store/pgstore and store/sqlitestore call Exercise from their tests; what
// only one engine has (its time format, its constraint errors, how it fails
// when unreachable) stays in that engine's tests.
package storetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
)

// Store is everything an engine's store implements.
type Store interface {
	store.Tokens
	store.Seeder
	store.Domain
	store.ResetTokens
}

// Tx is an engine's gate transaction, which Domain writes join.
type Tx interface {
	gate.Tx
	store.Tx
}

// Bundle is what an engine's test gives the suite: a fresh, migrated store
// of its own and the little the interfaces cannot do.
type Bundle struct {
	Store Store
	// Begin begins a transaction of the engine's gate.Store, which Domain
	// writes join.
	Begin func(ctx context.Context) (Tx, error)
	// Count returns how many rows table holds.
	Count func(ctx context.Context, table string) int
	// TimeResolution is what the engine keeps of a time: time.Microsecond
	// for Postgres, time.Millisecond for SQLite.
	TimeResolution time.Duration
}

// Begin is Bundle.Begin for a store whose transactions are also store.Tx,
// as every engine's are.
func Begin(s gate.Store) func(ctx context.Context) (Tx, error) {
	return func(ctx context.Context) (Tx, error) {
		tx, err := s.Begin(ctx)
		if err != nil {
			return nil, err
		}
		stx, ok := tx.(Tx)
		if !ok {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("storetest: %T is not a store.Tx", tx)
		}
		return stx, nil
	}
}

// Exercise runs the suite. newBundle must return an isolated store each
// time it is called (a database of its own).
func Exercise(t *testing.T, newBundle func(t *testing.T) *Bundle) {
	t.Helper()
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t.Context(), t, newBundle(t))
		})
	}
}

// OperationID returns a valid operation id (a UUID), the same for the same n.
func OperationID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// domainSeed is the rows the Domain tests act on.
const domainSeed = `{
  "orders":    [{"tenant": "acme", "order_id": "ord_9f2", "charge_id": "ch_123", "amount_cents": 5000, "currency": "usd"}],
  "customers": [{"tenant": "acme", "customer_id": "cus_1", "currency": "usd"}, {"tenant": "acme", "customer_id": "cus_2", "currency": "eur"}],
  "seats":     [{"tenant": "acme", "seat_id": "seat_1", "user_id": "usr_1"}, {"tenant": "acme", "seat_id": "seat_2"}],
  "users":     [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}]
}`

// SeedDomain loads the rows the Domain tests act on: tenant acme's order
// ord_9f2 (5000 usd cents), customers cus_1 (usd) and cus_2 (eur), seats
// seat_1 (of usr_1) and seat_2 (free), and user usr_1 (ana@example.com).
func SeedDomain(ctx context.Context, t *testing.T, s store.Seeder) {
	t.Helper()
	_, err := s.Seed(ctx, parseSeed(t, domainSeed))
	require.NoError(t, err)
}

// InTx runs fn in a transaction from b.Begin and commits it; fn's error
// rolls it back and is returned.
func InTx(ctx context.Context, t *testing.T, b *Bundle, fn func(tx Tx) error) error {
	t.Helper()
	tx, err := b.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
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
		q.Scopes = []string{"billing:refund"}
	}
	tok, err = s.TokenInsert(ctx, &q)
	require.NoError(t, err)
	return secret, tok
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

// otherTx is a gate.Tx of another engine.
type otherTx struct{ gate.Tx }

func (otherTx) Raw() any { return 42 }

var tests = map[string]func(ctx context.Context, t *testing.T, b *Bundle){
	"TokenInsertGet": func(ctx context.Context, t *testing.T, b *Bundle) {
		expires := time.Now().Add(time.Hour).UTC().Truncate(b.TimeResolution)
		secret, tok := insertToken(ctx, t, b.Store, &store.TokenInsertParams{
			TenantID: "acme", UserID: "ana", Scopes: []string{"billing:refund", tenancy.ScopeOperationsRead},
			ExpiresAt: &expires,
		})
		require.True(t, strings.HasPrefix(tok.ID, "tok_"))
		require.Equal(t, "acme", tok.TenantID)
		require.Equal(t, "ana", tok.UserID)
		require.Equal(t, []string{"billing:refund", tenancy.ScopeOperationsRead}, tok.Scopes)
		require.Equal(t, tenancy.HashToken(secret), tok.Hash)
		require.WithinDuration(t, time.Now(), tok.CreatedAt, time.Minute)
		require.Equal(t, time.UTC, tok.CreatedAt.Location())
		require.Equal(t, expires, *tok.ExpiresAt)
		require.Nil(t, tok.RevokedAt)

		got, err := b.Store.TokenGetByHash(ctx, tenancy.HashToken(secret))
		require.NoError(t, err)
		require.Equal(t, tok, got)
	},

	"TokenGetUnknown": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.TokenGetByHash(ctx, tenancy.HashToken("idg_nobody_has_this"))
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"TokenInsertDuplicateHash": func(ctx context.Context, t *testing.T, b *Bundle) {
		secret, tok := insertToken(ctx, t, b.Store, nil)
		_, err := b.Store.TokenInsert(ctx, &store.TokenInsertParams{
			ID: "tok_other", TenantID: "beta", UserID: "u", Scopes: tok.Scopes, Hash: tenancy.HashToken(secret),
		})
		require.ErrorIs(t, err, domain.ErrAlreadyExists)
	},

	"TokenInsertInvalid": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.TokenInsert(ctx, &store.TokenInsertParams{ID: "tok_1", TenantID: "a", UserID: "u", Hash: []byte("short")})
		require.ErrorContains(t, err, "Hash must be 32 bytes")
	},

	"TokenRevokeStillReturnedByGet": func(ctx context.Context, t *testing.T, b *Bundle) {
		secret, tok := insertToken(ctx, t, b.Store, nil)

		revoked, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
		require.Equal(t, tok.ID, revoked.ID)

		got, err := b.Store.TokenGetByHash(ctx, tenancy.HashToken(secret))
		require.NoError(t, err)
		require.Equal(t, revoked, got)

		// Revoking again keeps the first revocation time.
		again, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
		require.NoError(t, err)
		require.Equal(t, *revoked.RevokedAt, *again.RevokedAt)
	},

	"TokenRevokeTenantScoped": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, tok := insertToken(ctx, t, b.Store, &store.TokenInsertParams{TenantID: "acme"})

		_, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "beta"})
		require.ErrorIs(t, err, domain.ErrNotFound)

		revoked, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "acme"})
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
	},

	"TokenRevokeUnknown": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: "tok_0000000000000000"})
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"TokenList": func(ctx context.Context, t *testing.T, b *Bundle) {
		list, err := b.Store.TokenList(ctx, &store.TokenListParams{TenantID: "acme"})
		require.NoError(t, err)
		require.Empty(t, list)

		_, first := insertToken(ctx, t, b.Store, &store.TokenInsertParams{TenantID: "acme", UserID: "a"})
		_, second := insertToken(ctx, t, b.Store, &store.TokenInsertParams{TenantID: "acme", UserID: "b"})
		insertToken(ctx, t, b.Store, &store.TokenInsertParams{TenantID: "beta"})
		_, err = b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: first.ID})
		require.NoError(t, err)

		list, err = b.Store.TokenList(ctx, &store.TokenListParams{TenantID: "acme"})
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
	},

	"TokenListRequiresTenant": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.TokenList(ctx, &store.TokenListParams{})
		require.ErrorContains(t, err, "TenantID is required")
	},

	"OrderGet": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.Seed(ctx, parseSeed(t, `{"orders": [{"tenant": "acme", "order_id": "ord_1", "charge_id": "ch_1", "amount_cents": 5000, "currency": "usd"}]}`))
		require.NoError(t, err)
		require.NoError(t, InTx(ctx, t, b, func(tx Tx) error {
			return b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_1",
				OperationID: OperationID(1), StripeRefundID: "re_1", AmountCents: 1200, Currency: "usd", Status: "succeeded"})
		}))

		o, err := b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_1"})
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), o.CreatedAt, time.Minute)
		require.Equal(t, time.UTC, o.CreatedAt.Location())
		o.CreatedAt = time.Time{}
		require.Equal(t, &store.Order{TenantID: "acme", OrderID: "ord_1", ChargeID: "ch_1", AmountCents: 5000,
			RefundedCents: 1200, Currency: "usd"}, o)

		_, err = b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "beta", OrderID: "ord_1"})
		require.ErrorIs(t, err, domain.ErrNotFound)
		_, err = b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_2"})
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"SeedTwiceIsIdempotent": func(ctx context.Context, t *testing.T, b *Bundle) {
		res, err := b.Store.Seed(ctx, parseSeed(t, seedJSON))
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
		tok, err := b.Store.TokenGetByHash(ctx, tenancy.HashToken(created.Token))
		require.NoError(t, err)
		require.Equal(t, created.ID, tok.ID)
		require.Equal(t, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), *tok.ExpiresAt)
		// So is the fixed one.
		fixed, err := b.Store.TokenGetByHash(ctx, tenancy.HashToken("idg_test_acme"))
		require.NoError(t, err)
		require.Equal(t, "support-bot", fixed.UserID)

		counts := func() map[string]int {
			m := map[string]int{}
			for _, table := range []string{"orders", "customers", "seats", "users", "api_tokens"} {
				m[table] = b.Count(ctx, table)
			}
			return m
		}
		require.Equal(t, map[string]int{"orders": 2, "customers": 1, "seats": 2, "users": 1, "api_tokens": 2}, counts())

		// Second run: every row exists; only the valueless token is minted again.
		res, err = b.Store.Seed(ctx, parseSeed(t, seedJSON))
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
		_, err = b.Store.Seed(ctx, fixedOnly)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"orders": 2, "customers": 1, "seats": 2, "users": 1, "api_tokens": 3}, counts())
	},

	"SeedExistingRowsUnchanged": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)

		changed := parseSeed(t, seedJSON)
		changed.Orders[0].AmountCents = 9999
		changed.Users[0].Email = "other@example.com"
		res, err := b.Store.Seed(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 2}, res.Orders)
		require.Equal(t, store.SeedCount{Existing: 1}, res.Users)

		o, err := b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_9f2"})
		require.NoError(t, err)
		require.EqualValues(t, 5000, o.AmountCents)
		u, err := b.Store.UserGet(ctx, "acme", "usr_1")
		require.NoError(t, err)
		require.Equal(t, "ana@example.com", u.Email)
	},

	"SeedFixedTokenOfAnotherTenantRefused": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)
		before := b.Count(ctx, "api_tokens")

		f := parseSeed(t, `{
			"orders": [{"tenant": "gamma", "order_id": "ord_1", "charge_id": "ch_1", "amount_cents": 1, "currency": "usd"}],
			"tokens": [{"tenant": "gamma", "user": "support-bot", "scopes": ["billing:refund"], "token": "idg_test_acme"}]}`)
		_, err = b.Store.Seed(ctx, f)
		require.ErrorContains(t, err, "tokens[0].token: this value is already token")
		// Nothing of the file was loaded: one transaction.
		require.Equal(t, before, b.Count(ctx, "api_tokens"))
		_, err = b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "gamma", OrderID: "ord_1"})
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"SeedFixedTokenScopesInAnyOrder": func(ctx context.Context, t *testing.T, b *Bundle) {
		f := parseSeed(t, `{"tokens": [{"tenant": "a", "user": "u", "scopes": ["seats:reset", "billing:refund"], "token": "idg_fixed_1"}]}`)
		_, err := b.Store.Seed(ctx, f)
		require.NoError(t, err)
		f.Tokens[0].Scopes = []string{"billing:refund", "seats:reset"}
		res, err := b.Store.Seed(ctx, f)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 1}, res.Tokens)
	},

	"SeedValidatesProgrammaticFiles": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.Seed(ctx, &store.SeedFile{Orders: []store.SeedOrder{{Tenant: "a", OrderID: "o", ChargeID: "c", Currency: "usd"}}})
		require.ErrorContains(t, err, "orders[0].amount_cents: must be positive")
		require.Zero(t, b.Count(ctx, "orders"))
	},

	"SeedTenants": func(ctx context.Context, t *testing.T, b *Bundle) {
		const file = `{"tenants": [{"tenant": "acme", "reset_link_base": "https://acme.example.com/reset?lang=en"}, {"tenant": "beta"}]}`
		res, err := b.Store.Seed(ctx, parseSeed(t, file))
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Created: 2}, res.Tenants)
		base := func(tenant string) string {
			t.Helper()
			got, err := b.Store.TenantResetLinkBase(ctx, tenant)
			require.NoError(t, err)
			return got
		}
		require.Equal(t, "https://acme.example.com/reset?lang=en", base("acme"))
		require.Empty(t, base("beta"), "a row without a base: the deployment's")
		require.Empty(t, base("gamma"), "no row: the deployment's")

		// Again, with another base: the rows exist and are left as they are.
		changed := parseSeed(t, file)
		changed.Tenants[0].ResetLinkBase = "https://other.example.com/reset"
		changed.Tenants[1].ResetLinkBase = "https://beta.example.com/reset"
		res, err = b.Store.Seed(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 2}, res.Tenants)
		require.Equal(t, "https://acme.example.com/reset?lang=en", base("acme"))
		require.Empty(t, base("beta"))
		require.Equal(t, 2, b.Count(ctx, "tenant_settings"))
	},

	"SeedEmpty": func(ctx context.Context, t *testing.T, b *Bundle) {
		res, err := b.Store.Seed(ctx, &store.SeedFile{})
		require.NoError(t, err)
		require.Equal(t, &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}, res)
	},

	"DomainReads": func(ctx context.Context, t *testing.T, b *Bundle) {
		SeedDomain(ctx, t, b.Store)

		c, err := b.Store.CustomerGet(ctx, "acme", "cus_1")
		require.NoError(t, err)
		require.Equal(t, &store.Customer{TenantID: "acme", CustomerID: "cus_1", Currency: "usd"}, c)
		_, err = b.Store.CustomerGet(ctx, "beta", "cus_1")
		require.ErrorIs(t, err, domain.ErrNotFound)

		id, err := b.Store.SeatGet(ctx, "acme", "seat_2")
		require.NoError(t, err)
		require.Equal(t, "seat_2", id)
		_, err = b.Store.SeatGet(ctx, "acme", "seat_9")
		require.ErrorIs(t, err, domain.ErrNotFound)

		u, err := b.Store.UserGet(ctx, "acme", "usr_1")
		require.NoError(t, err)
		require.Equal(t, &store.User{TenantID: "acme", UserID: "usr_1", Email: "ana@example.com"}, u)
		_, err = b.Store.UserGet(ctx, "beta", "usr_1")
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"RefundRecord": func(ctx context.Context, t *testing.T, b *Bundle) {
		SeedDomain(ctx, t, b.Store)
		refunded := func() int64 {
			t.Helper()
			o, err := b.Store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_9f2"})
			require.NoError(t, err)
			return o.RefundedCents
		}
		p := &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2", OperationID: OperationID(1), StripeRefundID: "re_1",
			AmountCents: 1200, Currency: "usd", Status: "succeeded"}
		for range 2 { // the same Stripe refund twice is recorded once
			require.NoError(t, InTx(ctx, t, b, func(tx Tx) error { return b.Store.RefundRecord(ctx, tx, p) }))
		}
		require.EqualValues(t, 1200, refunded())
		require.Equal(t, 1, b.Count(ctx, "refunds"))

		// A rolled-back transaction leaves neither the refund nor the amount.
		tx, err := b.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2",
			OperationID: OperationID(2), StripeRefundID: "re_2", AmountCents: 100, Currency: "usd", Status: "succeeded"}))
		require.NoError(t, tx.Rollback(ctx))
		require.EqualValues(t, 1200, refunded())
		require.Equal(t, 1, b.Count(ctx, "refunds"))

		// More than the order's amount, and an unknown order, are refused
		// (which constraint says so is the engine's: see its tests) and
		// change nothing.
		err = InTx(ctx, t, b, func(tx Tx) error {
			return b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2",
				OperationID: OperationID(2), StripeRefundID: "re_3", AmountCents: 4000, Currency: "usd", Status: "succeeded"})
		})
		require.Error(t, err)
		err = InTx(ctx, t, b, func(tx Tx) error {
			return b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_none",
				OperationID: OperationID(3), StripeRefundID: "re_4", AmountCents: 1, Currency: "usd", Status: "succeeded"})
		})
		require.Error(t, err)
		require.EqualValues(t, 1200, refunded())
		require.Equal(t, 1, b.Count(ctx, "refunds"))
	},

	"LedgerInsert": func(ctx context.Context, t *testing.T, b *Bundle) {
		SeedDomain(ctx, t, b.Store)
		insert := func(customer string, op int, cents int64) (*store.LedgerEntry, error) {
			var e *store.LedgerEntry
			err := InTx(ctx, t, b, func(tx Tx) error {
				var err error
				e, err = b.Store.LedgerInsert(ctx, tx, &store.LedgerInsertParams{TenantID: "acme", CustomerID: customer,
					OperationID: OperationID(op), AmountCents: cents, Currency: "usd", Memo: "goodwill"})
				return err
			})
			return e, err
		}
		first, err := insert("cus_1", 1, 500)
		require.NoError(t, err)
		require.EqualValues(t, 500, first.BalanceCents)
		second, err := insert("cus_1", 2, 250)
		require.NoError(t, err)
		require.EqualValues(t, 750, second.BalanceCents)
		require.Greater(t, second.ID, first.ID)
		other, err := insert("cus_2", 3, 100)
		require.NoError(t, err)
		require.EqualValues(t, 100, other.BalanceCents, "balances are per customer")

		_, err = insert("cus_1", 1, 500)
		require.ErrorIs(t, err, domain.ErrAlreadyExists, "one entry per operation")
		require.Equal(t, 3, b.Count(ctx, "ledger_entries"))
	},

	"SeatReset": func(ctx context.Context, t *testing.T, b *Bundle) {
		SeedDomain(ctx, t, b.Store)
		reset := func(seat string, op int) (*store.SeatResetResult, error) {
			var r *store.SeatResetResult
			err := InTx(ctx, t, b, func(tx Tx) error {
				var err error
				r, err = b.Store.SeatReset(ctx, tx, &store.SeatResetParams{TenantID: "acme", SeatID: seat, OperationID: OperationID(op)})
				return err
			})
			return r, err
		}
		r, err := reset("seat_1", 1)
		require.NoError(t, err)
		require.Equal(t, &store.SeatResetResult{PreviousUserID: "usr_1", ResetCount: 1}, r)
		// The first reset freed the seat.
		r, err = reset("seat_1", 2)
		require.NoError(t, err)
		require.Equal(t, &store.SeatResetResult{PreviousUserID: "", ResetCount: 2}, r)

		_, err = reset("seat_9", 3)
		require.ErrorIs(t, err, domain.ErrNotFound)
		require.Equal(t, 2, b.Count(ctx, "seat_resets"))
	},

	"ResetTokenInsert": func(ctx context.Context, t *testing.T, b *Bundle) {
		SeedDomain(ctx, t, b.Store)
		p := &store.ResetTokenInsertParams{TenantID: "acme", UserID: "usr_1", OperationID: OperationID(1),
			TokenHash: []byte("0123456789abcdef0123456789abcdef"), MessageID: "<idg_" + OperationID(1) + "_0@idemgate>",
			ExpiresAt: time.Now().Add(time.Hour)}
		for range 2 { // a resent mail stores its token once
			require.NoError(t, InTx(ctx, t, b, func(tx Tx) error { return b.Store.ResetTokenInsert(ctx, tx, p) }))
		}
		require.Equal(t, 1, b.Count(ctx, "password_reset_tokens"))
	},

	"ResetTokenRedeemOnce": func(ctx context.Context, t *testing.T, b *Bundle) {
		hash := insertResetToken(ctx, t, b, 1, time.Hour)
		r, err := b.Store.ResetTokenRedeem(ctx, hash)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), r.UsedAt, time.Minute)
		require.Equal(t, time.UTC, r.UsedAt.Location())
		r.UsedAt = time.Time{}
		require.Equal(t, &store.ResetTokenRedemption{TenantID: "acme", UserID: "usr_1", OperationID: OperationID(1)}, r)

		for range 2 {
			_, err = b.Store.ResetTokenRedeem(ctx, hash)
			require.ErrorIs(t, err, domain.ErrAlreadyUsed)
		}
		_, err = b.Store.ResetTokenRedeem(ctx, resetTokenHash(2))
		require.ErrorIs(t, err, domain.ErrNotFound)
	},

	"ResetTokenRedeemExpired": func(ctx context.Context, t *testing.T, b *Bundle) {
		hash := insertResetToken(ctx, t, b, 1, -time.Hour)
		for range 2 { // an expired token stays expired, and unused
			_, err := b.Store.ResetTokenRedeem(ctx, hash)
			require.ErrorIs(t, err, domain.ErrExpired)
		}
	},

	"ResetTokenRedeemConcurrently": func(ctx context.Context, t *testing.T, b *Bundle) {
		hash := insertResetToken(ctx, t, b, 1, time.Hour)
		const n = 8
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, err := b.Store.ResetTokenRedeem(ctx, hash)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		redeemed := 0
		for err := range errs {
			if err == nil {
				redeemed++
				continue
			}
			require.ErrorIs(t, err, domain.ErrAlreadyUsed)
		}
		require.Equal(t, 1, redeemed, "one of %d concurrent redeems consumes the token", n)
	},

	"DomainWritesNeedTheEnginesTx": func(ctx context.Context, t *testing.T, b *Bundle) {
		tx := otherTx{}
		// The error names the transaction's type.
		const want = "transaction is int, not "
		require.ErrorContains(t, b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{}), want)
		_, err := b.Store.LedgerInsert(ctx, tx, &store.LedgerInsertParams{})
		require.ErrorContains(t, err, want)
		_, err = b.Store.SeatReset(ctx, tx, &store.SeatResetParams{})
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, b.Store.ResetTokenInsert(ctx, tx, &store.ResetTokenInsertParams{}), want)
	},
}

// resetTokenHash is the hash of test reset token n.
func resetTokenHash(n int) []byte {
	h := sha256.Sum256(fmt.Appendf(nil, "reset-token-%d", n))
	return h[:]
}

// insertResetToken seeds the domain rows and stores reset token n of
// acme's usr_1 (operation OperationID(n)), expiring expiresIn from now; it
// returns its hash.
func insertResetToken(ctx context.Context, t *testing.T, b *Bundle, n int, expiresIn time.Duration) []byte {
	t.Helper()
	SeedDomain(ctx, t, b.Store)
	hash := resetTokenHash(n)
	require.NoError(t, InTx(ctx, t, b, func(tx Tx) error {
		return b.Store.ResetTokenInsert(ctx, tx, &store.ResetTokenInsertParams{TenantID: "acme", UserID: "usr_1",
			OperationID: OperationID(n), TokenHash: hash, MessageID: fmt.Sprintf("<idg_%s_0@idemgate>", OperationID(n)),
			ExpiresAt: time.Now().Add(expiresIn)})
	}))
	return hash
}
