package stripetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// PendNext makes the next n refunds created (by API creates or
// DashboardRefund) start "pending" instead of "succeeded"; SucceedRefund or
// FailRefund settles them.
func (s *Server) PendNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendNext += n
}

// DashboardRefund creates a refund of amount cents (0: what remains) on
// charge chargeID as a person would in Stripe's dashboard: no
// Idempotency-Key, no metadata, no API request to this server (it is not
// counted in Requests, RefundCreates or MissingKey, but is in Refunds,
// RefundsByCharge and RefundedAmount). Its events carry a request id and a
// null idempotency key. It fails as an API create would (unknown charge,
// amount too large, a charge error) and then creates nothing.
func (s *Server) DashboardRefund(ctx context.Context, chargeID string, amount int64) (Refund, error) {
	if amount < 0 {
		return Refund{}, errors.New("stripetest: DashboardRefund: amount must not be negative")
	}
	p := &createParams{charge: chargeID, amount: amount, hasAmount: amount > 0, metadata: map[string]string{}}
	reqID := newID("req_")
	s.mu.Lock()
	status, body, ref := s.executeLocked(p, "")
	if ref == nil {
		s.mu.Unlock()
		var e struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		return Refund{}, fmt.Errorf("stripetest: DashboardRefund on %s: %d %s: %s", chargeID, status, e.Error.Type, e.Error.Message)
	}
	events := s.emitRefundCreatedLocked(ref, reqID, "")
	out := ref.snapshot()
	s.mu.Unlock()
	s.waitDeliveries(ctx, events)
	return out, nil
}

// FailRefund makes refund id fail later, as a card network can after the
// refund was accepted: its status becomes "failed" with reason (one of
// stripe-go's RefundFailureReason values: expired_or_canceled_card,
// lost_or_stolen_card, unknown; "" means unknown) and its amount is no
// longer refunded on the charge. Events (no request): charge.refund.updated,
// then with RefundEvents refund.updated and refund.failed. A refund already
// failed is an error.
func (s *Server) FailRefund(ctx context.Context, id string, reason stripe.RefundFailureReason) error {
	switch reason {
	case "":
		reason = stripe.RefundFailureReasonUnknown
	case stripe.RefundFailureReasonExpiredOrCanceledCard, stripe.RefundFailureReasonLostOrStolenCard, stripe.RefundFailureReasonUnknown:
	default:
		return fmt.Errorf("stripetest: FailRefund: unknown failure reason %q", reason)
	}
	s.mu.Lock()
	ref := s.refundByID[id]
	if ref == nil || ref.Status == stripe.RefundStatusFailed {
		s.mu.Unlock()
		if ref == nil {
			return fmt.Errorf("stripetest: FailRefund: no such refund: %q", id)
		}
		return fmt.Errorf("stripetest: FailRefund: refund %s has already failed", id)
	}
	prev := ref.Status
	ref.Status, ref.FailureReason, ref.failureTxn = stripe.RefundStatusFailed, reason, newID("txn_")
	if c := s.charges[ref.Charge]; c != nil {
		c.refunded -= ref.Amount
	}
	events := s.emitRefundUpdatedLocked(ref, prev)
	if s.wh.cfg.RefundEvents {
		events = append(events, s.emitLocked(EventTypeRefundFailed, ref.ID, ref.object(), nil, "", "")...)
	}
	s.mu.Unlock()
	s.waitDeliveries(ctx, events)
	return nil
}

// SucceedRefund settles a pending refund (PendNext) as succeeded. Events
// (no request): charge.refund.updated, then with RefundEvents
// refund.updated. A refund not pending is an error.
func (s *Server) SucceedRefund(ctx context.Context, id string) error {
	s.mu.Lock()
	ref := s.refundByID[id]
	if ref == nil || ref.Status != stripe.RefundStatusPending {
		s.mu.Unlock()
		if ref == nil {
			return fmt.Errorf("stripetest: SucceedRefund: no such refund: %q", id)
		}
		return fmt.Errorf("stripetest: SucceedRefund: refund %s is %s, not pending", id, ref.Status)
	}
	ref.Status = stripe.RefundStatusSucceeded
	events := s.emitRefundUpdatedLocked(ref, stripe.RefundStatusPending)
	s.mu.Unlock()
	s.waitDeliveries(ctx, events)
	return nil
}

