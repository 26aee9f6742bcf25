package stripehook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Drift is a refund_drift record: a refund at Stripe no operation explains.
type Drift struct {
	ID            int64     `json:"id"`
	Kind          string    `json:"kind"`
	TenantID      string    `json:"tenant_id"`
	OrderID       string    `json:"order_id"`
	ChargeID      string    `json:"charge_id"`
	RefundID      string    `json:"refund_id"`
	OperationID   string    `json:"operation_id"`
	AmountCents   int64     `json:"amount_cents"`
	Currency      string    `json:"currency"`
	RefundCreated time.Time `json:"refund_created"`
	Detail        string    `json:"detail"`
	DetectedAt    string    `json:"detected_at"`
}

// ProviderRefund is a provider_refunds row: a refund as Stripe last
// reported it.
type ProviderRefund struct {
	RefundID      string    `json:"refund_id"`
	ChargeID      string    `json:"charge_id"`
	OperationID   string    `json:"operation_id"`
	AmountCents   int64     `json:"amount_cents"`
	Currency      string    `json:"currency"`
	Status        string    `json:"status"`
	FailureReason string    `json:"failure_reason,omitempty"`
	Created       time.Time `json:"created"`
}

// readTx runs fn in a transaction of st, seen as a gate.Tx.
func readTx(ctx context.Context, st core.Store, fn func(ctx context.Context, gtx gate.Tx) error) error {
	return core.WithTx(ctx, st, 0, func(ctx context.Context, tx core.Tx) error {
		gtx, err := toolspec.WrapTx(tx)
		if err != nil {
			return err
		}
		return fn(ctx, gtx)
	})
}

