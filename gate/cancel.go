package gate

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/domain"
)

// Refusals of Gate.Cancel. The claim as read comes back with them.
var (
	// ErrCancelTerminal: the operation already succeeded or failed.
	ErrCancelTerminal = errors.New("gate: the operation is already finished")
	// ErrCancelStarted: a worker runs the operation (or has fetched its
	// job), or an earlier attempt may have reached the downstream: its
	// effect may be under way, so it is not cancelled.
	ErrCancelStarted = errors.New("gate: the operation has started; its effect may be under way")
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
		switch {
		case c.Status.Terminal():
			return ErrCancelTerminal
		case c.Status == domain.StatusRunning, c.Attempts > 0 && !p.AttemptsLeaveNoEffect:
			return ErrCancelStarted
		}
		job, err := tx.JobGet(ctx, &JobGetParams{ID: c.JobID, Lock: true})
		switch {
		case errors.Is(err, domain.ErrNotFound):
			// River no longer has the job: nothing can run the claim.
		case err != nil:
			return err
		case job.State == "running":
			return ErrCancelStarted // fetched: the worker is about to lease
		}
		msg := fmt.Sprintf("cancelled by %s before it ran", p.UserID)
		if c.Attempts > 0 {
			msg = fmt.Sprintf("cancelled by %s after %d attempts that changed nothing", p.UserID, c.Attempts)
		}
		cancelled, err := tx.ClaimAbandon(ctx, &ClaimAbandonParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID,
			Error: domain.ErrorInfo{Code: domain.CodeCancelled, Message: msg, NothingHappened: true}})
		if errors.Is(err, domain.ErrStateChanged) {
			return ErrCancelStarted
		}
		if err != nil {
			return err
		}
		out = cancelled
		if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
			return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
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
