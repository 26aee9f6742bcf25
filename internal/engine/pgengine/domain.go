package pgengine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/store"
)

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

// TenantResetLinkBase implements store.Domain.
func (s *Store) TenantResetLinkBase(ctx context.Context, tenantID string) (string, error) {
	var base string
	err := s.pool.QueryRow(ctx, sqlTenantResetLinkBase, tenantID).Scan(&base)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return base, translate(err)
}

// RefundRecord implements store.Domain.
func (s *Store) RefundRecord(ctx context.Context, tx store.Tx, p *store.RefundRecordParams) error {
	t, err := enginesql.RawTx[pgx.Tx](tx)
	if err != nil {
		return err
	}
	_, err = t.Exec(ctx, sqlRefundRecord, p.TenantID, p.OrderID, p.OperationID, p.StripeRefundID, p.AmountCents, p.Currency, p.Status)
	return translate(err)
}

// LedgerInsert implements store.Domain.
func (s *Store) LedgerInsert(ctx context.Context, tx store.Tx, p *store.LedgerInsertParams) (*store.LedgerEntry, error) {
	t, err := enginesql.RawTx[pgx.Tx](tx)
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
	t, err := enginesql.RawTx[pgx.Tx](tx)
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
	t, err := enginesql.RawTx[pgx.Tx](tx)
	if err != nil {
		return err
	}
	_, err = t.Exec(ctx, sqlResetTokenInsert, p.TenantID, p.UserID, p.OperationID, p.TokenHash, p.MessageID, p.ExpiresAt)
	return translate(err)
}

// ResetTokenRedeem implements store.ResetTokens.
func (s *Store) ResetTokenRedeem(ctx context.Context, tokenHash []byte) (*store.ResetTokenRedemption, error) {
	return enginesql.Redeem(func() (*store.ResetTokenRedemption, error) {
		var r store.ResetTokenRedemption
		err := s.pool.QueryRow(ctx, sqlResetTokenRedeem, tokenHash).Scan(&r.TenantID, &r.UserID, &r.OperationID, &r.UsedAt)
		if err != nil {
			return nil, translate(err)
		}
		r.UsedAt = r.UsedAt.UTC()
		return &r, nil
	}, func() (used, expired bool, err error) {
		err = s.pool.QueryRow(ctx, sqlResetTokenState, tokenHash).Scan(&used, &expired)
		return used, expired, translate(err)
	})
}
