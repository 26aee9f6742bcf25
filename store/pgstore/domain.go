package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

var _ store.Domain = (*Store)(nil)

const sqlCustomerGet = `SELECT tenant_id, customer_id, currency FROM customers WHERE tenant_id = $1 AND customer_id = $2`

const sqlSeatGet = `SELECT seat_id FROM seats WHERE tenant_id = $1 AND seat_id = $2`

const sqlUserGet = `SELECT tenant_id, user_id, email FROM users WHERE tenant_id = $1 AND user_id = $2`

// The refund row and the order's refunded amount move together; a second
// record of the same Stripe refund changes nothing.
const sqlRefundRecord = `
WITH ins AS (
	INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (stripe_refund_id) DO NOTHING
	RETURNING tenant_id, order_id, amount_cents
)
UPDATE orders o SET refunded_cents = o.refunded_cents + ins.amount_cents
FROM ins
WHERE o.tenant_id = ins.tenant_id AND o.order_id = ins.order_id`

const sqlLedgerInsert = `
WITH ins AS (
	INSERT INTO ledger_entries (tenant_id, customer_id, operation_id, amount_cents, currency, memo)
	VALUES ($1, $2, $3, $4, $5, $6)
	RETURNING id
)
SELECT ins.id, $4::bigint + coalesce((SELECT sum(amount_cents) FROM ledger_entries WHERE tenant_id = $1 AND customer_id = $2), 0)
FROM ins`

const sqlSeatReset = `
WITH old AS (
	SELECT tenant_id, seat_id, user_id FROM seats WHERE tenant_id = $1 AND seat_id = $2 FOR UPDATE
), upd AS (
	UPDATE seats s SET user_id = NULL, reset_count = s.reset_count + 1, last_reset_at = now()
	FROM old WHERE s.tenant_id = old.tenant_id AND s.seat_id = old.seat_id
	RETURNING s.reset_count, old.user_id
), ins AS (
	INSERT INTO seat_resets (tenant_id, seat_id, operation_id, previous_user)
	SELECT $1, $2, $3, user_id FROM upd
)
SELECT coalesce(user_id, ''), reset_count FROM upd`

const sqlResetTokenInsert = `
INSERT INTO password_reset_tokens (tenant_id, user_id, operation_id, token_hash, message_id, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (token_hash) DO NOTHING`

func rawTx(tx store.Tx) (pgx.Tx, error) {
	t, ok := tx.Raw().(pgx.Tx)
	if !ok {
		return nil, fmt.Errorf("pgstore: transaction is %T, not pgx.Tx", tx.Raw())
	}
	return t, nil
}

// CustomerGet implements store.Domain.
func (s *Store) CustomerGet(ctx context.Context, tenantID, customerID string) (*store.Customer, error) {
	var c store.Customer
	if err := s.pool.QueryRow(ctx, sqlCustomerGet, tenantID, customerID).Scan(&c.TenantID, &c.CustomerID, &c.Currency); err != nil {
		return nil, translate(err)
	}
	return &c, nil
}

// SeatGet implements store.Domain.
func (s *Store) SeatGet(ctx context.Context, tenantID, seatID string) (string, error) {
	var id string
	if err := s.pool.QueryRow(ctx, sqlSeatGet, tenantID, seatID).Scan(&id); err != nil {
		return "", translate(err)
	}
	return id, nil
}

// UserGet implements store.Domain.
func (s *Store) UserGet(ctx context.Context, tenantID, userID string) (*store.User, error) {
	var u store.User
	if err := s.pool.QueryRow(ctx, sqlUserGet, tenantID, userID).Scan(&u.TenantID, &u.UserID, &u.Email); err != nil {
		return nil, translate(err)
	}
	return &u, nil
}

// RefundRecord implements store.Domain.
func (s *Store) RefundRecord(ctx context.Context, tx store.Tx, p *store.RefundRecordParams) error {
	t, err := rawTx(tx)
	if err != nil {
		return err
	}
	_, err = t.Exec(ctx, sqlRefundRecord, p.TenantID, p.OrderID, p.OperationID, p.StripeRefundID, p.AmountCents, p.Currency, p.Status)
	return translate(err)
}

// LedgerInsert implements store.Domain.
func (s *Store) LedgerInsert(ctx context.Context, tx store.Tx, p *store.LedgerInsertParams) (*store.LedgerEntry, error) {
	t, err := rawTx(tx)
	if err != nil {
		return nil, err
	}
	var e store.LedgerEntry
	if err := t.QueryRow(ctx, sqlLedgerInsert, p.TenantID, p.CustomerID, p.OperationID, p.AmountCents, p.Currency, p.Memo).Scan(&e.ID, &e.BalanceCents); err != nil {
		return nil, translate(err)
	}
	return &e, nil
}

// SeatReset implements store.Domain.
func (s *Store) SeatReset(ctx context.Context, tx store.Tx, p *store.SeatResetParams) (*store.SeatResetResult, error) {
	t, err := rawTx(tx)
	if err != nil {
		return nil, err
	}
	var r store.SeatResetResult
	if err := t.QueryRow(ctx, sqlSeatReset, p.TenantID, p.SeatID, p.OperationID).Scan(&r.PreviousUserID, &r.ResetCount); err != nil {
		return nil, translate(err)
	}
	return &r, nil
}

// ResetTokenInsert implements store.Domain.
func (s *Store) ResetTokenInsert(ctx context.Context, tx store.Tx, p *store.ResetTokenInsertParams) error {
	t, err := rawTx(tx)
	if err != nil {
		return err
	}
	_, err = t.Exec(ctx, sqlResetTokenInsert, p.TenantID, p.UserID, p.OperationID, p.TokenHash, p.MessageID, p.ExpiresAt)
	return translate(err)
}