// emitRefundCreatedLocked emits the events of a new refund: charge.refunded
// (the charge after the refund), then with RefundEvents refund.created.
func (s *Server) emitRefundCreatedLocked(ref *refund, reqID, key string) []*delivery {
	var events []*delivery
	if c := s.charges[ref.Charge]; c != nil {
		obj := c.object()
		prev := map[string]any{"amount_refunded": c.refunded - ref.Amount}
		if wasRefunded := c.refunded-ref.Amount >= c.amount; wasRefunded != obj.Refunded {
			prev["refunded"] = wasRefunded
		}
		events = append(events, s.emitLocked(EventTypeChargeRefunded, c.id, obj, prev, reqID, key)...)
	}
	if s.wh.cfg.RefundEvents {
		events = append(events, s.emitLocked(EventTypeRefundCreated, ref.ID, ref.object(), nil, reqID, key)...)
	}
	return events
}

// emitRefundUpdatedLocked emits a refund's status change from prev.
func (s *Server) emitRefundUpdatedLocked(ref *refund, prev stripe.RefundStatus) []*delivery {
	obj := ref.object()
	prevAttrs := map[string]any{"status": string(prev)}
	if ref.Status == stripe.RefundStatusFailed {
		prevAttrs["failure_reason"] = nil
		prevAttrs["failure_balance_transaction"] = nil
	}
	events := s.emitLocked(EventTypeChargeRefundUpdated, ref.ID, obj, prevAttrs, "", "")
	if s.wh.cfg.RefundEvents {
		events = append(events, s.emitLocked(EventTypeRefundUpdated, ref.ID, obj, prevAttrs, "", "")...)
	}
	return events
}

func (r *refund) snapshot() Refund {
	return Refund{
		ID: r.ID, Charge: r.Charge, Amount: r.Amount, Currency: r.Currency, Reason: r.Reason,
		Metadata: cloneMap(r.Metadata), IdempotencyKey: r.IdempotencyKey,
		Created: time.Unix(r.Created, 0), Status: string(r.Status), FailureReason: string(r.FailureReason),
	}
}

// chargeObject is a succeeded card charge as the API renders it at the
// pinned version (its refunds list is not included unless expanded).
type chargeObject struct {
	ID                   string            `json:"id"`
	Object               string            `json:"object"`
	Amount               int64             `json:"amount"`
	AmountCaptured       int64             `json:"amount_captured"`
	AmountRefunded       int64             `json:"amount_refunded"`
	BalanceTransaction   string            `json:"balance_transaction"`
	Captured             bool              `json:"captured"`
	Created              int64             `json:"created"`
	Currency             string            `json:"currency"`
	Disputed             bool              `json:"disputed"`
	Livemode             bool              `json:"livemode"`
	Metadata             map[string]string `json:"metadata"`
	Paid                 bool              `json:"paid"`
	PaymentIntent        *string           `json:"payment_intent"`
	PaymentMethod        string            `json:"payment_method"`
	PaymentMethodDetails any               `json:"payment_method_details"`
	Refunded             bool              `json:"refunded"`
	Status               string            `json:"status"`
}

func (c *charge) object() chargeObject {
	return chargeObject{
		ID:                 c.id,
		Object:             "charge",
		Amount:             c.amount,
		AmountCaptured:     c.amount,
		AmountRefunded:     c.refunded,
		BalanceTransaction: c.txn,
		Captured:           true,
		Created:            c.created,
		Currency:           c.currency,
		Metadata:           map[string]string{},
		Paid:               true,
		PaymentMethod:      c.pm,
		PaymentMethodDetails: map[string]any{
			"type": "card",
			"card": map[string]any{"last4": "4242", "brand": "visa", "fingerprint": "fp_secret"},
		},
		// Stripe: true only once the charge is fully refunded.
		Refunded: c.amount > 0 && c.refunded >= c.amount,
		Status:   "succeeded",
	}
}
