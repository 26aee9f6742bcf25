package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/domain/refunds"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// ReconcileAfter is how long after the first call of a generation the
// refund effect stops trusting Stripe's 24-hour idempotency window and lists
// the charge's refunds first, adopting one whose metadata names the
// operation.
const ReconcileAfter = 23 * time.Hour

// decodeArgs decodes a claim's stored (canonical) arguments into v.
func decodeArgs(c *gate.Claim, v any) error {
	if err := json.Unmarshal(c.Args, v); err != nil {
		return Fail(domain.CodeInvalidArgument, true, "stored arguments do not decode: %v", err)
	}
	return nil
}

// notFound turns a missing domain row into a definitive failure and any
// other lookup error into a transient one.
func notFound(err error, field, id string) error {
	if errors.Is(err, domain.ErrNotFound) {
		return Fail(domain.CodeNotFound, true, "%s %q does not exist for this tenant", field, id)
	}
	return &Transient{Info: domain.ErrorInfo{Code: domain.CodeUnavailable, Message: err.Error()}, Err: err}
}

// RefundEffect refunds an order through Stripe.
type RefundEffect struct {
	Data   store.Domain
	Stripe *refunds.Client
	// Now is the clock for the reconciliation window; default time.Now.
	Now func() time.Time
}

type refundArgs struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Reason      string `json:"reason"`
}

type refundResult struct {
	RefundID    string `json:"refund_id"`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
}

// Call implements Effect.
func (e *RefundEffect) Call(ctx context.Context, c *gate.Claim) (json.RawMessage, error) {
	var a refundArgs
	if err := decodeArgs(c, &a); err != nil {
		return nil, err
	}
	order, err := e.Data.OrderGet(ctx, &store.OrderGetParams{TenantID: c.TenantID, OrderID: a.OrderID})
	if err != nil {
		return nil, notFound(err, "order_id", a.OrderID)
	}
	if remaining := order.AmountCents - order.RefundedCents; a.AmountCents > remaining {
		return nil, Fail(domain.CodeAmountExceedsRefundable, true, "amount_cents %d exceeds the %d still refundable on order %s", a.AmountCents, remaining, a.OrderID)
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	var re *refunds.Refund
	if c.FirstCalledAt != nil && now().Sub(*c.FirstCalledAt) > ReconcileAfter {
		// Stripe may have forgotten our key: look before refunding again.
		re, err = e.Stripe.FindByOperation(ctx, order.ChargeID, c.OperationID)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return nil, stripeError(err)
		}
	}
	if re == nil {
		re, err = e.Stripe.Create(ctx, &refunds.Request{
			ChargeID:      order.ChargeID,
			AmountCents:   a.AmountCents,
			DownstreamKey: c.DownstreamKey,
			OperationID:   c.OperationID,
			TenantID:      c.TenantID,
			OrderID:       a.OrderID,
			Reason:        a.Reason,
		})
		if err != nil {
			return nil, stripeError(err)
		}
	}
	currency := re.Currency
	if currency == "" {
		currency = order.Currency
	}
	return json.Marshal(refundResult{RefundID: re.ID, OrderID: a.OrderID, AmountCents: re.AmountCents, Currency: currency, Status: re.Status})
}

func stripeError(err error) error {
	info, permanent := refunds.Classify(err)
	if permanent {
		return &Failure{Info: info, NothingHappened: gate.NothingHappened(info.Code)}
	}
	return &Transient{Info: info, Err: err}
}

// Record implements Effect.
func (e *RefundEffect) Record(ctx context.Context, tx gate.Tx, c *gate.Claim, result json.RawMessage) error {
	var r refundResult
	if err := json.Unmarshal(result, &r); err != nil {
		return err
	}
	return e.Data.RefundRecord(ctx, tx, &store.RefundRecordParams{
		TenantID: c.TenantID, OrderID: r.OrderID, OperationID: c.OperationID, StripeRefundID: r.RefundID,
		AmountCents: r.AmountCents, Currency: r.Currency, Status: r.Status,
	})
}

// CreditEffect applies a credit to a customer's ledger. There is no
// downstream: the ledger row is written in the completing transaction.
type CreditEffect struct {
	Data store.Domain
}

type creditArgs struct {
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Memo        string `json:"memo"`
}

// Call implements Effect: it checks the customer and the currency.
func (e *CreditEffect) Call(ctx context.Context, c *gate.Claim) (json.RawMessage, error) {
	var a creditArgs
	if err := decodeArgs(c, &a); err != nil {
		return nil, err
	}
	cust, err := e.Data.CustomerGet(ctx, c.TenantID, a.CustomerID)
	if err != nil {
		return nil, notFound(err, "customer_id", a.CustomerID)
	}
	if cust.Currency != a.Currency {
		return nil, Fail(domain.CodeInvalidArgument, true, "currency %q is not customer %s's currency %q", a.Currency, a.CustomerID, cust.Currency)
	}
	return json.Marshal(map[string]any{
		"ledger_entry_id": c.OperationID, "customer_id": a.CustomerID, "amount_cents": a.AmountCents, "currency": a.Currency,
	})
}

// Record implements Effect.
func (e *CreditEffect) Record(ctx context.Context, tx gate.Tx, c *gate.Claim, _ json.RawMessage) error {
	var a creditArgs
	if err := decodeArgs(c, &a); err != nil {
		return err
	}
	_, err := e.Data.LedgerInsert(ctx, tx, &store.LedgerInsertParams{
		TenantID: c.TenantID, CustomerID: a.CustomerID, OperationID: c.OperationID,
		AmountCents: a.AmountCents, Currency: a.Currency, Memo: a.Memo,
	})
	return err
}

// SeatEffect frees a seat. The change is written in the completing
// transaction.
type SeatEffect struct {
	Data store.Domain
}

// Call implements Effect: it checks that the seat exists.
func (e *SeatEffect) Call(ctx context.Context, c *gate.Claim) (json.RawMessage, error) {
	var a struct {
		SeatID string `json:"seat_id"`
	}
	if err := decodeArgs(c, &a); err != nil {
		return nil, err
	}
	if _, err := e.Data.SeatGet(ctx, c.TenantID, a.SeatID); err != nil {
		return nil, notFound(err, "seat_id", a.SeatID)
	}
	return json.Marshal(map[string]any{"seat_id": a.SeatID, "status": "reset"})
}

// Record implements Effect.
func (e *SeatEffect) Record(ctx context.Context, tx gate.Tx, c *gate.Claim, _ json.RawMessage) error {
	var a struct {
		SeatID string `json:"seat_id"`
	}
	if err := decodeArgs(c, &a); err != nil {
		return err
	}
	_, err := e.Data.SeatReset(ctx, tx, &store.SeatResetParams{TenantID: c.TenantID, SeatID: a.SeatID, OperationID: c.OperationID})
	return err
}
