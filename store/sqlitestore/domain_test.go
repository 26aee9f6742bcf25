package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatesqlite"
	"github.com/idemgate/idemgate/store"
)

const domainSeed = `{
  "orders":    [{"tenant": "acme", "order_id": "ord_9f2", "charge_id": "ch_123", "amount_cents": 5000, "currency": "usd"}],
  "customers": [{"tenant": "acme", "customer_id": "cus_1", "currency": "usd"}, {"tenant": "acme", "customer_id": "cus_2", "currency": "eur"}],
  "seats":     [{"tenant": "acme", "seat_id": "seat_1", "user_id": "usr_1"}, {"tenant": "acme", "seat_id": "seat_2"}],
  "users":     [{"tenant": "acme", "user_id": "usr_1", "email": "ana@example.com"}]
}`

const (
	op1 = "0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11"
	op2 = "1c5d4d2f-6a1b-4d54-8b49-4a4c7a1f9b22"
	op3 = "2d6e5e3a-7b2c-4e65-9c5a-5b5d8b2a0c33"
)

func setupDomain(t *testing.T) (context.Context, *testBundle, *gatesqlite.Store) {
	t.Helper()
	ctx, b := setup(t)
	_, err := b.store.Seed(ctx, parseSeed(t, domainSeed))
	require.NoError(t, err)
	return ctx, b, gatesqlite.New(b.db)
}

// inTx runs fn in a gatesqlite transaction and commits it.
func inTx(ctx context.Context, t *testing.T, s *gatesqlite.Store, fn func(tx gate.Tx) error) error {
	t.Helper()
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func TestDomainReads(t *testing.T) {
	t.Parallel()
	ctx, b, _ := setupDomain(t)

	c, err := b.store.CustomerGet(ctx, "acme", "cus_1")
	require.NoError(t, err)
	require.Equal(t, &store.Customer{TenantID: "acme", CustomerID: "cus_1", Currency: "usd"}, c)
	_, err = b.store.CustomerGet(ctx, "beta", "cus_1")
	require.ErrorIs(t, err, domain.ErrNotFound)

	id, err := b.store.SeatGet(ctx, "acme", "seat_2")
	require.NoError(t, err)
	require.Equal(t, "seat_2", id)
	_, err = b.store.SeatGet(ctx, "acme", "seat_9")
	require.ErrorIs(t, err, domain.ErrNotFound)

	u, err := b.store.UserGet(ctx, "acme", "usr_1")
	require.NoError(t, err)
	require.Equal(t, &store.User{TenantID: "acme", UserID: "usr_1", Email: "ana@example.com"}, u)
	_, err = b.store.UserGet(ctx, "beta", "usr_1")
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func TestRefundRecord(t *testing.T) {
	t.Parallel()
	ctx, b, gs := setupDomain(t)
	p := &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2", OperationID: op1, StripeRefundID: "re_1",
		AmountCents: 1200, Currency: "usd", Status: "succeeded"}
	for range 2 { // the same Stripe refund twice is recorded once
		require.NoError(t, inTx(ctx, t, gs, func(tx gate.Tx) error { return b.store.RefundRecord(ctx, tx, p) }))
	}
	o, err := b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_9f2"})
	require.NoError(t, err)
	require.EqualValues(t, 1200, o.RefundedCents)
	require.Equal(t, 1, count(ctx, t, b.db, "refunds"))

	// A rolled-back transaction leaves neither the refund nor the amount.
	tx, err := gs.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2",
		OperationID: op2, StripeRefundID: "re_2", AmountCents: 100, Currency: "usd", Status: "succeeded"}))
	require.NoError(t, tx.Rollback(ctx))
	o, err = b.store.OrderGet(ctx, &store.OrderGetParams{TenantID: "acme", OrderID: "ord_9f2"})
	require.NoError(t, err)
	require.EqualValues(t, 1200, o.RefundedCents)

	// More than the order's amount violates its check; an unknown order its
	// foreign key.
	err = inTx(ctx, t, gs, func(tx gate.Tx) error {
		return b.store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_9f2",
			OperationID: op2, StripeRefundID: "re_3", AmountCents: 4000, Currency: "usd", Status: "succeeded"})
	})
	require.ErrorContains(t, err, "CHECK constraint failed")
	err = inTx(ctx, t, gs, func(tx gate.Tx) error {
		return b.store.RefundRecord(ctx, tx, &store.RefundRecordParams{TenantID: "acme", OrderID: "ord_none",
			OperationID: op3, StripeRefundID: "re_4", AmountCents: 1, Currency: "usd", Status: "succeeded"})
	})
	require.ErrorContains(t, err, "FOREIGN KEY constraint failed")
}

