package tools

import (
	"context"
	"errors"
	"time"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/tool"
)

// OrderArgs are get_order's arguments.
type OrderArgs struct {
	OrderID string `json:"order_id" jsonschema:"The order." idem:"id"`
	// IdempotencyKey is accepted and ignored: reads are naturally
	// idempotent, and agents often send one with every call.
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"Accepted and ignored: reads are naturally idempotent." idem:"text"`
}

// Order is get_order's result.
type Order struct {
	OrderID         string    `json:"order_id"`
	AmountCents     int64     `json:"amount_cents"`
	RefundedCents   int64     `json:"refunded_cents"`
	RefundableCents int64     `json:"refundable_cents"`
	Currency        string    `json:"currency"`
	CreatedAt       time.Time `json:"created_at"`
}

// GetOrder reads an order with its charged and refunded amounts.
func GetOrder(d *Deps) *tool.Read[OrderArgs, Order] {
	return &tool.Read[OrderArgs, Order]{
		Name:        "get_order",
		Title:       "Get an order",
		Description: "An order with its charged and refunded amounts.",
		Scope:       tool.ScopeOperationsRead,
		Handle: func(ctx context.Context, caller tool.Caller, a *OrderArgs) (*Order, error) {
			o, err := d.Orders.OrderGet(ctx, &store.OrderGetParams{TenantID: caller.TenantID, OrderID: a.OrderID})
			if errors.Is(err, domain.ErrNotFound) {
				return nil, tool.NotFound("order_id", "no order %q", a.OrderID)
			}
			if err != nil {
				return nil, err
			}
			return &Order{OrderID: o.OrderID, AmountCents: o.AmountCents, RefundedCents: o.RefundedCents,
				RefundableCents: o.AmountCents - o.RefundedCents, Currency: o.Currency, CreatedAt: o.CreatedAt}, nil
		},
	}
}
