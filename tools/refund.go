package tools

import (
	"context"
	"errors"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/domain/refunds"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/tool"
)

// ReconcileAfter is how long after the first call of a generation the
// refund stops trusting Stripe's 24-hour idempotency window and lists the
// charge's refunds first, adopting one whose metadata names the operation.
const ReconcileAfter = 23 * time.Hour

// RefundArgs are refund_order's arguments.
type RefundArgs struct {
	OrderID     string `json:"order_id" jsonschema:"The order to refund." idem:"id"`
	AmountCents int64  `json:"amount_cents" jsonschema:"Amount to refund, in the order currency's minor unit; at most what is still refundable." idem:"cents"`
	Reason      string `json:"reason,omitempty" jsonschema:"Free-text reason, kept for the record; changing it on a retry is not a conflict." idem:"text"`
}

// Refund is refund_order's result.
type Refund struct {
	RefundID    string `json:"refund_id" jsonschema:"Stripe's refund id."`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status" jsonschema:"Stripe's refund status."`
}

// RefundOrder refunds an order through Stripe, with the operation's
// downstream key as Stripe's Idempotency-Key. now is the clock of the
// reconciliation window (nil: time.Now).
func RefundOrder(d *Deps) *tool.Mutation[RefundArgs, Refund] {
	return RefundOrderAt(d, nil)
}

// RefundOrderAt is RefundOrder with a clock for the reconciliation window.
func RefundOrderAt(d *Deps, now func() time.Time) *tool.Mutation[RefundArgs, Refund] {
	if now == nil {
		now = time.Now
	}
	return &tool.Mutation[RefundArgs, Refund]{
		Name:        "refund_order",
		Title:       "Refund an order",
		Description: "Refund part or all of an order's charge through Stripe, exactly once per idempotency_key.",
		Scope:       "billing:refund",
		Provider:    "stripe",
		Policy: tool.Policy{
			TTL:            gate.DefaultMoneyTTL,
			VolatileFields: []string{"reason"},
			AuditFields:    []string{"order_id", "amount_cents"},
		},
		Call: func(ctx context.Context, op *tool.Op[RefundArgs]) (*Refund, error) {
			a := op.Args
			order, err := d.Data.OrderGet(ctx, &store.OrderGetParams{TenantID: op.TenantID, OrderID: a.OrderID})
			if err != nil {
				return nil, notFound(err, "order_id", a.OrderID)
			}
			if remaining := order.AmountCents - order.RefundedCents; a.AmountCents > remaining {
				return nil, tool.NothingHappened(domain.CodeAmountExceedsRefundable, "amount_cents %d exceeds the %d still refundable on order %s", a.AmountCents, remaining, a.OrderID)
			}
			var re *refunds.Refund
			if op.FirstCalledAt != nil && now().Sub(*op.FirstCalledAt) > ReconcileAfter {
				// Stripe may have forgotten our key: look before refunding again.
				re, err = d.Stripe.FindByOperation(ctx, order.ChargeID, op.OperationID)
				if err != nil && !errors.Is(err, domain.ErrNotFound) {
					return nil, stripeError(err)
				}
			}
			if re == nil {
				re, err = d.Stripe.Create(ctx, &refunds.Request{
					ChargeID: order.ChargeID, AmountCents: a.AmountCents, DownstreamKey: op.DownstreamKey,
					OperationID: op.OperationID, TenantID: op.TenantID, OrderID: a.OrderID, Reason: a.Reason,
				})
				if err != nil {
					return nil, stripeError(err)
				}
			}
			currency := re.Currency
			if currency == "" {
				currency = order.Currency
			}
			return &Refund{RefundID: re.ID, OrderID: a.OrderID, AmountCents: re.AmountCents, Currency: currency, Status: re.Status}, nil
		},
		Record: func(ctx context.Context, tx tool.Tx, op *tool.Op[RefundArgs], r *Refund) error {
			return d.Data.RefundRecord(ctx, tx, &store.RefundRecordParams{
				TenantID: op.TenantID, OrderID: r.OrderID, OperationID: op.OperationID, StripeRefundID: r.RefundID,
				AmountCents: r.AmountCents, Currency: r.Currency, Status: r.Status,
			})
		},
	}
}

// stripeError maps a Stripe error: definitive ones fail the operation
// (nothing happened, or a reused key with other parameters), the rest are
// retried with the same key.
func stripeError(err error) error {
	info, permanent := refunds.Classify(err)
	if !permanent {
		return &tool.Error{Outcome: tool.OutcomeTransient, Info: info, Err: err}
	}
	outcome := tool.OutcomeHappened
	if gate.NothingHappened(info.Code) {
		outcome = tool.OutcomeNothingHappened
	}
	return &tool.Error{Outcome: outcome, Info: info, Err: err}
}