func TestLedgerInsert(t *testing.T) {
	t.Parallel()
	ctx, b, gs := setupDomain(t)
	insert := func(customer, op string, cents int64) (*store.LedgerEntry, error) {
		var e *store.LedgerEntry
		err := inTx(ctx, t, gs, func(tx gate.Tx) error {
			var err error
			e, err = b.store.LedgerInsert(ctx, tx, &store.LedgerInsertParams{TenantID: "acme", CustomerID: customer,
				OperationID: op, AmountCents: cents, Currency: "usd", Memo: "goodwill"})
			return err
		})
		return e, err
	}
	first, err := insert("cus_1", op1, 500)
	require.NoError(t, err)
	require.EqualValues(t, 500, first.BalanceCents)
	second, err := insert("cus_1", op2, 250)
	require.NoError(t, err)
	require.EqualValues(t, 750, second.BalanceCents)
	require.Greater(t, second.ID, first.ID)
	other, err := insert("cus_2", op3, 100)
	require.NoError(t, err)
	require.EqualValues(t, 100, other.BalanceCents, "balances are per customer")

	_, err = insert("cus_1", op1, 500)
	require.ErrorIs(t, err, domain.ErrAlreadyExists, "one entry per operation")
}

func TestSeatReset(t *testing.T) {
	t.Parallel()
	ctx, b, gs := setupDomain(t)
	reset := func(seat, op string) (*store.SeatResetResult, error) {
		var r *store.SeatResetResult
		err := inTx(ctx, t, gs, func(tx gate.Tx) error {
			var err error
			r, err = b.store.SeatReset(ctx, tx, &store.SeatResetParams{TenantID: "acme", SeatID: seat, OperationID: op})
			return err
		})
		return r, err
	}
	r, err := reset("seat_1", op1)
	require.NoError(t, err)
	require.Equal(t, &store.SeatResetResult{PreviousUserID: "usr_1", ResetCount: 1}, r)
	r, err = reset("seat_1", op2)
	require.NoError(t, err)
	require.Equal(t, &store.SeatResetResult{PreviousUserID: "", ResetCount: 2}, r)

	_, err = reset("seat_9", op3)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.Equal(t, 2, count(ctx, t, b.db, "seat_resets"))

	var userID *string
	var lastReset string
	require.NoError(t, b.db.QueryRowContext(ctx, "SELECT user_id, last_reset_at FROM seats WHERE seat_id = 'seat_1'").Scan(&userID, &lastReset))
	require.Nil(t, userID)
	at, err := gatesqlite.ParseTime(lastReset)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)
}

func TestResetTokenInsert(t *testing.T) {
	t.Parallel()
	ctx, b, gs := setupDomain(t)
	p := &store.ResetTokenInsertParams{TenantID: "acme", UserID: "usr_1", OperationID: op1,
		TokenHash: []byte("0123456789abcdef0123456789abcdef"), MessageID: "<idg_" + op1 + "_0@idemgate>",
		ExpiresAt: time.Now().Add(time.Hour)}
	for range 2 { // a resent mail stores its token once
		require.NoError(t, inTx(ctx, t, gs, func(tx gate.Tx) error { return b.store.ResetTokenInsert(ctx, tx, p) }))
	}
	require.Equal(t, 1, count(ctx, t, b.db, "password_reset_tokens"))
	var expires string
	require.NoError(t, b.db.QueryRowContext(ctx, "SELECT expires_at FROM password_reset_tokens").Scan(&expires))
	require.Equal(t, gatesqlite.FormatTime(p.ExpiresAt), expires)
}

// wrongTx is a gate.Tx of another engine.
type wrongTx struct{ gate.Tx }

func (wrongTx) Raw() any { return 42 }

func TestDomainWritesNeedASQLiteTx(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	err := b.store.ResetTokenInsert(ctx, wrongTx{}, &store.ResetTokenInsertParams{})
	require.ErrorContains(t, err, "not *sql.Tx")
}
