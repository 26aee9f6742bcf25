package core

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/vocab"
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

// LeaseParams are the parameters of Gate.LockTx and Gate.Enter.
type LeaseParams struct {
	// Claim names the claim: its tenant and operation (what the job
	// carries) are enough.
	Claim *Claim
	// JobID is the worker's job: only the claim's own job may lease it.
	JobID int64
	// Lease is how long the lease lasts.
	Lease time.Duration
}

// leaseParams are the store's parameters for p, with audit (nil: none).
func (p *LeaseParams) store(audit *AuditInsertParams) *ClaimLeaseParams {
	return &ClaimLeaseParams{TenantID: p.Claim.TenantID, OperationID: p.Claim.OperationID, JobID: p.JobID, Lease: p.Lease, Audit: audit}
}

// LockTx begins a transaction and locks the claim in it for its job, when
// the lease is to be had, returning both; the caller runs an
// in-transaction effect and completes with CompleteParams.Locked, which
// takes the lease and the result in one write (EventApply). When the
// lease is not to be had it rolls back and answers ErrNoRun or
// ErrLeaseHeld, with the claim as read (vocab.ErrNotFound: there is
// none). A failed claim whose very job an operator retried (River UI) is
// re-driven first (EventRedrive, by "riverui": a River UI other than the
// operator routes', which re-drive through the gate themselves).
func (g *Gate) LockTx(ctx context.Context, p *LeaseParams) (Tx, *Claim, error) {
	claim := p.Claim
	for range 2 {
		tx, err := g.store.Begin(ctx)
		if err != nil {
			return nil, claim, err
		}
		locked, err := tx.ClaimLock(ctx, p.store(nil))
		if err == nil {
			return tx, locked, nil
		}
		_ = tx.Rollback(ctx)
		if err = g.notLeased(ctx, p, locked, err); err != nil {
			return nil, orClaim(locked, claim), err
		}
	}
	return nil, claim, ErrNoRun
}

// Enter takes the lease (EventLease) with its started audit row, committed
// before it returns: an external effect never starts without a committed
// lease. It answers like LockTx when the lease is not to be had.
func (g *Gate) Enter(ctx context.Context, p *LeaseParams) (*Claim, error) {
	claim := p.Claim
	for range 2 {
		leased, err := apply(ctx, g.store, EventLease, nil, Facts{}, p.store(leaseAudit(ctx, claim, p.JobID)))
		if err == nil {
			g.observe(EventLease)
			return leased, nil
		}
		if err = g.notLeased(ctx, p, leased, err); err != nil {
			return orClaim(leased, claim), err
		}
	}
	return claim, ErrNoRun
}

// notLeased tells why a lease (or lock) failed with err, the claim as read
// being c: nil when a re-drive of the job's own claim makes it worth one
// more try, else ErrNoRun, ErrLeaseHeld or the error.
func (g *Gate) notLeased(ctx context.Context, p *LeaseParams, c *Claim, err error) error {
	if !errors.Is(err, vocab.ErrLeaseUnavailable) {
		return err
	}
	switch {
	case c.JobID != p.JobID:
		return ErrNoRun // another job's claim now
	case c.Status == vocab.StatusSucceeded:
		return ErrNoRun
	case c.Status == vocab.StatusFailed:
		return g.redriveOwnJob(ctx, c)
	case c.LeaseLive:
		return ErrLeaseHeld
	}
	return ErrNoRun
}

// orClaim is c, or else fallback when c is nil.
func orClaim(c, fallback *Claim) *Claim {
	if c != nil {
		return c
	}
	return fallback
}

// leaseAudit is the started row of a lease of c by job; the store names
// the attempt and the epoch, and the fingerprint (the job does not carry it).
func leaseAudit(ctx context.Context, c *Claim, jobID int64) *AuditInsertParams {
	ev := transitionAudit(ctx, c, EventLease, "", json.RawMessage(`{"status":"running"}`))
	ev.JobID = jobID
	return ev
}

