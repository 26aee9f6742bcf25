package sqliteengine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/store/storetest"
)

// TestDomainSQLite checks what store.Domain does not show: SQLite's
// constraint errors, the columns the writes stamp, and its time format.
func TestDomainSQLite(t *testing.T) {
	t.Parallel()

	t.Run("RefundRecordConstraints", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		storetest.SeedDomain(ctx, t, b.Store)
		refund := func(order string, cents int64) error {
			return storetest.InTx(ctx, t, b.Bundle, func(tx storetest.Tx) error {
				return b.Store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: order,
					OperationID: storetest.OperationID(1), StripeRefundID: "re_1", AmountCents: cents, Currency: "usd", Status: "succeeded"})
			})
		}
		// More than the order's amount violates its check; an unknown order
		// its foreign key.
		require.ErrorContains(t, refund("ord_9f2", 6000), "CHECK constraint failed")
		require.ErrorContains(t, refund("ord_none", 1), "FOREIGN KEY constraint failed")
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
		var lastReset string
		require.NoError(t, b.db.QueryRowContext(ctx, "SELECT user_id, last_reset_at FROM seats WHERE tenant_id = 'acme' AND seat_id = 'seat_1'").Scan(&userID, &lastReset))
		require.Nil(t, userID)
		at, err := sqliteengine.ParseTime(lastReset)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Minute)
	})

	t.Run("ResetTokenExpiresAtFormat", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		storetest.SeedDomain(ctx, t, b.Store)
		p := &store.ResetTokenInsertParams{TenantID: "acme", UserID: "usr_1", OperationID: storetest.OperationID(1),
			TokenHash: []byte("0123456789abcdef0123456789abcdef"), MessageID: "<m@idemgate>", ExpiresAt: time.Now().Add(time.Hour)}
		require.NoError(t, storetest.InTx(ctx, t, b.Bundle, func(tx storetest.Tx) error { return b.Store.ResetTokenInsert(ctx, tx, p) }))
		var expires string
		require.NoError(t, b.db.QueryRowContext(ctx, "SELECT expires_at FROM password_reset_tokens").Scan(&expires))
		require.Equal(t, sqliteengine.FormatTime(p.ExpiresAt), expires)
	})
}
