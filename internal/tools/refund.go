package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// ReconcileAfter is how long after the first call of a generation the
// refund stops trusting Stripe's 24-hour idempotency window and lists the
// charge's refunds first, adopting one whose metadata names the operation.
const ReconcileAfter = 23 * time.Hour

// IntentWindow bounds how long before a generation's first call the
// reconciliation adopts a refund of the same downstream key made by another
// operation (whose claim a lost commit forgot). A key and arguments may run
// again as a new intent only after refund_order's TTL and retention, so a
// refund older than that belongs to an earlier intent with the same key,
// which the reconciliation must not adopt.
const IntentWindow = MoneyTTL + core.DefaultRetention

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
func RefundOrder(d *Deps) *gate.Mutation[RefundArgs, Refund] {
	return RefundOrderAt(d, nil)
}

// RefundOrderAt is RefundOrder with a clock for the reconciliation window.
func RefundOrderAt(d *Deps, now func() time.Time) *gate.Mutation[RefundArgs, Refund] {
	if now == nil {
		now = time.Now
	}
	return &gate.Mutation[RefundArgs, Refund]{
		Name:        "refund_order",
		Title:       "Refund an order",
		Description: "Refund part or all of an order's charge through Stripe, exactly once per idempotency_key.",
		Scope:       "billing:refund",
		Provider:    "stripe",
		Policy: gate.Policy{
			TTL:             MoneyTTL,
			VolatileFields:  []string{"reason"},
			DuplicateWindow: d.duplicateWindow(),
			AuditFields:     []string{"order_id", "amount_cents"},
		},
		// Above the tenant's threshold (tenants[].approval_thresholds), a
		// person approves first.
		Approval: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *RefundArgs) (bool, error) {
			return overThreshold(ctx, tx, caller.TenantID, "refund_order", a.AmountCents)
		},
		// Before a call waits, the approver's summary as of the request;
		// a refund that could never succeed fails at once, with the
		// effect's own check.
		Review: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *RefundArgs) (string, error) {
			order, err := orderRead(ctx, tx, caller.TenantID, a.OrderID)
			if err != nil {
				return "", notFound(err, "order_id", a.OrderID)
			}
			if err := refundable(order, a); err != nil {
				return "", err
			}
			return fmt.Sprintf("Refund %s of order %s (total %s, %s already refunded)", money(a.AmountCents, order.Currency),
				a.OrderID, money(order.AmountCents, order.Currency), amount(order.RefundedCents, order.Currency)), nil
		},
		Call: func(ctx context.Context, op *gate.Op[RefundArgs]) (*Refund, error) {
			a := op.Args
			order, err := orderGet(ctx, d.DB, op.TenantID, a.OrderID)
			if err != nil {
				return nil, notFound(err, "order_id", a.OrderID)
			}
			if err := refundable(order, &a); err != nil {
				return nil, err
			}
			var re *refunds.Refund
			if op.FirstCalledAt != nil && now().Sub(*op.FirstCalledAt) > ReconcileAfter {
				// Stripe may have forgotten our key: look before refunding
				// again, for this operation's refund or one of the same
				// intent whose operation a lost commit forgot.
				re, err = d.Stripe.Find(ctx, &refunds.FindParams{ChargeID: order.ChargeID, OperationID: op.OperationID,
					DownstreamKey: op.DownstreamKey, CreatedAfter: op.FirstCalledAt.Add(-IntentWindow)})
				if err != nil && !errors.Is(err, vocab.ErrNotFound) {
					return nil, stripeError(err)
				}
			}
			how := howReconciled
			if re == nil {
				how = howReplayed
				re, err = d.Stripe.Create(ctx, &refunds.Request{
					ChargeID: order.ChargeID, AmountCents: a.AmountCents, DownstreamKey: op.DownstreamKey,
					OperationID: op.OperationID, TenantID: op.TenantID, OrderID: a.OrderID, Reason: a.Reason,
				})
				if err != nil {
					if re, err = sameIntent(ctx, d, op, order.ChargeID, now, err); err != nil {
						var te *toolspec.Error
						if errors.As(err, &te) {
							return nil, err
						}
						return nil, stripeError(err)
					}
					how = howMismatch
				}
			}
			if err := adopted(ctx, d, op, re, how); err != nil {
				return nil, err
			}
			currency := re.Currency
			if currency == "" {
				currency = order.Currency
			}
			return &Refund{RefundID: re.ID, OrderID: a.OrderID, AmountCents: re.AmountCents, Currency: currency, Status: re.Status}, nil
		},
		Record: func(ctx context.Context, tx gate.Tx, op *gate.Op[RefundArgs], r *Refund) error {
			return RecordRefund(ctx, tx, op.TenantID, op.OperationID, r)
		},
	}
}

// refundable refuses a refund of more than the order still has (its total
// minus what is already refunded): the check the effect makes before
// calling Stripe, and the Review's before a call waits for approval.
func refundable(o *order, a *RefundArgs) error {
	if remaining := o.AmountCents - o.RefundedCents; a.AmountCents > remaining {
		return gate.NothingHappened(vocab.CodeAmountExceedsRefundable, "amount_cents %d exceeds the %d still refundable on order %s",
			a.AmountCents, remaining, a.OrderID)
	}
	return nil
}

