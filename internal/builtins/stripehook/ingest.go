package stripehook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v76"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// Source says where an event came from.
type Source string

// The sources of events.
const (
	// SourceWebhook: a signed delivery to POST /v1/webhooks/stripe.
	SourceWebhook Source = "webhook"
)

// Outcome is what became of an event.
type Outcome string

// The outcomes of Ingest.
const (
	// OutcomeApplied: the event set a refund's status (and settled or
	// revealed what follows from it).
	OutcomeApplied Outcome = "applied"
	// OutcomeDuplicate: the event id was applied before; nothing changed.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeIgnored: an event type that carries no refund; acknowledged.
	OutcomeIgnored Outcome = "ignored"
	// OutcomeStale: a later event already set each refund's status; the
	// event is recorded and changes nothing else.
	OutcomeStale Outcome = "stale"
)

// The drift kinds: why a refund at Stripe is one no operation explains.
const (
	// DriftUnexplained: the refund's metadata names no operation of
	// idemgate's (made in Stripe's dashboard, by another system).
	DriftUnexplained = "unexplained"
	// DriftSecondForOperation: an operation already has another refund.
	DriftSecondForOperation = "second_for_operation"
	// DriftOperationFailed: the refund's operation failed definitively,
	// yet Stripe reports the refund.
	DriftOperationFailed = "operation_failed"
)

// refundTool is the built-in tool whose effects Stripe reports.
const refundTool = "refund_order"

// Event is what idemgate reads of a Stripe event: its id, type, creation
// time (unix seconds) and the refunds it carries (none for other types).
type Event struct {
	ID      string
	Type    string
	Created int64
	Refunds []*Refund
}

// Refund is what idemgate reads of a Stripe refund.
type Refund struct {
	ID            string
	ChargeID      string
	AmountCents   int64
	Currency      string
	Status        string
	FailureReason string
	Created       int64
	Metadata      map[string]string
}

// FromStripe reads a verified Stripe event: refund.created, refund.updated,
// refund.failed (and charge.refund.updated) carry a refund; charge.refunded
// carries the charge's refunds when Stripe includes them. Other types
// carry none (acknowledged and ignored).
func FromStripe(ev *stripe.Event) (*Event, error) {
	if ev.ID == "" || ev.Type == "" {
		return nil, errors.New("the event has no id or type")
	}
	out := &Event{ID: ev.ID, Type: string(ev.Type), Created: ev.Created}
	if ev.Data == nil {
		return out, nil
	}
	switch ev.Type {
	case "refund.created", "refund.updated", "refund.failed", "charge.refund.updated":
		var re stripe.Refund
		if err := json.Unmarshal(ev.Data.Raw, &re); err != nil {
			return nil, fmt.Errorf("event %s: its object is not a refund: %v", ev.ID, err)
		}
		if re.ID == "" {
			return nil, fmt.Errorf("event %s: its refund has no id", ev.ID)
		}
		out.Refunds = append(out.Refunds, RefundFromStripe(&re, ""))
	case "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil {
			return nil, fmt.Errorf("event %s: its object is not a charge: %v", ev.ID, err)
		}
		if ch.Refunds != nil {
			for _, re := range ch.Refunds.Data {
				if re != nil && re.ID != "" {
					out.Refunds = append(out.Refunds, RefundFromStripe(re, ch.ID))
				}
			}
		}
	}
	return out, nil
}

// RefundFromStripe reads a Stripe refund (chargeID: its charge when the
// refund does not name it).
func RefundFromStripe(re *stripe.Refund, chargeID string) *Refund {
	r := &Refund{ID: re.ID, ChargeID: chargeID, AmountCents: re.Amount, Currency: string(re.Currency),
		Status: string(re.Status), FailureReason: string(re.FailureReason), Created: re.Created, Metadata: re.Metadata}
	if re.Charge != nil && re.Charge.ID != "" {
		r.ChargeID = re.Charge.ID
	}
	return r
}

// statusRank orders a refund's statuses for events of the same second:
// pending before a final status, a failure after a success (a refund
// fails after it succeeded, never the other way).
func statusRank(status string) int {
	switch status {
	case "succeeded":
		return 2
	case "failed", "canceled":
		return 3
	}
	return 1
}

