package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/telemetry"
)

// The worker's steps on a claim (docs/design.md, "Working"): lease, then
// complete, fail or release, each a transition of the state machine
// (state.go) written by the gate.

// Why a worker could not take the lease.
var (
	// ErrNoRun: the claim needs no run by this job (it succeeded, or
	// another job owns it now).
	ErrNoRun = errors.New("gate: the claim needs no run by this job")
	// ErrLeaseHeld: a live worker holds the lease; try again later.
	ErrLeaseHeld = errors.New("gate: a live worker holds the lease")
)

// WorkerUser names idemgate's own side (workers, reaper) in audit rows.
const WorkerUser = "idemgate"

// JobHooks are what the worker's River job does in the gate's
// transactions.
type JobHooks struct {
	// Complete completes the job (River's JobCompleteTx).
	Complete func(ctx context.Context, tx Tx) error
	// Cancel cancels the job (River's JobCancelTx).
	Cancel func(ctx context.Context, tx Tx) error
}

// LeaseParams are the parameters of Gate.LeaseTx and Gate.Enter.
type LeaseParams struct {
	Claim *Claim
	// JobID is the worker's job: only the claim's own job may lease it.
	JobID int64
	// Lease is how long the lease lasts.
	Lease time.Duration
}

// LeaseTx begins a transaction and takes the lease in it (EventLease),
// returning both; the caller commits. When the lease is not to be had it
// rolls back and answers ErrNoRun or ErrLeaseHeld, with the claim as read.
// A failed claim whose very job an operator retried (River UI) is re-driven
// first (EventRedrive, by "riverui"), then leased.
func (g *Gate) LeaseTx(ctx context.Context, p *LeaseParams) (Tx, *Claim, error) {
	claim := p.Claim
	for range 2 {
		tx, err := g.store.Begin(ctx)
		if err != nil {
			return nil, claim, err
		}
		leased, err := tx.ClaimLease(ctx, &ClaimLeaseParams{ID: claim.ID, JobID: p.JobID, Lease: p.Lease})
		if err == nil {
			return tx, leased, nil
		}
		_ = tx.Rollback(ctx)
		if !errors.Is(err, domain.ErrLeaseUnavailable) {
			return nil, claim, err
		}
		switch {
		case leased.JobID != p.JobID:
			return nil, leased, ErrNoRun // another job's claim now
		case leased.Status == domain.StatusSucceeded:
			return nil, leased, ErrNoRun
		case leased.Status == domain.StatusFailed:
			if err := g.redriveOwnJob(ctx, leased); err != nil {
				return nil, leased, err
			}
		case leased.LeaseLive:
			return nil, leased, ErrLeaseHeld
		default:
			return nil, leased, ErrNoRun
		}
	}
	return nil, claim, ErrNoRun
}