// RecordRefund stores a Stripe refund of operation operationID and adds it
// to the order's refunded amount, together; recording the same Stripe
// refund twice is a no-op. refund_order's Record, and the provider's
// settlement of an operation whose outcome was unknown.
func RecordRefund(ctx context.Context, tx gate.Tx, tenantID, operationID string, r *Refund) error {
	args := []any{tenantID, r.OrderID, operationID, r.RefundID, r.AmountCents, r.Currency, r.Status}
	if tx.Engine() == gate.Postgres {
		_, err := tx.Exec(ctx, `
WITH ins AS (
	INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (stripe_refund_id) DO NOTHING
	RETURNING tenant_id, order_id, amount_cents
)
UPDATE orders o SET refunded_cents = o.refunded_cents + ins.amount_cents
FROM ins
WHERE o.tenant_id = ins.tenant_id AND o.order_id = ins.order_id`, args...)
		return err
	}
	// SQLite has no data-modifying CTEs: the order moves only when the
	// refund row was inserted.
	n, err := tx.Exec(ctx, `
INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (stripe_refund_id) DO NOTHING`, args...)
	if err != nil || n == 0 {
		return err // recorded before: nothing to add
	}
	_, err = tx.Exec(ctx, `UPDATE orders SET refunded_cents = refunded_cents + $3 WHERE tenant_id = $1 AND order_id = $2`,
		tenantID, r.OrderID, r.AmountCents)
	return err
}

// How a refund of another operation was found, for adopted's audit row
// (%s: the downstream key).
const (
	howReplayed   = "Stripe answered the downstream key %s with it"
	howMismatch   = "Stripe refused the downstream key %s as used with other parameters (the other operation's metadata), and the charge's refunds name it"
	howReconciled = "the reconciliation found it by the downstream key %s in its metadata"
)

// sameIntent answers a Create that Stripe refused because the downstream
// key was first used with other parameters: when the intent was claimed
// again after a lost commit, its request names a new operation id in its
// metadata, so Stripe refuses the key rather than replay it. The charge's
// refunds then hold the one the key made, named by the downstream key in
// its metadata: that refund; or, when there is none, a definitive
// "nothing happened" with createErr's code; or createErr itself when it is
// another error.
func sameIntent(ctx context.Context, d *Deps, op *gate.Op[RefundArgs], chargeID string, now func() time.Time, createErr error) (*refunds.Refund, error) {
	if info, _ := refunds.Classify(createErr); info.Code != vocab.CodeDownstreamIdempotencyMismatch {
		return nil, createErr
	}
	first := now()
	if op.FirstCalledAt != nil {
		first = *op.FirstCalledAt
	}
	re, err := d.Stripe.Find(ctx, &refunds.FindParams{ChargeID: chargeID, OperationID: op.OperationID,
		DownstreamKey: op.DownstreamKey, CreatedAfter: first.Add(-IntentWindow)})
	if errors.Is(err, vocab.ErrNotFound) {
		// Stripe knows the key, and no refund of the charge was made with
		// it: the first request failed (its error is Stripe's to replay, to
		// a request with its parameters). Nothing happened under this key,
		// so a re-drive moves to the next generation.
		info, _ := refunds.Classify(createErr)
		return nil, &toolspec.Error{Outcome: toolspec.OutcomeNothingHappened, Info: info, Err: createErr}
	}
	return re, err
}

// adopted writes the audit row of a refund that another operation of the
// same intent made: Stripe answered the downstream key with it (its
// Idempotency-Key cache), or the reconciliation found it by the downstream
// key in its metadata. That operation is not in this database: its claim's
// commits were lost (a failover to an asynchronous standby, a restore),
// the agent's retry claimed the intent again, and the intent-derived key
// kept the refund from being made twice. The row is written before the
// completion; should writing it fail, the attempt is retried (the same key
// finds the same refund).
func adopted(ctx context.Context, d *Deps, op *gate.Op[RefundArgs], re *refunds.Refund, how string) error {
	if re.OperationID == "" || re.OperationID == op.OperationID || d.Audit == nil {
		return nil
	}
	how = fmt.Sprintf(how, op.DownstreamKey)
	err := d.Audit.AuditInsert(ctx, &core.AuditInsertParams{
		TenantID: op.TenantID, UserID: core.WorkerUser, Tool: op.Tool, IdempotencyKey: op.IdempotencyKey,
		OperationID: op.OperationID, Decision: vocab.DecisionReplayed,
		Reason: "adopted Stripe refund " + re.ID + " of the same intent, made by operation " + re.OperationID +
			", which this database does not know (its commits were lost: a failover or a restore); " + how +
			", and nothing was refunded again",
	})
	if err != nil {
		return gate.Transient(codeUnavailable, err)
	}
	return nil
}

// stripeError maps a Stripe error: definitive ones fail the operation
// (nothing happened, or a reused key with other parameters), the rest are
// retried with the same key.
func stripeError(err error) error {
	info, permanent := refunds.Classify(err)
	if !permanent {
		return &toolspec.Error{Outcome: toolspec.OutcomeTransient, Info: info, Err: err}
	}
	outcome := toolspec.OutcomeHappened
	if core.NothingHappened(info.Code) {
		outcome = toolspec.OutcomeNothingHappened
	}
	return &toolspec.Error{Outcome: outcome, Info: info, Err: err}
}