// moved reports whether a refund in status moved (or may move) money.
func moved(status string) bool {
	switch status {
	case "pending", "requires_action", "succeeded":
		return true
	}
	return false
}

// Ingester applies Stripe's events to the database, once each. The
// webhook route and the periodic list share it.
type Ingester struct {
	store  core.Store
	logger *slog.Logger

	events   *prometheus.CounterVec
	drift    *prometheus.CounterVec
	settled  *prometheus.CounterVec
	rejected prometheus.Counter
}

// NewIngester returns an Ingester on st, logging to logger (nil: the
// api's logger once the webhook route has it).
func NewIngester(st core.Store, logger *slog.Logger) *Ingester {
	return &Ingester{store: st, logger: logger,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemgate_stripe_events_total",
			Help: "Stripe events received, by source (webhook, poll) and outcome (applied, duplicate, ignored, stale)."},
			[]string{"source", "outcome"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemgate_refund_drift_total",
			Help: "Refunds at Stripe that no operation explains, by kind (unexplained, second_for_operation, operation_failed)."},
			[]string{"kind"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemgate_provider_settled_total",
			Help: "Operations whose unknown outcome Stripe's report settled, by outcome (succeeded, failed)."},
			[]string{"outcome"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "idemgate_stripe_webhook_rejected_total",
			Help: "Webhook deliveries refused: no valid signature, a stale timestamp, a malformed header or body."}),
	}
}

// log is the Ingester's logger (nil: none).
func (in *Ingester) log() *slog.Logger {
	if in.logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return in.logger
}

// register adds the Ingester's metrics to reg (nil: none); registering
// them twice is not an error.
func (in *Ingester) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{in.events, in.drift, in.settled, in.rejected} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}

// effects are what one ingest did, counted once it committed.
type effects struct {
	drift   []string
	settled []string
}