// Enter takes the lease in its own committed transaction, with a started
// audit row: an external effect never starts without a committed lease.
func (g *Gate) Enter(ctx context.Context, p *LeaseParams) (*Claim, error) {
	tx, leased, err := g.LeaseTx(ctx, p)
	if err != nil {
		return leased, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	reason := fmt.Sprintf("attempt %d, epoch %d", leased.Attempts, leased.Epoch)
	if err := tx.AuditInsert(ctx, transitionAudit(ctx, leased, EventLease, reason, nil)); err != nil {
		return p.Claim, err
	}
	if err := tx.Commit(ctx); err != nil {
		return p.Claim, err
	}
	g.observe(EventLease)
	return leased, nil
}

// redriveOwnJob re-drives a failed claim whose own job an operator retried
// in River UI. The same downstream key is kept unless the provider answered
// definitively that nothing happened.
func (g *Gate) redriveOwnJob(ctx context.Context, c *Claim) error {
	next := c.Error != nil && (c.Error.NothingHappened || NothingHappened(c.Error.Code))
	err := WithTx(ctx, g.store, 0, func(ctx context.Context, tx Tx) error {
		redriven, err := tx.ClaimRedrive(ctx, &ClaimRedriveParams{ID: c.ID, NextGeneration: next})
		if err != nil {
			return err
		}
		reason := "job retried in River UI"
		if next {
			reason += "; next generation " + redriven.DownstreamKey
		}
		ev := transitionAudit(ctx, redriven, EventRedrive, reason, nil)
		ev.UserID = "riverui"
		return tx.AuditInsert(ctx, ev)
	})
	if errors.Is(err, domain.ErrStateChanged) {
		return nil // someone else re-drove it meanwhile
	}
	if err == nil {
		g.observe(EventRedrive)
	}
	return err
}

// CompleteParams are the parameters of Gate.Complete.
type CompleteParams struct {
	// Tx is the transaction an in-transaction effect already ran in
	// (LeaseTx's); nil begins a new one.
	Tx    Tx
	Claim *Claim
	// Result is the redacted result the claim keeps.
	Result json.RawMessage
	// Record writes the effect's domain rows after the fenced update, in
	// the same transaction; nil for none.
	Record func(ctx context.Context, tx Tx, done *Claim) error
	Job    JobHooks
}

// Complete stores the result (EventComplete) in one transaction: the
// fenced claim update first (lease lost: roll back, write nothing, and
// answer domain.ErrLeaseLost), then the domain rows, the audit row and the
// job's completion. A worker whose epoch still holds commits even if River
// moved the job row meanwhile.
func (g *Gate) Complete(ctx context.Context, p *CompleteParams) (*Claim, error) {
	tx := p.Tx
	if tx == nil {
		var err error
		if tx, err = g.store.Begin(ctx); err != nil {
			return nil, err
		}
	}
	defer func() { _ = tx.Rollback(ctx) }()
	done, err := tx.ClaimComplete(ctx, &ClaimCompleteParams{ID: p.Claim.ID, Epoch: p.Claim.Epoch, Result: p.Result})
	if err != nil {
		return nil, err
	}
	if p.Record != nil {
		if err := p.Record(ctx, tx, done); err != nil {
			return nil, err
		}
	}
	if err := tx.AuditInsert(ctx, transitionAudit(ctx, done, EventComplete, "", p.Result)); err != nil {
		return nil, err
	}
	if err := p.Job.Complete(ctx, tx); err != nil {
		g.logger.WarnContext(ctx, "river did not complete the job row; committing the claim anyway",
			"claim_id", done.ID, "job_id", done.JobID, "error", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	g.observe(EventComplete)
	return done, nil
}

// Fail stores a definitive failure (EventFail) and cancels the job in one
// transaction, or answers domain.ErrLeaseLost having written nothing.
func (g *Gate) Fail(ctx context.Context, c *Claim, info domain.ErrorInfo, job JobHooks) (*Claim, error) {
	var failed *Claim
	err := WithTx(ctx, g.store, 0, func(ctx context.Context, tx Tx) error {
		var err error
		if failed, err = tx.ClaimFail(ctx, &ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: info}); err != nil {
			return err
		}
		if err := tx.AuditInsert(ctx, transitionAudit(ctx, failed, EventFail, info.Message, nil)); err != nil {
			return err
		}
		if err := job.Cancel(ctx, tx); err != nil {
			g.logger.WarnContext(ctx, "river did not cancel the job row; committing the failure anyway",
				"claim_id", failed.ID, "job_id", failed.JobID, "error", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	g.observe(EventFail)
	return failed, nil
}

// Release hands a transient failure back to River (EventRelease): the
// claim goes back to queued with the same epoch, its lease cleared and
// last_error kept; or domain.ErrLeaseLost.
func (g *Gate) Release(ctx context.Context, c *Claim, info domain.ErrorInfo) (*Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	released, err := g.store.ClaimRelease(ctx, &ClaimReleaseParams{ID: c.ID, Epoch: c.Epoch, LastError: info})
	if err != nil {
		return nil, err
	}
	g.observe(EventRelease)
	return released, nil
}

// transitionAudit is the audit row of a transition of c, written by the
// worker side: the event's decision, the reason, the result summary (or
// result when given) and ctx's trace.
func transitionAudit(ctx context.Context, c *Claim, e Event, reason string, result json.RawMessage) *AuditInsertParams {
	if result == nil {
		result = resultSummary(c)
	}
	return &AuditInsertParams{
		TenantID:       c.TenantID,
		UserID:         WorkerUser,
		Tool:           c.Tool,
		IdempotencyKey: c.IdempotencyKey,
		OperationID:    c.OperationID,
		JobID:          c.JobID,
		Decision:       TransitionOf(e).Decision,
		Reason:         reason,
		ArgsHash:       c.ArgsHash,
		Result:         result,
		TraceID:        telemetry.TraceID(ctx),
	}
}

// observe reports a committed transition to Config.OnTransition.
func (g *Gate) observe(e Event) {
	if g.onTransition != nil {
		g.onTransition(e)
	}
}
