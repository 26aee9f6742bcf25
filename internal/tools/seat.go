package tools

import (
	"context"

	"github.com/idemgate/idemgate/gate"
)

// SeatArgs are reset_seat's arguments.
type SeatArgs struct {
	SeatID string `json:"seat_id" jsonschema:"The seat to reset." idem:"id"`
}

// Seat is reset_seat's result.
type Seat struct {
	SeatID string `json:"seat_id"`
	// Status is SeatReset, or SeatAlreadyFree when the seat had no user.
	Status string `json:"status" jsonschema:"reset when a user was removed from the seat; already_free when it had none and nothing changed."`
	// Changed is false when the seat was already free.
	Changed bool `json:"changed" jsonschema:"Whether a user was removed from the seat."`
}

// The statuses of a reset_seat result.
const (
	SeatReset       = "reset"
	SeatAlreadyFree = "already_free"
)

// ResetSeat frees a license seat, in the transaction that completes the
// operation.
func ResetSeat(*Deps) *gate.Mutation[SeatArgs, Seat] {
	return &gate.Mutation[SeatArgs, Seat]{
		Name:        "reset_seat",
		Title:       "Reset a seat",
		Description: "Free a license seat from its current user, exactly once per idempotency_key.",
		Scope:       "seats:reset",
		Provider:    "ledger",
		Policy: gate.Policy{
			TTL:         MoneyTTL,
			AuditFields: []string{"seat_id"},
		},
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[SeatArgs]) (*Seat, error) {
			var id string
			if err := tx.QueryRow(ctx, `SELECT seat_id FROM seats WHERE tenant_id = $1 AND seat_id = $2`, op.TenantID, op.Args.SeatID).Scan(&id); err != nil {
				return nil, notFound(err, "seat_id", op.Args.SeatID)
			}
			previous, err := seatReset(ctx, tx, op.TenantID, op.Args.SeatID, op.OperationID)
			if err != nil {
				return nil, err
			}
			if previous == "" {
				// Said as such: the agent asked to free a seat that was free.
				return &Seat{SeatID: op.Args.SeatID, Status: SeatAlreadyFree}, nil
			}
			return &Seat{SeatID: op.Args.SeatID, Status: SeatReset, Changed: true}, nil
		},
	}
}

// seatReset frees a seat, counts the reset and records it with the seat's
// user before it ("" when it had none).
func seatReset(ctx context.Context, tx gate.Tx, tenantID, seatID, operationID string) (previous string, err error) {
	if tx.Engine() == gate.Postgres {
		// One statement; the seat's row is locked before its user is read.
		err = tx.QueryRow(ctx, `
WITH old AS (
	SELECT tenant_id, seat_id, user_id FROM seats WHERE tenant_id = $1 AND seat_id = $2 FOR UPDATE
), upd AS (
	UPDATE seats s SET user_id = NULL, reset_count = s.reset_count + 1, last_reset_at = now()
	FROM old WHERE s.tenant_id = old.tenant_id AND s.seat_id = old.seat_id
	RETURNING old.user_id
), ins AS (
	INSERT INTO seat_resets (tenant_id, seat_id, operation_id, previous_user)
	SELECT $1, $2, $3, user_id FROM upd
)
SELECT coalesce(user_id, '') FROM upd`, tenantID, seatID, operationID).Scan(&previous)
		return previous, err
	}
	// SQLite has no data-modifying CTEs: two statements, in a transaction
	// that holds the write lock from its BEGIN IMMEDIATE.
	err = tx.QueryRow(ctx, `
INSERT INTO seat_resets (tenant_id, seat_id, operation_id, previous_user)
SELECT tenant_id, seat_id, $3, user_id FROM seats WHERE tenant_id = $1 AND seat_id = $2
RETURNING coalesce(previous_user, '')`, tenantID, seatID, operationID).Scan(&previous)
	if err != nil {
		return "", err
	}
	_, err = tx.Exec(ctx, `
UPDATE seats SET user_id = NULL, reset_count = reset_count + 1, last_reset_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE tenant_id = $1 AND seat_id = $2`, tenantID, seatID)
	return previous, err
}
