// Package storetest is the conformance suite that every engine's store
// (store.Tokens and store.Seeder) must pass. Seeding the built-in tools'
// rows joins the engine's seeding transaction (tools.Seed).
// engine/pgengine and engine/sqliteengine call Exercise from their tests; what
// only one engine has (its time format, its constraint errors, how it fails
// when unreachable) stays in that engine's tests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Store is everything an engine's store implements.
type Store interface {
	store.Tokens
	store.Seeder
	store.TenantSettings
}

// Bundle is what an engine's test gives the suite: a fresh, migrated store
// of its own and the little the interfaces cannot do.
type Bundle struct {
	Store Store
	// Begin begins a transaction of the engine's core.Store, which Domain
	// writes join.
	Begin func(ctx context.Context) (core.Tx, error)
	// Count returns how many rows table holds.
	Count func(ctx context.Context, table string) int
	// TimeResolution is what the engine keeps of a time: time.Microsecond
	// for Postgres, time.Millisecond for SQLite.
	TimeResolution time.Duration
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

// InTx runs fn in a transaction from b.Begin and commits it; fn's error
// rolls it back and is returned.
func InTx(ctx context.Context, t *testing.T, b *Bundle, fn func(tx core.Tx) error) error {
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
	f, err := store.ParseSeed(strings.NewReader(s), &tools.Seed{})
	require.NoError(t, err)
	return f
}

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
		require.ErrorIs(t, err, vocab.ErrNotFound)
	},

	"TokenInsertDuplicateHash": func(ctx context.Context, t *testing.T, b *Bundle) {
		secret, tok := insertToken(ctx, t, b.Store, nil)
		_, err := b.Store.TokenInsert(ctx, &store.TokenInsertParams{
			ID: "tok_other", TenantID: "beta", UserID: "u", Scopes: tok.Scopes, Hash: tenancy.HashToken(secret),
		})
		require.ErrorIs(t, err, vocab.ErrAlreadyExists)
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
		require.ErrorIs(t, err, vocab.ErrNotFound)

		revoked, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "acme"})
		require.NoError(t, err)
		require.NotNil(t, revoked.RevokedAt)
	},

	"TokenRevokeUnknown": func(ctx context.Context, t *testing.T, b *Bundle) {
		_, err := b.Store.TokenRevoke(ctx, &store.TokenRevokeParams{ID: "tok_0000000000000000"})
		require.ErrorIs(t, err, vocab.ErrNotFound)
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

	"SeedTwiceIsIdempotent": func(ctx context.Context, t *testing.T, b *Bundle) {
		res, err := b.Store.Seed(ctx, parseSeed(t, seedJSON))
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Created: 2}, *res.Count("orders"))
		require.Equal(t, store.SeedCount{Created: 1}, *res.Count("customers"))
		require.Equal(t, store.SeedCount{Created: 2}, *res.Count("seats"))
		require.Equal(t, store.SeedCount{Created: 1}, *res.Count("users"))
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
		require.Equal(t, store.SeedCount{Existing: 2}, *res.Count("orders"))
		require.Equal(t, store.SeedCount{Existing: 1}, *res.Count("customers"))
		require.Equal(t, store.SeedCount{Existing: 2}, *res.Count("seats"))
		require.Equal(t, store.SeedCount{Existing: 1}, *res.Count("users"))
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
		changed.Rows.(*tools.Seed).Orders[0].AmountCents = 9999
		changed.Rows.(*tools.Seed).Users[0].Email = "other@example.com"
		res, err := b.Store.Seed(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 2}, *res.Count("orders"))
		require.Equal(t, store.SeedCount{Existing: 1}, *res.Count("users"))

		var amount int64
		var email string
		require.NoError(t, InTx(ctx, t, b, func(gtx core.Tx) error {
			tx, err := toolspec.WrapTx(gtx)
			require.NoError(t, err)
			require.NoError(t, tx.QueryRow(ctx, `SELECT amount_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_9f2'`).Scan(&amount))
			return tx.QueryRow(ctx, `SELECT email FROM users WHERE tenant_id = 'acme' AND user_id = 'usr_1'`).Scan(&email)
		}))
		require.EqualValues(t, 5000, amount)
		require.Equal(t, "ana@example.com", email)
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
		require.Equal(t, 2, b.Count(ctx, "orders"), "the file's order was not loaded")
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
		_, err := b.Store.Seed(ctx, &store.SeedFile{Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "a", OrderID: "o", ChargeID: "c", Currency: "usd"}}}})
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
			var got string
			err := InTx(ctx, t, b, func(gtx core.Tx) error {
				tx, err := toolspec.WrapTx(gtx)
				require.NoError(t, err)
				return tx.QueryRow(ctx, `SELECT coalesce(reset_link_base, '') FROM tenant_settings WHERE tenant_id = $1`, tenant).Scan(&got)
			})
			if !errors.Is(err, vocab.ErrNotFound) {
				require.NoError(t, err)
			}
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

	"SeedTenantApprovalMailTo": func(ctx context.Context, t *testing.T, b *Bundle) {
		const file = `{"tenants": [{"tenant": "acme", "approval_mail_to": ["finance@acme.example", "cfo@acme.example"]},
			{"tenant": "beta", "approval_mail_to": []}, {"tenant": "gamma", "reset_link_base": "https://gamma.example.com/reset"}]}`
		res, err := b.Store.Seed(ctx, parseSeed(t, file))
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Created: 3}, res.Tenants)
		mailTo := func(tenant string) []string {
			t.Helper()
			addrs, err := b.Store.TenantApprovalMailTo(ctx, tenant)
			require.NoError(t, err)
			return addrs
		}
		require.Equal(t, []string{"finance@acme.example", "cfo@acme.example"}, mailTo("acme"), "as seeded, in order")
		require.Nil(t, mailTo("beta"), "an empty list: nobody")
		require.Nil(t, mailTo("gamma"), "a row without addresses: nobody")
		require.Nil(t, mailTo("delta"), "no row: nobody")

		// Again, with other addresses: the rows exist and are left as they are.
		changed := parseSeed(t, file)
		changed.Tenants[0].ApprovalMailTo = []string{"other@acme.example"}
		changed.Tenants[2].ApprovalMailTo = []string{"ops@gamma.example"}
		res, err = b.Store.Seed(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, store.SeedCount{Existing: 3}, res.Tenants)
		require.Equal(t, []string{"finance@acme.example", "cfo@acme.example"}, mailTo("acme"))
		require.Nil(t, mailTo("gamma"))
	},

	"SeedToolRowsNeedRows": func(ctx context.Context, t *testing.T, b *Bundle) {
		f := parseSeed(t, seedJSON)
		f.Rows = nil
		f.Tenants = append(f.Tenants, store.SeedTenant{Tenant: "acme", ApprovalThresholds: map[string]int64{"refund_order": 100}})
		_, err := b.Store.Seed(ctx, f)
		require.ErrorContains(t, err, "set SeedFile.Rows")
		require.Zero(t, b.Count(ctx, "api_tokens"), "nothing of the file was loaded")
	},

	"SeedEmpty": func(ctx context.Context, t *testing.T, b *Bundle) {
		res, err := b.Store.Seed(ctx, &store.SeedFile{})
		require.NoError(t, err)
		require.Equal(t, &store.SeedResult{CreatedTokens: []store.SeedCreatedToken{}}, res)
	},
}
