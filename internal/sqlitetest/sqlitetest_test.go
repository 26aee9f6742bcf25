package sqlitetest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/sqlitetest"
)

func TestNewDB(t *testing.T) {
	t.Parallel()

	t.Run("MigratedAndOwnFile", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pathA, a := sqlitetest.NewDB(t)
		pathB, b := sqlitetest.NewDB(t)
		require.NotEqual(t, pathA, pathB)
		require.Equal(t, sqlitetest.FileName, filepath.Base(pathA))

		ok, err := sqliteengine.Status(ctx, a)
		require.NoError(t, err)
		require.True(t, ok)

		_, err = a.ExecContext(ctx, `INSERT INTO customers (tenant_id, customer_id, currency) VALUES ('acme', 'cus_1', 'usd')`)
		require.NoError(t, err)
		var n int
		require.NoError(t, b.QueryRowContext(ctx, "SELECT count(*) FROM customers").Scan(&n))
		require.Zero(t, n, "databases are not shared")
	})

	t.Run("TemplateIsReused", func(t *testing.T) {
		t.Parallel()
		sqlitetest.NewDB(t)
		fingerprint, err := sqlitetest.Fingerprint()
		require.NoError(t, err)
		matches, err := filepath.Glob(filepath.Join(sqlitetest.TemplateDir(), "idemgate_tpl_"+fingerprint[:12]+".sqlite3"))
		require.NoError(t, err)
		require.Len(t, matches, 1)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n))
		require.Zero(t, n)
	})
}

func TestFingerprintIsStable(t *testing.T) {
	t.Parallel()
	a, err := sqlitetest.Fingerprint()
	require.NoError(t, err)
	b, err := sqlitetest.Fingerprint()
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Len(t, a, 64)
}