// redriveOwnJob re-drives a failed claim whose own job an operator retried
// in River UI, on the one re-drive path (Gate.Redrive's): nil when the
// claim is queued again (or someone re-drove it meanwhile), else the
// table's refusal (ErrRedriveCancelled: the worker cancels the job again,
// with the refusal as its error).
func (g *Gate) redriveOwnJob(ctx context.Context, c *Claim) error {
	// The operator routes re-drive a retried claim through the gate
	// themselves, naming the person; a retry that reaches the worker
	// came from a River UI elsewhere (a team's own), whose person is
	// unknown here.
	_, err := g.redrive(ctx, c, &redrive{operator: "riverui", via: "a River UI outside /ops (person unknown)",
		reason: "job retried in River UI"})
	if errors.Is(err, ErrRedriveNotFailed) {
		return nil // someone else re-drove it meanwhile
	}
	return err
}

// CompleteParams are the parameters of Gate.Complete.
type CompleteParams struct {
	// Tx is the transaction an in-transaction effect already ran in
	// (LockTx's); nil begins a new one.
	Tx Tx
	// Locked says Claim was locked by LockTx in Tx, not leased: the
	// completion takes the lease with it (EventApply).
	Locked bool
	Claim  *Claim
	// Result is the redacted result the claim keeps.
	Result json.RawMessage
	// Record writes the effect's domain rows after the fenced update, in
	// the same transaction; nil for none.
	Record func(ctx context.Context, tx Tx, done *Claim) error
	Job    JobHooks
}

// Complete stores the result (EventComplete, or EventApply when Locked) in
// one transaction: the fenced claim update with its audit row first (lease
// lost: roll back, write nothing, and answer vocab.ErrLeaseLost), then
// the domain rows and the job's completion. A worker whose epoch still holds commits even if River
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
	done, event, err := g.complete(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	g.observe(event)
	return done, nil
}

// complete writes Complete's rows in tx, without committing.
func (g *Gate) complete(ctx context.Context, tx Tx, p *CompleteParams) (*Claim, Event, error) {
	event := EventComplete
	if p.Locked {
		event = EventApply
	}
	done, err := apply(ctx, tx, event, p.Claim, Facts{}, completeParams(ctx, p.Claim, event, p.Result))
	if err != nil {
		return nil, event, err
	}
	if p.Record != nil {
		if err := p.Record(ctx, tx, done); err != nil {
			return nil, event, err
		}
	}
	g.completeJob(ctx, tx, p.Claim, p.Job)
	return done, event, nil
}

// completeParams is the completion of c with result by event
// (EventComplete, or EventApply for a claim locked in the transaction),
// with its audit row.
func completeParams(ctx context.Context, c *Claim, event Event, result json.RawMessage) *ClaimCompleteParams {
	return &ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: result, Locked: event == EventApply,
		Audit: transitionAudit(ctx, c, event, "", result)}
}

// completeJob completes c's job in tx (River's JobCompleteTx). A failure
// is logged, not returned: the claim's outcome commits anyway.
func (g *Gate) completeJob(ctx context.Context, tx Tx, c *Claim, job JobHooks) {
	if err := job.Complete(ctx, tx); err != nil {
		g.logger.WarnContext(ctx, "river did not complete the job row; committing the claim anyway",
			"claim_id", c.ID, "job_id", c.JobID, "error", err)
	}
}

// Fail stores a definitive failure (EventFail) and cancels the job in one
// transaction, or answers vocab.ErrLeaseLost having written nothing.
func (g *Gate) Fail(ctx context.Context, c *Claim, info vocab.ErrorInfo, job JobHooks) (*Claim, error) {
	var failed *Claim
	err := WithTx(ctx, g.store, 0, func(ctx context.Context, tx Tx) error {
		var err error
		if failed, err = apply(ctx, tx, EventFail, c, Facts{}, &ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: info}); err != nil {
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
// last_error kept; or vocab.ErrLeaseLost.
func (g *Gate) Release(ctx context.Context, c *Claim, info vocab.ErrorInfo) (*Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	released, err := apply(ctx, g.store, EventRelease, c, Facts{}, &ClaimReleaseParams{ID: c.ID, Epoch: c.Epoch, LastError: info})
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

// observeN reports n committed transitions of one event.
func (g *Gate) observeN(e Event, n int) {
	for range n {
		g.observe(e)
	}
}

// observe reports a committed transition to Config.OnTransition.
func (g *Gate) observe(e Event) {
	if g.onTransition != nil {
		g.onTransition(e)
	}
}