// detectedAt is refund_drift.detected_at as RFC 3339 text on gtx's engine.
func detectedAt(gtx gate.Tx) string {
	if gtx.Engine() == gate.Postgres {
		return `to_char(detected_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
	}
	return `detected_at`
}

const driftColumns = `id, kind, tenant_id, order_id, charge_id, refund_id, operation_id, amount_cents, currency, refund_created, detail, `

func scanDrift(rows gate.Rows) ([]*Drift, error) {
	var out []*Drift
	for rows.Next() {
		d := &Drift{}
		var created int64
		if err := rows.Scan(&d.ID, &d.Kind, &d.TenantID, &d.OrderID, &d.ChargeID, &d.RefundID, &d.OperationID,
			&d.AmountCents, &d.Currency, &created, &d.Detail, &d.DetectedAt); err != nil {
			return nil, err
		}
		d.RefundCreated = time.Unix(created, 0).UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}

// ListDrift returns at most limit drift records, newest first: tenant's
// ("" for every tenant, and the records whose tenant is unknown).
func ListDrift(ctx context.Context, st core.Store, tenant string, limit int) ([]*Drift, error) {
	var out []*Drift
	err := readTx(ctx, st, func(ctx context.Context, gtx gate.Tx) error {
		q := `SELECT ` + driftColumns + detectedAt(gtx) + ` FROM refund_drift`
		args := []any{limit}
		if tenant != "" {
			q += ` WHERE tenant_id = $2`
			args = append(args, tenant)
		}
		rows, err := gtx.Query(ctx, q+` ORDER BY id DESC LIMIT $1`, args...)
		if err != nil {
			return fmt.Errorf("stripehook: list drift: %w", err)
		}
		defer func() { _ = rows.Close() }()
		out, err = scanDrift(rows)
		return err
	})
	return out, err
}

// OrderOperation is one refund_order operation on an order, with what it
// claims to have refunded and what Stripe reported for it.
type OrderOperation struct {
	OperationID    string       `json:"operation_id"`
	IdempotencyKey string       `json:"idempotency_key"`
	Status         vocab.Status `json:"status"`
	ErrorCode      vocab.Code   `json:"error_code,omitempty"`
	AmountCents    int64        `json:"amount_cents"`
	// RefundID is the Stripe refund of its result ("" before it succeeded).
	RefundID string `json:"refund_id,omitempty"`
	// StripeRefunds are the refunds Stripe reported under its id.
	StripeRefunds []string  `json:"stripe_refunds"`
	CreatedAt     time.Time `json:"created_at"`
}

// OrderReport answers "did we refund this order twice?" from both sides:
// idemgate's operations on the order and the refunds Stripe reported for
// its charge, matched by operation id.
type OrderReport struct {
	TenantID string `json:"tenant_id"`
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
	// Operations are the refund_order operations whose order_id is the
	// order, whatever their key, newest first.
	Operations []*OrderOperation `json:"operations"`
	// StripeRefunds are the refunds Stripe reported for the order's charge
	// (or naming one of its operations), oldest first.
	StripeRefunds []*ProviderRefund `json:"stripe_refunds"`
	Drift         []*Drift          `json:"drift"`
	// Refunds counts the distinct refunds that moved money: those Stripe
	// reported pending or succeeded, and those operations succeeded with
	// that Stripe has not reported (yet).
	Refunds int `json:"refunds"`
	// RefundedTwice: Refunds is more than one.
	RefundedTwice bool `json:"refunded_twice"`
	// Summary says it in a sentence.
	Summary string `json:"summary"`
}

// ErrNoOrder: neither an order row nor an operation names the order.
var ErrNoOrder = errors.New("no such order")

// ReconcileOrder reports the refunds of tenant's order from both sides
// (at most limit operations). An order no orders row and no operation
// names is ErrNoOrder.
func ReconcileOrder(ctx context.Context, st core.Store, tenant, order string, limit int) (*OrderReport, error) {
	claims, err := st.ClaimList(ctx, &core.ClaimListParams{TenantID: tenant, Tool: refundTool, ArgName: "order_id",
		ArgValue: order, Limit: limit})
	if err != nil {
		return nil, err
	}
	rep := &OrderReport{TenantID: tenant, OrderID: order, Operations: []*OrderOperation{},
		StripeRefunds: []*ProviderRefund{}, Drift: []*Drift{}}
	opIDs := make([]string, 0, len(claims))
	for _, c := range claims {
		op := &OrderOperation{OperationID: c.OperationID, IdempotencyKey: c.IdempotencyKey, Status: c.Status,
			StripeRefunds: []string{}, CreatedAt: c.CreatedAt}
		var args struct {
			AmountCents int64 `json:"amount_cents"`
		}
		_ = json.Unmarshal(c.Args, &args)
		op.AmountCents = args.AmountCents
		if c.Error != nil {
			op.ErrorCode = c.Error.Code
		}
		if c.Status == vocab.StatusSucceeded {
			var res struct {
				RefundID string `json:"refund_id"`
			}
			_ = json.Unmarshal(c.Result, &res)
			op.RefundID = res.RefundID
		}
		rep.Operations = append(rep.Operations, op)
		opIDs = append(opIDs, c.OperationID)
	}
	err = readTx(ctx, st, func(ctx context.Context, gtx gate.Tx) error {
		err := gtx.QueryRow(ctx, `SELECT charge_id FROM orders WHERE tenant_id = $1 AND order_id = $2`, tenant, order).Scan(&rep.ChargeID)
		if err != nil && !errors.Is(err, vocab.ErrNotFound) {
			return fmt.Errorf("stripehook: read order %s: %w", order, err)
		}
		rows, err := gtx.Query(ctx, `SELECT refund_id, charge_id, COALESCE(operation_id, ''), amount_cents, currency, status,
	failure_reason, refund_created
FROM provider_refunds WHERE charge_id = $1 OR (tenant_id = $2 AND order_id = $3)
ORDER BY refund_created, refund_id`, rep.ChargeID, tenant, order)
		if err != nil {
			return fmt.Errorf("stripehook: read the refunds of order %s: %w", order, err)
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			r := &ProviderRefund{}
			var created int64
			if err := rows.Scan(&r.RefundID, &r.ChargeID, &r.OperationID, &r.AmountCents, &r.Currency, &r.Status,
				&r.FailureReason, &created); err != nil {
				return err
			}
			r.Created = time.Unix(created, 0).UTC()
			rep.StripeRefunds = append(rep.StripeRefunds, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		drows, err := gtx.Query(ctx, `SELECT `+driftColumns+detectedAt(gtx)+` FROM refund_drift
WHERE (tenant_id = $1 AND order_id = $2) OR charge_id = $3 ORDER BY id DESC`, tenant, order, rep.ChargeID)
		if err != nil {
			return fmt.Errorf("stripehook: read the drift of order %s: %w", order, err)
		}
		defer func() { _ = drows.Close() }()
		d, err := scanDrift(drows)
		if d != nil {
			rep.Drift = d
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(rep.Operations) == 0 && rep.ChargeID == "" {
		return nil, fmt.Errorf("%w: %s has no order %q and no refund_order operation on it", ErrNoOrder, tenant, order)
	}
	rep.summarize(opIDs)
	return rep, nil
}

// summarize matches Stripe's refunds to the operations and says whether
// the order was refunded more than once.
func (rep *OrderReport) summarize(opIDs []string) {
	byOp := map[string]*OrderOperation{}
	for _, op := range rep.Operations {
		byOp[op.OperationID] = op
	}
	type moved struct{ refund, by string }
	var refunds []moved
	seen, reported := map[string]bool{}, map[string]bool{}
	ops, keys := map[string]bool{}, map[string]bool{}
	for _, r := range rep.StripeRefunds {
		reported[r.RefundID] = true
		op := byOp[r.OperationID]
		if op != nil {
			op.StripeRefunds = append(op.StripeRefunds, r.RefundID)
		}
		if r.Status != "pending" && r.Status != "succeeded" && r.Status != "requires_action" {
			continue
		}
		seen[r.RefundID] = true
		by := "no operation of idemgate's"
		if op != nil {
			by = fmt.Sprintf("operation %s, key %s", op.OperationID, op.IdempotencyKey)
			ops[op.OperationID], keys[op.IdempotencyKey] = true, true
		} else if r.OperationID != "" && slices.Contains(opIDs, r.OperationID) {
			by = "operation " + r.OperationID
		}
		refunds = append(refunds, moved{fmt.Sprintf("%s %d %s %s", r.RefundID, r.AmountCents, strings.ToUpper(r.Currency), r.Status), by})
	}
	allSucceeded := true
	for _, r := range rep.StripeRefunds {
		if seen[r.RefundID] && r.Status != "succeeded" {
			allSucceeded = false
		}
	}
	for i := len(rep.Operations) - 1; i >= 0; i-- {
		op := rep.Operations[i]
		if op.Status != vocab.StatusSucceeded || op.RefundID == "" || reported[op.RefundID] || seen[op.RefundID] {
			continue
		}
		seen[op.RefundID] = true
		ops[op.OperationID], keys[op.IdempotencyKey] = true, true
		refunds = append(refunds, moved{op.RefundID + " (succeeded for idemgate, not reported by Stripe yet)",
			fmt.Sprintf("operation %s, key %s", op.OperationID, op.IdempotencyKey)})
	}
	rep.Refunds = len(refunds)
	rep.RefundedTwice = rep.Refunds > 1
	var b strings.Builder
	state := "succeeded"
	if !allSucceeded {
		state = "moved money (pending included)"
	}
	fmt.Fprintf(&b, "%s: %d %s %s at Stripe for %d %s under %d %s", rep.OrderID, rep.Refunds, plural(rep.Refunds, "refund", "refunds"), state,
		len(ops), plural(len(ops), "operation", "operations"), len(keys), plural(len(keys), "key", "keys"))
	if len(refunds) > 0 {
		parts := make([]string, len(refunds))
		for i, m := range refunds {
			parts[i] = m.refund + " by " + m.by
		}
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	switch {
	case rep.RefundedTwice:
		b.WriteString(": refunded more than once")
	case rep.Refunds == 1:
		b.WriteString(": refunded once")
	default:
		b.WriteString(": not refunded")
	}
	if len(rep.Drift) > 0 {
		fmt.Fprintf(&b, "; %d drift %s", len(rep.Drift), plural(len(rep.Drift), "record", "records"))
	}
	rep.Summary = b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
