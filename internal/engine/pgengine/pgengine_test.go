package pgengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/store/storetest"
	"github.com/idemgate/idemgate/internal/tenancy"
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
		Begin: storetest.Begin(s),
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
	require.ErrorIs(t, err, domain.ErrUnavailable)
}

// TestDomainPostgres checks what store.Domain does not show: Postgres's
// constraint errors and the columns the writes stamp.
func TestDomainPostgres(t *testing.T) {
	t.Parallel()

	t.Run("RefundRecordConstraints", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		storetest.SeedDomain(ctx, t, b.Store)
		refund := func(order string, cents int64) *pgconn.PgError {
			err := storetest.InTx(ctx, t, b.Bundle, func(tx storetest.Tx) error {
				return b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: order,
					OperationID: storetest.OperationID(1), StripeRefundID: "re_1", AmountCents: cents, Currency: "usd", Status: "succeeded"})
			})
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			return pgErr
		}
		// More than the order's amount violates its check; an unknown order
		// its foreign key.
		require.Equal(t, pgerrcode.CheckViolation, refund("ord_9f2", 6000).Code)
		require.Equal(t, pgerrcode.ForeignKeyViolation, refund("ord_none", 1).Code)
	})

	t.Run("SeatResetStampsTheSeat", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		storetest.SeedDomain(ctx, t, b.Store)
		require.NoError(t, storetest.InTx(ctx, t, b.Bundle, func(tx storetest.Tx) error {
			_, err := b.Store.SeatReset(ctx, tx, &store.SeatResetParams{TenantID: "acme", SeatID: "seat_1", OperationID: storetest.OperationID(1)})
			return err
		}))
		var userID *string
		var lastReset time.Time
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT user_id, last_reset_at FROM seats WHERE tenant_id = 'acme' AND seat_id = 'seat_1'").Scan(&userID, &lastReset))
		require.Nil(t, userID)
		require.WithinDuration(t, time.Now(), lastReset, time.Minute)
	})

	t.Run("ResetTokenExpiresAt", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		storetest.SeedDomain(ctx, t, b.Store)
		p := &store.ResetTokenInsertParams{TenantID: "acme", UserID: "usr_1", OperationID: storetest.OperationID(1),
			TokenHash: []byte("0123456789abcdef0123456789abcdef"), MessageID: "<m@idemgate>", ExpiresAt: time.Now().Add(time.Hour)}
		require.NoError(t, storetest.InTx(ctx, t, b.Bundle, func(tx storetest.Tx) error { return b.Store.ResetTokenInsert(ctx, tx, p) }))
		var expires time.Time
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT expires_at FROM password_reset_tokens").Scan(&expires))
		require.Equal(t, p.ExpiresAt.UTC().Truncate(time.Microsecond), expires.UTC())
	})
}
