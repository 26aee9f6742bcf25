package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/vocab"
)

// CancelParams are the parameters of Gate.Cancel.
type CancelParams struct {
	TenantID    string
	OperationID string
	// UserID, TokenID and RequestID name who cancels, in the audit row.
	UserID    string
	TokenID   string
	RequestID string
	// AttemptsLeaveNoEffect says that a failed attempt of this tool
	// changed nothing (an in-transaction effect rolls back), so a queued
	// operation may be cancelled after attempts too. Otherwise only one
	// that was never attempted may be.
	AttemptsLeaveNoEffect bool
}

// Cancel cancels a queued operation before it runs, in one transaction:
// its job is locked (no worker can fetch it meanwhile) and cancelled, the
// claim fails with code cancelled, and a failed audit row names who
// cancelled. An operation that a worker runs or has fetched, or that an
// earlier attempt may have carried downstream, is refused with
// ErrCancelStarted; a finished one with ErrCancelTerminal.
func (g *Gate) Cancel(ctx context.Context, p *CancelParams, jobs JobControl) (*Claim, error) {
	var out *Claim
	err := g.inTx(ctx, func(tx Tx) error {
		c, err := tx.ClaimGetByOperation(ctx, &ClaimGetByOperationParams{TenantID: p.TenantID, OperationID: p.OperationID})
		if err != nil {
			return err
		}
		out = c
		t := TransitionOf(EventCancel)
		facts := Facts{AttemptsLeaveNoEffect: p.AttemptsLeaveNoEffect}
		if err := t.Check(c, facts); err != nil {
			return err
		}
		var job *Job
		if c.JobID != 0 {
			job, err = tx.JobGet(ctx, &JobGetParams{ID: c.JobID, Lock: true})
		}
		switch {
		case c.JobID == 0:
			// Awaiting approval: there is no job yet, and nothing ran.
		case errors.Is(err, vocab.ErrNotFound):
			// River no longer has the job: nothing can run the claim.
		case err != nil:
			return err
		default:
			facts.JobFetched = job.State == "running" // the worker is about to lease
		}
		msg := fmt.Sprintf("cancelled by %s before it ran", p.UserID)
		if c.Attempts > 0 {
			msg = fmt.Sprintf("cancelled by %s after %d attempts that changed nothing", p.UserID, c.Attempts)
		}
		cancelled, err := apply(ctx, tx, EventCancel, c, facts, &ClaimAbandonParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID,
			Error: vocab.ErrorInfo{Code: vocab.CodeCancelled, Message: msg, NothingHappened: true}})
		if errors.Is(err, vocab.ErrStateChanged) {
			return ErrCancelStarted
		}
		if err != nil {
			return err
		}
		out = cancelled
		if c.JobID == 0 {
			ev := transitionAudit(ctx, cancelled, EventCancel, "cancel: "+msg, nil)
			ev.UserID, ev.TokenID, ev.RequestID = p.UserID, p.TokenID, p.RequestID
			return tx.AuditInsert(ctx, ev)
		}
		if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
			return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
		}
		// River UI shows a job's output: an operator tells an owner's
		// cancellation apart from a failure there, and its Retry is refused.
		if err := jobs.JobMarkCancelledTx(ctx, tx, c.JobID, &CancelMark{Idemgate: "cancelled_by_owner", By: p.UserID, Reason: msg,
			Redrive: "refused: an owner's cancellation is final"}); err != nil {
			return fmt.Errorf("gate: mark job %d cancelled: %w", c.JobID, err)
		}
		ev := transitionAudit(ctx, cancelled, EventCancel, "cancel: "+msg, nil)
		ev.UserID, ev.TokenID, ev.RequestID = p.UserID, p.TokenID, p.RequestID
		return tx.AuditInsert(ctx, ev)
	})
	if err == nil {
		g.observe(EventCancel)
	}
	return out, err
}
