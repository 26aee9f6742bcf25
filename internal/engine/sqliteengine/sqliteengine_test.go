package sqliteengine_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store/storetest"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

type testBundle struct {
	*storetest.Bundle
	db *sql.DB
}

// setup returns a store on a database of its own.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	_, db := sqlitetest.NewDB(t)
	s := sqliteengine.New(db)
	t.Cleanup(func() { _ = s.Close() })
	return t.Context(), &testBundle{db: db, Bundle: &storetest.Bundle{
		Store: s,
		Begin: s.Begin,
		Count: func(ctx context.Context, table string) int {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
			return n
		},
		// SQLite keeps milliseconds (sqliteengine.TimeFormat).
		TimeResolution: time.Millisecond,
	}}
}

// TestStoreConformance runs the suite every engine passes for package store.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) *storetest.Bundle {
		_, b := setup(t)
		return b.Bundle
	})
}

func TestTokenUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A file that cannot be opened: its directory does not exist.
	db, err := sql.Open(sqliteengine.DriverName, sqliteengine.DSN(filepath.Join(t.TempDir(), "no", "such", "dir", "db.sqlite3")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = sqliteengine.New(db).TokenGetByHash(ctx, tenancy.HashToken("idg_whatever"))
	require.ErrorIs(t, err, vocab.ErrUnavailable)
}
