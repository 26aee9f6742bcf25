package gatetest_test

import (
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the driver the embedded engine uses

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

// TestDatabaseURLReachesTheHarnesssDatabase: a test reads what a call
// wrote through its own connection to DatabaseURL, on both engines, and a
// Postgres harness names its database with the team's DBPrefix.
func TestDatabaseURLReachesTheHarnesssDatabase(t *testing.T) {
	reg := gate.NewRegistry().MustAdd(issueCoupon)
	args := map[string]any{"customer_id": "cus_1", "percent_off": 10}

	t.Run("postgres", func(t *testing.T) {
		h := gatetest.Postgres(t, reg, &gatetest.Options{Migrations: couponMigrations, DBPrefix: "team_t_"})
		u, err := url.Parse(h.DatabaseURL())
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(strings.TrimPrefix(u.Path, "/"), "team_t_"), u.Path)

		h.Call(t, "issue_coupon", "coupon-db-0001", args)
		h.Await(t, "issue_coupon", "coupon-db-0001")
		pool, err := pgxpool.New(t.Context(), h.DatabaseURL())
		require.NoError(t, err)
		defer pool.Close()
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM coupons`).Scan(&n))
		require.Equal(t, 1, n)
	})
	t.Run("sqlite", func(t *testing.T) {
		h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: couponMigrations})
		path, ok := strings.CutPrefix(h.DatabaseURL(), "sqlite:")
		require.True(t, ok, h.DatabaseURL())

		h.Call(t, "issue_coupon", "coupon-db-0001", args)
		h.Await(t, "issue_coupon", "coupon-db-0001")
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		defer db.Close()
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM coupons`).Scan(&n))
		require.Equal(t, 1, n)
	})
}
