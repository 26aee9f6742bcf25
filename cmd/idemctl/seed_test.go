package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
)

const seedFileJSON = `{
  "orders":    [{"tenant": "acme", "order_id": "ord_9f2", "charge_id": "ch_123", "amount_cents": 5000, "currency": "usd"}],
  "customers": [{"tenant": "acme", "customer_id": "cus_1", "currency": "usd"}],
  "seats":     [{"tenant": "acme", "seat_id": "seat_1", "user_id": "usr_1"}],
  "users":     [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}],
  "tokens":    [{"tenant": "acme", "user": "support-bot", "scopes": ["billing:refund"], "token": "idg_test_acme"},
                {"tenant": "acme", "user": "demo", "scopes": ["operations:read"]}],
  "tenants":   [{"tenant": "acme", "reset_link_base": "https://app.acme.example/reset-password"}]
}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func rowCounts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, table := range []string{"orders", "customers", "seats", "users", "api_tokens", "tenant_settings"} {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
		m[table] = n
	}
	return m
}

func TestSeedCommand(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL, pool := pgtest.NewDB(t)
	path := writeFile(t, "seed.json", seedFileJSON)

	res := idemctl(ctx, t, dbURL, "seed", "--file", path)
	require.Equal(t, 0, res.code, res.stderr)
	var first store.SeedResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &first))
	require.Equal(t, store.SeedCount{Created: 1}, *first.Count("orders"))
	require.Equal(t, store.SeedCount{Created: 1}, *first.Count("customers"))
	require.Equal(t, store.SeedCount{Created: 1}, *first.Count("seats"))
	require.Equal(t, store.SeedCount{Created: 1}, *first.Count("users"))
	require.Equal(t, store.SeedCount{Created: 2}, first.Tokens)
	require.Equal(t, store.SeedCount{Created: 1}, first.Tenants)
	// Only the token without a fixed value is printed.
	require.Len(t, first.CreatedTokens, 1)
	require.Equal(t, 1, first.CreatedTokens[0].Index)
	require.Equal(t, "demo", first.CreatedTokens[0].UserID)
	require.NotContains(t, res.stdout, "idg_test_acme")
	require.Equal(t, map[string]int{"orders": 1, "customers": 1, "seats": 1, "users": 1, "api_tokens": 2, "tenant_settings": 1}, rowCounts(t, pool))

	// Both tokens authenticate.
	auth := tenancy.NewAuthenticator(pgengine.New(pool), 0, nil)
	for _, secret := range []string{"idg_test_acme", first.CreatedTokens[0].Token} {
		actor, err := auth.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.Equal(t, "acme", actor.TenantID)
	}

	// Second run: nothing new but the valueless token.
	res = idemctl(ctx, t, dbURL, "seed", "--file", path)
	require.Equal(t, 0, res.code, res.stderr)
	var second store.SeedResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &second))
	require.Equal(t, store.SeedCount{Existing: 1}, *second.Count("orders"))
	require.Equal(t, store.SeedCount{Existing: 1}, *second.Count("customers"))
	require.Equal(t, store.SeedCount{Existing: 1}, *second.Count("seats"))
	require.Equal(t, store.SeedCount{Existing: 1}, *second.Count("users"))
	require.Equal(t, store.SeedCount{Created: 1, Existing: 1}, second.Tokens)
	require.Equal(t, store.SeedCount{Existing: 1}, second.Tenants)
	require.Len(t, second.CreatedTokens, 1)
	require.NotEqual(t, first.CreatedTokens[0].Token, second.CreatedTokens[0].Token)
	require.Equal(t, map[string]int{"orders": 1, "customers": 1, "seats": 1, "users": 1, "api_tokens": 3, "tenant_settings": 1}, rowCounts(t, pool))

	// The summary's shape, for programs.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &raw))
	require.ElementsMatch(t, []string{"orders", "customers", "seats", "users", "tokens", "tenants", "created_tokens"}, keys(raw))
}

func TestSeedCommandStdinAndErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL, pool := pgtest.NewDB(t)

	// --file - reads standard input, which runIO takes here.
	var stdout, stderr bytes.Buffer
	stdin := strings.NewReader(`{"users": [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}]}`)
	require.Equal(t, exitOK, runIO(ctx, []string{"--database-url", dbURL, "seed", "--file", "-"}, stdin, &stdout, &stderr), stderr.String())
	var fromStdin store.SeedResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &fromStdin))
	require.Equal(t, store.SeedCount{Created: 1}, *fromStdin.Count("users"))

	bad := writeFile(t, "bad.json", `{"orders": [{"tenant": "acme", "order_id": "o", "charge_id": "c", "amount_cents": 0, "currency": "usd"}]}`)
	res := idemctl(ctx, t, dbURL, "seed", "--file", bad)
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "orders[0].amount_cents: must be positive")

	unknown := writeFile(t, "unknown.json", `{"products": []}`)
	res = idemctl(ctx, t, dbURL, "seed", "--file", unknown)
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, `unknown field "products"`)

	res = idemctl(ctx, t, dbURL, "seed", "--file", filepath.Join(t.TempDir(), "missing.json"))
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "--file:")

	res = idemctl(ctx, t, dbURL, "seed")
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "--file is required")

	// None of the rejected files loaded anything.
	require.Equal(t, map[string]int{"orders": 0, "customers": 0, "seats": 0, "users": 1, "api_tokens": 0, "tenant_settings": 0}, rowCounts(t, pool))

}

func TestMigrateSeedAndTokensOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "quickstart.db")
	res := idemctl(ctx, t, dbURL, "migrate")
	require.Equal(t, 0, res.code, res.stderr)
	res = idemctl(ctx, t, dbURL, "migrate")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{"river_applied":0,"idemgate_applied":0,"builtins_applied":0}`, res.stdout)

	seed := writeFile(t, "seed.json", `{"orders":[{"tenant":"acme","order_id":"ord_1","charge_id":"ch_1","amount_cents":100,"currency":"usd"}],
		"tokens":[{"tenant":"acme","user":"bot","scopes":["billing:refund"],"token":"idg_sqlite_demo"}]}`)
	for range 2 {
		res = idemctl(ctx, t, dbURL, "seed", "--file", seed)
		require.Equal(t, 0, res.code, res.stderr)
	}
	res = idemctl(ctx, t, dbURL, "token", "create", "--tenant", "acme", "--user", "u", "--scopes", "operations:read")
	require.Equal(t, 0, res.code, res.stderr)
	require.True(t, strings.HasPrefix(strings.TrimSpace(res.stdout), "idg_"))
	res = idemctl(ctx, t, dbURL, "token", "list", "--tenant", "acme")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, 2, strings.Count(res.stdout, "\n"))
}
