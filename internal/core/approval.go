package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
)

// DecideParams are the parameters of Gate.Approve and Gate.Deny.
type DecideParams struct {
	// Approver is the person deciding: the claim is looked up in their
	// tenant, and they may not be its requester.
	Approver  vocab.Actor
	RequestID string
	// OperationID names the operation decided on.
	OperationID string
	// ArgsHash is the fingerprint the approver saw; the decision applies
	// only to the operation's own.
	ArgsHash string
	// Reason is the approver's note, kept in the audit row.
	Reason string
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// Approve approves an operation awaiting approval: in one transaction its
// job is inserted (through the Enqueuer, as a claim's), the claim is
// queued pointing at it, and an accepted audit row names the approver. It
// is refused, with the claim as read and one denied audit row, when the
// claim does not await approval (ErrApprovalNotAwaiting: a second
// approval changes nothing), the fingerprint is not the claim's
// (ErrApprovalFingerprint), the approver is the requester
// (ErrApprovalSelf), or the window ended (ErrApprovalExpired).
func (g *Gate) Approve(ctx context.Context, p *DecideParams) (*Claim, error) {
	return g.decide(ctx, p, EventApprove, func(ctx context.Context, tx Tx, c *Claim) (*Claim, error) {
		jobID, err := g.enqueuer.JobInsert(ctx, tx, c)
		if err != nil {
			return nil, fmt.Errorf("gate: insert job: %w", err)
		}
		return apply(ctx, tx, EventApprove, c, Facts{}, &ClaimApproveParams{ID: c.ID, ArgsHash: p.ArgsHash, JobID: jobID, Now: p.Now})
	})
}

// Deny denies an operation awaiting approval: it fails approval_denied
// (final, never re-driven) with a failed audit row naming the approver.
// Refusals are Approve's.
func (g *Gate) Deny(ctx context.Context, p *DecideParams) (*Claim, error) {
	return g.decide(ctx, p, EventDeny, func(ctx context.Context, tx Tx, c *Claim) (*Claim, error) {
		msg := "denied by " + p.Approver.UserID
		if p.Reason != "" {
			msg += ": " + p.Reason
		}
		return apply(ctx, tx, EventDeny, c, Facts{}, &ClaimDeclineParams{ID: c.ID, Now: p.Now,
			Error: vocab.ErrorInfo{Code: vocab.CodeApprovalDenied, Message: msg, NothingHappened: true}})
	})
}

// decide runs a decision on an awaiting claim in one transaction, with its
// audit row; a refusal writes a denied audit row instead.
func (g *Gate) decide(ctx context.Context, p *DecideParams, e Event, write func(context.Context, Tx, *Claim) (*Claim, error)) (*Claim, error) {
	var out *Claim
	var refusal error
	err := WithTx(ctx, g.store, g.timeout, func(ctx context.Context, tx Tx) error {
		c, err := tx.ClaimGetByOperation(ctx, &ClaimGetByOperationParams{TenantID: p.Approver.TenantID, OperationID: p.OperationID, Now: p.Now})
		if err != nil {
			return err
		}
		out = c
		if refusal = decisionRefusal(c, e, p); refusal != nil {
			return refusal
		}
		decided, err := write(ctx, tx, c)
		if errors.Is(err, vocab.ErrStateChanged) {
			// The claim was read awaiting, of this fingerprint: another
			// decision committed first, or its window ended (the database's
			// clock decides). Read it again to say which.
			refusal = ErrApprovalExpired
			if now, rerr := tx.ClaimGetByOperation(ctx, &ClaimGetByOperationParams{TenantID: p.Approver.TenantID, OperationID: p.OperationID, Now: p.Now}); rerr == nil {
				out = now
				if now.Status != vocab.StatusAwaitingApproval {
					refusal = ErrApprovalNotAwaiting
				}
			}
			return refusal
		}
		if err != nil {
			return err
		}
		out = decided
		ev := transitionAudit(ctx, decided, e, fmt.Sprintf("%s by %s of fingerprint %s", e, p.Approver.UserID, p.ArgsHash), nil)
		if p.Reason != "" {
			ev.Reason += ": " + p.Reason
		}
		ev.UserID, ev.TokenID, ev.RequestID = p.Approver.UserID, p.Approver.TokenID, p.RequestID
		return tx.AuditInsert(ctx, ev)
	})
	if refusal != nil && out != nil {
		ev := transitionAudit(ctx, out, e, fmt.Sprintf("%s refused: %v", e, refusal), nil)
		ev.Decision = vocab.DecisionDenied
		ev.UserID, ev.TokenID, ev.RequestID = p.Approver.UserID, p.Approver.TokenID, p.RequestID
		auditCtx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		if aerr := g.store.AuditInsert(auditCtx, ev); aerr != nil {
			return out, errors.Join(refusal, aerr)
		}
		return out, refusal
	}
	if err != nil {
		return out, err
	}
	g.observe(e)
	return out, nil
}

// decisionRefusal is why a decision e on c is refused, nil when it is not.
func decisionRefusal(c *Claim, e Event, p *DecideParams) error {
	if err := TransitionOf(e).Check(c, Facts{}); err != nil {
		return err
	}
	switch {
	case c.ArgsHash != p.ArgsHash:
		return ErrApprovalFingerprint
	case p.Approver.UserID == "" || p.Approver.UserID == c.UserID:
		return ErrApprovalSelf
	}
	return nil
}

// ExpireApprovalsParams are the parameters of Gate.ExpireApprovals.
type ExpireApprovalsParams struct {
	// Limit bounds the claims expired in one pass; default 100.
	Limit int
	// Now overrides the database clock; tests only.
	Now *time.Time
}

// ExpireApprovals fails claims whose approval window ended with
// approval_expired (final, never re-driven), each in a transaction of its
// own with a failed audit row, and returns how many it expired.
func (g *Gate) ExpireApprovals(ctx context.Context, p *ExpireApprovalsParams) (int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	listCtx, cancel := context.WithTimeout(ctx, g.timeout)
	overdue, err := g.store.ClaimListApprovalExpired(listCtx, &ClaimListApprovalExpiredParams{Limit: limit, Now: p.Now})
	cancel()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range overdue {
		err := g.inTx(ctx, func(tx Tx) error {
			msg := "nobody approved it within its approval window"
			expired, err := apply(ctx, tx, EventApprovalExpire, c, Facts{}, &ClaimDeclineParams{ID: c.ID, Expired: true, Now: p.Now,
				Error: vocab.ErrorInfo{Code: vocab.CodeApprovalExpired, Message: msg, NothingHappened: true}})
			if err != nil {
				return err
			}
			return tx.AuditInsert(ctx, transitionAudit(ctx, expired, EventApprovalExpire, "approval_expired: "+msg, nil))
		})
		switch {
		case errors.Is(err, vocab.ErrStateChanged):
			// Decided meanwhile.
		case err != nil:
			return n, err
		default:
			n++
			g.observe(EventApprovalExpire)
		}
	}
	return n, nil
}
