package store

import (
	"context"
	"time"
)

// Customer is a customer that credits apply to.
type Customer struct {
	TenantID, CustomerID, Currency string
}

// User is a user that password-reset mail goes to.
type User struct {
	TenantID, UserID, Email string
}

// RefundRecordParams are the parameters of Domain.RefundRecord.
type RefundRecordParams struct {
	TenantID, OrderID, OperationID, StripeRefundID string
	AmountCents                                    int64
	Currency, Status                               string
}

// LedgerInsertParams are the parameters of Domain.LedgerInsert.
type LedgerInsertParams struct {
	TenantID, CustomerID, OperationID string
	AmountCents                       int64
	Currency, Memo                    string
}

// LedgerEntry is a ledger row with the customer's balance after it.
type LedgerEntry struct {
	ID           int64
	BalanceCents int64
}

// SeatResetParams are the parameters of Domain.SeatReset.
type SeatResetParams struct {
	TenantID, SeatID, OperationID string
}

// SeatResetResult is a seat after its reset.
type SeatResetResult struct {
	PreviousUserID string
	ResetCount     int
}

// ResetTokenInsertParams are the parameters of Domain.ResetTokenInsert.
type ResetTokenInsertParams struct {
	TenantID, UserID, OperationID string
	TokenHash                     []byte
	MessageID                     string
	ExpiresAt                     time.Time
}

// ResetTokenRedemption is a password-reset token that
// ResetTokens.ResetTokenRedeem consumed: whose reset it is.
type ResetTokenRedemption struct {
	TenantID, UserID, OperationID string
	// UsedAt is when it was consumed, by the database's clock.
	UsedAt time.Time
}

// ResetTokens consumes password-reset tokens (POST
// /v1/password-resets/redeem).
type ResetTokens interface {
	// ResetTokenRedeem consumes the token whose hash is tokenHash, at most
	// once: one conditional update sets used_at if it is unset and the
	// token unexpired. Otherwise the error is domain.ErrAlreadyUsed (used
	// before, expired or not), domain.ErrExpired, or domain.ErrNotFound
	// (no such token).
	ResetTokenRedeem(ctx context.Context, tokenHash []byte) (*ResetTokenRedemption, error)
}

// Tx is a transaction the domain writes join: a gate.Tx or a tool.Tx,
// whose Raw is the engine's transaction (pgx.Tx, *sql.Tx).
type Tx interface {
	Raw() any
}

// Domain is what the workers read and write besides the gate. Writes take
// the completing transaction (gate.Tx), so that the domain rows, the claim's
// outcome and the job's completion commit together.
type Domain interface {
	Orders
	// CustomerGet returns a tenant's customer or domain.ErrNotFound.
	CustomerGet(ctx context.Context, tenantID, customerID string) (*Customer, error)
	// SeatGet returns a tenant's seat id if it exists, or domain.ErrNotFound.
	SeatGet(ctx context.Context, tenantID, seatID string) (string, error)
	// UserGet returns a tenant's user or domain.ErrNotFound.
	UserGet(ctx context.Context, tenantID, userID string) (*User, error)
	// TenantResetLinkBase returns the tenant's own password-reset link
	// base (tenant_settings), or "" when it has none.
	TenantResetLinkBase(ctx context.Context, tenantID string) (string, error)
	// RefundRecord stores a Stripe refund and adds it to the order's
	// refunded amount; recording the same Stripe refund twice is a no-op.
	RefundRecord(ctx context.Context, tx Tx, p *RefundRecordParams) error
	// LedgerInsert appends a ledger entry.
	LedgerInsert(ctx context.Context, tx Tx, p *LedgerInsertParams) (*LedgerEntry, error)
	// SeatReset frees a seat and records the change.
	SeatReset(ctx context.Context, tx Tx, p *SeatResetParams) (*SeatResetResult, error)
	// ResetTokenInsert stores a password-reset token's hash; the same token
	// twice (a resent mail) is a no-op.
	ResetTokenInsert(ctx context.Context, tx Tx, p *ResetTokenInsertParams) error
}
