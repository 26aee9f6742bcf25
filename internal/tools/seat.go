package tools

import (
	"context"

	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/tool"
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
func ResetSeat(d *Deps) *tool.Mutation[SeatArgs, Seat] {
	return &tool.Mutation[SeatArgs, Seat]{
		Name:        "reset_seat",
		Title:       "Reset a seat",
		Description: "Free a license seat from its current user, exactly once per idempotency_key.",
		Scope:       "seats:reset",
		Provider:    "ledger",
		Policy: tool.Policy{
			TTL:         gate.DefaultMoneyTTL,
			AuditFields: []string{"seat_id"},
		},
		InTx: func(ctx context.Context, tx tool.Tx, op *tool.Op[SeatArgs]) (*Seat, error) {
			var id string
			if err := tx.QueryRow(ctx, `SELECT seat_id FROM seats WHERE tenant_id = $1 AND seat_id = $2`, op.TenantID, op.Args.SeatID).Scan(&id); err != nil {
				return nil, notFound(err, "seat_id", op.Args.SeatID)
			}
			r, err := d.Data.SeatReset(ctx, storeTx(tx), &store.SeatResetParams{TenantID: op.TenantID, SeatID: op.Args.SeatID, OperationID: op.OperationID})
			if err != nil {
				return nil, err
			}
			if r.PreviousUserID == "" {
				// Said as such: the agent asked to free a seat that was free.
				return &Seat{SeatID: op.Args.SeatID, Status: SeatAlreadyFree}, nil
			}
			return &Seat{SeatID: op.Args.SeatID, Status: SeatReset, Changed: true}, nil
		},
	}
}
