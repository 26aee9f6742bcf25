package pgengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store/storetest"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

type testBundle struct {
	*storetest.Bundle
	pool *pgxpool.Pool
}

// setup returns a store on a database of its own.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	_, pool := pgtest.NewDB(t)
	s := pgengine.New(pool)
	return t.Context(), &testBundle{pool: pool, Bundle: &storetest.Bundle{
		Store: s,
		Begin: s.Begin,
		Count: func(ctx context.Context, table string) int {
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
			return n
		},
		TimeResolution: time.Microsecond,
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
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/nothing?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgengine.New(pool).TokenGetByHash(ctx, tenancy.HashToken("idg_whatever"))
	require.ErrorIs(t, err, vocab.ErrUnavailable)
}
