package tools

import (
	"context"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/tool"
)

// SeatArgs are reset_seat's arguments.
type SeatArgs struct {
	SeatID string `json:"seat_id" jsonschema:"The seat to reset." idem:"id"`
}

// Seat is reset_seat's result.
type Seat struct {
	SeatID string `json:"seat_id"`
	Status string `json:"status" jsonschema:"reset"`
}

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
			if _, err := d.Data.SeatReset(ctx, tx, &store.SeatResetParams{TenantID: op.TenantID, SeatID: op.Args.SeatID, OperationID: op.OperationID}); err != nil {
				return nil, err
			}
			return &Seat{SeatID: op.Args.SeatID, Status: "reset"}, nil
		},
	}
}
