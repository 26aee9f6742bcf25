package tools

import (
	"context"
	"errors"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/vocab"
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
func GetOrder(d *Deps) *gate.Read[OrderArgs, Order] {
	return &gate.Read[OrderArgs, Order]{
		Name:        "get_order",
		Title:       "Get an order",
		Description: "An order with its charged and refunded amounts.",
		Scope:       domain.ScopeOperationsRead,
		Handle: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *OrderArgs) (*Order, error) {
			o, err := orderRead(ctx, tx, caller.TenantID, a.OrderID)
			if errors.Is(err, vocab.ErrNotFound) {
				return nil, gate.NotFound("order_id", "no order %q", a.OrderID)
			}
			if err != nil {
				return nil, err
			}
			return &Order{OrderID: o.OrderID, AmountCents: o.AmountCents, RefundedCents: o.RefundedCents,
				RefundableCents: o.AmountCents - o.RefundedCents, Currency: o.Currency, CreatedAt: o.CreatedAt}, nil
		},
	}
}

// order is a row of orders: a paid order that refund_order refunds.
type order struct {
	OrderID, ChargeID          string
	AmountCents, RefundedCents int64
	// Currency is a lowercase ISO 4217 code, as Stripe writes it.
	Currency  string
	CreatedAt time.Time
}

// orderGet reads a tenant's order, or vocab.ErrNotFound (also for another
// tenant's order).
func orderGet(ctx context.Context, db DB, tenantID, orderID string) (o *order, err error) {
	err = db(ctx, func(tx gate.Tx) error {
		o, err = orderRead(ctx, tx, tenantID, orderID)
		return err
	})
	return o, err
}

// orderRead is orderGet inside tx.
func orderRead(ctx context.Context, tx gate.Tx, tenantID, orderID string) (*order, error) {
	o := &order{OrderID: orderID}
	err := tx.QueryRow(ctx, `SELECT charge_id, amount_cents, refunded_cents, currency, created_at
		FROM orders WHERE tenant_id = $1 AND order_id = $2`, tenantID, orderID).
		Scan(&o.ChargeID, &o.AmountCents, &o.RefundedCents, &o.Currency, dbTime{&o.CreatedAt})
	if err != nil {
		return nil, err
	}
	return o, nil
}