// Ingest applies ev once, in one transaction: the event id is inserted
// first (a redelivery, or a concurrent delivery that committed first,
// finds it and changes nothing), then each refund's status is set unless a
// later event set it already, and what follows from that status is done
// in the same transaction: an operation whose outcome was unknown is
// settled, a refund no operation explains becomes a drift record.
func (in *Ingester) Ingest(ctx context.Context, ev *Event, src Source) (Outcome, error) {
	var (
		out Outcome
		fx  effects
	)
	err := core.WithTx(ctx, in.store, 0, func(ctx context.Context, tx core.Tx) error {
		out, fx = OutcomeStale, effects{}
		gtx, err := toolspec.WrapTx(tx)
		if err != nil {
			return err
		}
		n, err := gtx.Exec(ctx, `INSERT INTO provider_events (event_id, type, source, event_created)
VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING`, ev.ID, ev.Type, string(src), ev.Created)
		if err != nil {
			return fmt.Errorf("stripehook: record event %s: %w", ev.ID, err)
		}
		if n == 0 {
			out = OutcomeDuplicate
			return nil
		}
		if len(ev.Refunds) == 0 {
			out = OutcomeIgnored
			return nil
		}
		for _, r := range ev.Refunds {
			applied, err := in.refund(ctx, tx, gtx, ev, r, &fx)
			if err != nil {
				return err
			}
			if applied {
				out = OutcomeApplied
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	in.events.WithLabelValues(string(src), string(out)).Inc()
	in.observe(&fx)
	return out, nil
}

// observe counts what a committed ingest did.
func (in *Ingester) observe(fx *effects) {
	for _, k := range fx.drift {
		in.drift.WithLabelValues(k).Inc()
	}
	for _, s := range fx.settled {
		in.settled.WithLabelValues(s).Inc()
	}
}

// Reconsider does again what follows from a refund whose status is known
// already (a listed refund whose event was applied before): an operation
// whose outcome became unknown since (its worker's lease ran out, or the
// reaper gave up) is settled now, from what Stripe reported. A status
// other than the known one changes nothing here (Ingest sets statuses);
// settling and drift records are each done once, so reconsidering again
// does nothing more.
func (in *Ingester) Reconsider(ctx context.Context, r *Refund) error {
	fx := effects{}
	err := core.WithTx(ctx, in.store, 0, func(ctx context.Context, tx core.Tx) error {
		fx = effects{}
		gtx, err := toolspec.WrapTx(tx)
		if err != nil {
			return err
		}
		var known string
		err = gtx.QueryRow(ctx, `SELECT status FROM provider_refunds WHERE refund_id = $1`, r.ID).Scan(&known)
		switch {
		case errors.Is(err, gate.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("stripehook: read refund %s: %w", r.ID, err)
		case known != r.Status:
			return nil
		}
		o, err := ownerOf(ctx, tx, gtx, r)
		if err != nil {
			return err
		}
		return in.follow(ctx, tx, gtx, &Event{ID: "poll_" + r.ID + "_" + r.Status, Type: "refund.listed"}, r, o, &fx)
	})
	if err != nil {
		return err
	}
	in.observe(&fx)
	return nil
}

// owner is who a refund belongs to, as far as idemgate knows.
type owner struct {
	// OperationID is what the refund's metadata names ("" for none).
	OperationID string
	// Known: the operation is idemgate's (a claim, or a recorded refund of
	// an archived one).
	Known bool
	// Claim is the refund_order claim of OperationID, nil when archived
	// or unknown.
	Claim *core.Claim
	// Recorded is the Stripe refund the operation's refunds row holds ("").
	Recorded          string
	TenantID, OrderID string
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ownerOf finds r's operation from its signed metadata (the claim by
// operation id, or the refunds row it recorded), else its order from its
// charge (the orders table); never from anything unsigned.
func ownerOf(ctx context.Context, tx core.Tx, gtx gate.Tx, r *Refund) (*owner, error) {
	o := &owner{OperationID: r.Metadata[refunds.MetadataOperationID]}
	if uuidRE.MatchString(o.OperationID) {
		param := "$1"
		if gtx.Engine() == gate.Postgres {
			param = "$1::uuid"
		}
		var tenant string
		err := gtx.QueryRow(ctx, `SELECT tenant_id FROM idempotency_claims WHERE operation_id = `+param, o.OperationID).Scan(&tenant)
		switch {
		case err == nil:
			c, err := tx.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: tenant, OperationID: o.OperationID})
			if err != nil {
				return nil, fmt.Errorf("stripehook: read operation %s: %w", o.OperationID, err)
			}
			if c.Tool == refundTool {
				var args struct {
					OrderID string `json:"order_id"`
				}
				_ = json.Unmarshal(c.Args, &args)
				o.Known, o.Claim, o.TenantID, o.OrderID = true, c, tenant, args.OrderID
			}
		case !errors.Is(err, vocab.ErrNotFound):
			return nil, fmt.Errorf("stripehook: find operation %s: %w", o.OperationID, err)
		}
		var tenantID, orderID, refundID string
		err = gtx.QueryRow(ctx, `SELECT tenant_id, order_id, stripe_refund_id FROM refunds WHERE operation_id = `+param,
			o.OperationID).Scan(&tenantID, &orderID, &refundID)
		switch {
		case err == nil:
			o.Known, o.TenantID, o.OrderID, o.Recorded = true, tenantID, orderID, refundID
		case !errors.Is(err, vocab.ErrNotFound):
			return nil, fmt.Errorf("stripehook: read the refund of operation %s: %w", o.OperationID, err)
		}
	}
	if o.TenantID == "" && r.ChargeID != "" {
		rows, err := gtx.Query(ctx, `SELECT tenant_id, order_id FROM orders WHERE charge_id = $1 LIMIT 2`, r.ChargeID)
		if err != nil {
			return nil, fmt.Errorf("stripehook: find the order of charge %s: %w", r.ChargeID, err)
		}
		defer func() { _ = rows.Close() }()
		var found [][2]string
		for rows.Next() {
			var t, ord string
			if err := rows.Scan(&t, &ord); err != nil {
				return nil, err
			}
			found = append(found, [2]string{t, ord})
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(found) == 1 { // a charge of two orders names neither
			o.TenantID, o.OrderID = found[0][0], found[0][1]
		}
	}
	return o, nil
}

// nullable is s, or NULL for "".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// refund sets r's status as of ev unless a later event set it, and does
// what follows; it reports whether the status was set.
func (in *Ingester) refund(ctx context.Context, tx core.Tx, gtx gate.Tx, ev *Event, r *Refund, fx *effects) (bool, error) {
	o, err := ownerOf(ctx, tx, gtx, r)
	if err != nil {
		return false, err
	}
	rank := statusRank(r.Status)
	n, err := gtx.Exec(ctx, `INSERT INTO provider_refunds (refund_id, charge_id, tenant_id, order_id, operation_id,
	amount_cents, currency, status, status_rank, status_at, failure_reason, refund_created)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (refund_id) DO NOTHING`, r.ID, r.ChargeID, nullable(o.TenantID), nullable(o.OrderID), nullable(o.OperationID),
		r.AmountCents, r.Currency, r.Status, rank, ev.Created, r.FailureReason, r.Created)
	if err != nil {
		return false, fmt.Errorf("stripehook: record refund %s: %w", r.ID, err)
	}
	if n == 0 {
		// Known: set the status only from a later event (or, in the same
		// second, a later status).
		n, err = gtx.Exec(ctx, `UPDATE provider_refunds SET status = $2, status_rank = $3, status_at = $4, failure_reason = $5
WHERE refund_id = $1 AND (status_at < $4 OR (status_at = $4 AND status_rank < $3))`,
			r.ID, r.Status, rank, ev.Created, r.FailureReason)
		if err != nil {
			return false, fmt.Errorf("stripehook: update refund %s: %w", r.ID, err)
		}
		if n == 0 {
			// Not later than what is known. When it says what is known
			// (a redelivery, the periodic list), what follows from it is
			// done again: an operation whose outcome became unknown since
			// (its lease ran out, or the reaper gave up) is settled now;
			// settling and drift records are each done once.
			var known string
			if err := gtx.QueryRow(ctx, `SELECT status FROM provider_refunds WHERE refund_id = $1`, r.ID).Scan(&known); err != nil {
				return false, fmt.Errorf("stripehook: read refund %s: %w", r.ID, err)
			}
			if known != r.Status {
				return false, nil
			}
			return false, in.follow(ctx, tx, gtx, ev, r, o, fx)
		}
	}
	if _, err := gtx.Exec(ctx, `UPDATE refunds SET status = $2 WHERE stripe_refund_id = $1`, r.ID, r.Status); err != nil {
		return false, fmt.Errorf("stripehook: update the recorded refund %s: %w", r.ID, err)
	}
	return true, in.follow(ctx, tx, gtx, ev, r, o, fx)
}

// follow does what r's new status means for its operation: a claim
// whose outcome was unknown is settled (succeeded with the refund as its
// result and the refund recorded as refund_order's Record does, or failed
// with Stripe's reason); a refund no operation explains is drift.
func (in *Ingester) follow(ctx context.Context, tx core.Tx, gtx gate.Tx, ev *Event, r *Refund, o *owner, fx *effects) error {
	if !o.Known {
		if !moved(r.Status) {
			return nil
		}
		detail := "its metadata names no operation (made outside idemgate, e.g. in Stripe's dashboard)"
		if o.OperationID != "" {
			detail = "its metadata names operation " + o.OperationID + ", which idemgate does not know"
		}
		return in.recordDrift(ctx, tx, gtx, DriftUnexplained, o, r, detail, fx)
	}
	if moved(r.Status) && o.Recorded != "" && o.Recorded != r.ID {
		return in.recordDrift(ctx, tx, gtx, DriftSecondForOperation, o, r,
			fmt.Sprintf("operation %s already has refund %s", o.OperationID, o.Recorded), fx)
	}
	c := o.Claim
	if c == nil {
		return nil
	}
	switch r.Status {
	case "succeeded":
		if core.TransitionOf(core.EventSettle).Check(c, core.Facts{}) == nil {
			res := &tools.Refund{RefundID: r.ID, OrderID: o.OrderID, AmountCents: r.AmountCents, Currency: r.Currency, Status: r.Status}
			raw, err := json.Marshal(res)
			if err != nil {
				return err
			}
			_, err = core.Settle(ctx, tx, c, &core.Settlement{Result: raw,
				Reason: fmt.Sprintf("Stripe reports refund %s succeeded (event %s); nothing was called again", r.ID, ev.ID)})
			if errors.Is(err, vocab.ErrStateChanged) {
				return nil // a worker's outcome came first
			}
			if err != nil {
				return err
			}
			fx.settled = append(fx.settled, "succeeded")
			return tools.RecordRefund(ctx, gtx, c.TenantID, c.OperationID, res)
		}
		switch c.Status {
		case vocab.StatusSucceeded:
			var res tools.Refund
			if json.Unmarshal(c.Result, &res) == nil && res.RefundID != "" && res.RefundID != r.ID {
				return in.recordDrift(ctx, tx, gtx, DriftSecondForOperation, o, r,
					fmt.Sprintf("operation %s succeeded with refund %s", c.OperationID, res.RefundID), fx)
			}
		case vocab.StatusFailed:
			code := ""
			if c.Error != nil {
				code = string(c.Error.Code)
			}
			return in.recordDrift(ctx, tx, gtx, DriftOperationFailed, o, r,
				fmt.Sprintf("operation %s failed (%s)", c.OperationID, code), fx)
		}
	case "failed", "canceled":
		if core.TransitionOf(core.EventSettleFailed).Check(c, core.Facts{}) != nil {
			return nil
		}
		reason := r.FailureReason
		if reason == "" {
			reason = "no reason given"
		}
		info := &vocab.ErrorInfo{Code: vocab.CodeDownstreamRejected,
			Message: fmt.Sprintf("Stripe reports refund %s %s: %s", r.ID, r.Status, reason)}
		_, err := core.Settle(ctx, tx, c, &core.Settlement{Error: info,
			Reason: fmt.Sprintf("Stripe reports refund %s %s (event %s); nothing was called again", r.ID, r.Status, ev.ID)})
		if errors.Is(err, vocab.ErrStateChanged) {
			return nil
		}
		if err != nil {
			return err
		}
		fx.settled = append(fx.settled, "failed")
	}
	return nil
}

// recordDrift records r as drift of kind once (per refund and kind), with
// a drift audit row naming it.
func (in *Ingester) recordDrift(ctx context.Context, tx core.Tx, gtx gate.Tx, kind string, o *owner, r *Refund, detail string, fx *effects) error {
	n, err := gtx.Exec(ctx, `INSERT INTO refund_drift (kind, tenant_id, order_id, charge_id, refund_id, operation_id,
	amount_cents, currency, refund_created, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (refund_id, kind) DO NOTHING`, kind, o.TenantID, o.OrderID, r.ChargeID, r.ID, o.OperationID,
		r.AmountCents, r.Currency, r.Created, detail)
	if err != nil {
		return fmt.Errorf("stripehook: record drift of refund %s: %w", r.ID, err)
	}
	if n == 0 {
		return nil
	}
	ev := &core.AuditInsertParams{TenantID: o.TenantID, UserID: "stripe", Tool: refundTool, Decision: vocab.DecisionDrift,
		Reason: fmt.Sprintf("drift %s: Stripe refund %s of %d %s on charge %s (order %s): %s",
			kind, r.ID, r.AmountCents, strings.ToUpper(r.Currency), r.ChargeID, orNone(o.OrderID), detail)}
	if o.Claim != nil {
		ev.IdempotencyKey, ev.OperationID = o.Claim.IdempotencyKey, o.Claim.OperationID
	} else if o.Known {
		ev.OperationID = o.OperationID
	}
	if err := tx.AuditInsert(ctx, ev); err != nil {
		return err
	}
	in.log().WarnContext(ctx, "refund drift", "kind", kind, "refund_id", r.ID, "charge_id", r.ChargeID,
		"tenant", o.TenantID, "order_id", o.OrderID, "amount_cents", r.AmountCents, "detail", detail)
	fx.drift = append(fx.drift, kind)
	return nil
}

// orNone is s, or "unknown".
func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
