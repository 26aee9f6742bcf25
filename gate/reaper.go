package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/domain"
)

// JobControl changes River jobs inside a store transaction. jobs.Control
// implements it with River's JobCancelTx and JobRetryTx.
type JobControl interface {
	// JobCancelTx cancels a job (a running one is marked, so that River's
	// rescuer cancels rather than retries it).
	JobCancelTx(ctx context.Context, tx Tx, jobID int64) error
	// JobRetryTx makes a finished job available again. It reports false,
	// changing nothing, when the gate must insert a fresh job instead: River
	// no longer has the job, will not run it again, or was asked to cancel it.
	JobRetryTx(ctx context.Context, tx Tx, jobID int64) (bool, error)
}

// ReapBatch is how many claims one reaper pass handles of each kind.
const ReapBatch = 100

// ReapResult counts what one reaper pass did.
type ReapResult struct {
	// Reclaimed claims went back to queued with a fresh job.
	Reclaimed int
	// GaveUp claims failed with outcome_unknown (reclaim budget spent, or a
	// tool that must not re-run an unknown outcome).
	GaveUp int
	// Orphaned claims failed because their job ended without them.
	Orphaned int
	// Requeued claims were queued behind a job that a worker fetched and
	// stopped before taking the lease; a fresh job replaced it.
	Requeued int
}

// NothingHappened reports whether a failure with code means the provider
// definitively made no effect, so that a re-drive may move to the next
// generation (a new downstream key).
func NothingHappened(code domain.Code) bool {
	switch code {
	case domain.CodeCardDeclined, domain.CodeDownstreamRejected, domain.CodeAmountExceedsRefundable,
		domain.CodeDownstreamIdempotencyMismatch, domain.CodeNotFound, domain.CodeInvalidArgument:
		return true
	}
	return false
}

// Reap is one reaper pass. Running claims whose lease expired go back to
// queued with a fresh job that job_id points to, and a reclaimed audit row,
// in one transaction each; past the tool's reclaim budget, or for a tool
// that fails unknown outcomes, they fail with outcome_unknown instead. Claims
// whose job ended while they were not terminal and held no live lease fail
// with outcome_unknown (they were attempted) or cancelled (never attempted);
// they are never re-enqueued behind the attempt budget's back.
//
// A queued claim whose job River has reported running for longer than
// staleAfter (the in-flight lease) was fetched by a worker that stopped
// before taking the lease: it gets a fresh job too, instead of waiting for
// River's rescuer.
func (g *Gate) Reap(ctx context.Context, jobs JobControl, staleAfter time.Duration) (*ReapResult, error) {
	var res ReapResult
	expired, err := g.store.ClaimListLeaseExpired(ctx, &ClaimListLeaseExpiredParams{Limit: ReapBatch})
	if err != nil {
		return &res, err
	}
	for _, c := range expired {
		gaveUp, err := g.reclaim(ctx, c, jobs)
		switch {
		case errors.Is(err, domain.ErrLeaseLost):
			continue // a worker finished or another reaper got there first
		case err != nil:
			return &res, err
		case gaveUp:
			res.GaveUp++
		default:
			res.Reclaimed++
		}
	}
	stalled, err := g.store.ClaimListStalled(ctx, &ClaimListStalledParams{Limit: ReapBatch, StaleAfter: staleAfter})
	if err != nil {
		return &res, err
	}
	for _, c := range stalled {
		err := g.inTx(ctx, func(tx Tx) error {
			jobID, err := g.enqueuer.JobInsert(ctx, tx, c)
			if err != nil {
				return fmt.Errorf("gate: insert job: %w", err)
			}
			requeued, err := tx.ClaimRepoint(ctx, &ClaimRepointParams{ID: c.ID, Epoch: c.Epoch, OldJobID: c.JobID, NewJobID: jobID})
			if err != nil {
				return err
			}
			// Marked cancelled, River's rescuer cancels the stuck job
			// rather than retrying it.
			if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
				return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
			}
			return tx.AuditInsert(ctx, workerAudit(requeued, domain.DecisionReclaimed,
				fmt.Sprintf("job %d was fetched but never took the lease; job %d replaces it", c.JobID, jobID)))
		})
		switch {
		case errors.Is(err, domain.ErrStateChanged):
		case err != nil:
			return &res, err
		default:
			res.Requeued++
		}
	}
	orphans, err := g.store.ClaimListOrphaned(ctx, &ClaimListOrphanedParams{Limit: ReapBatch})
	if err != nil {
		return &res, err
	}
	for _, c := range orphans {
		info := domain.ErrorInfo{Code: domain.CodeCancelled, Message: fmt.Sprintf("job %d ended before the operation ran", c.JobID)}
		if c.Attempts > 0 {
			info = domain.ErrorInfo{Code: domain.CodeOutcomeUnknown, Message: fmt.Sprintf("job %d ended after %d attempt(s) without an outcome", c.JobID, c.Attempts)}
		}
		err := g.inTx(ctx, func(tx Tx) error {
			failed, err := tx.ClaimAbandon(ctx, &ClaimAbandonParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID, Error: info})
			if err != nil {
				return err
			}
			return tx.AuditInsert(ctx, workerAudit(failed, domain.DecisionFailed, info.Message))
		})
		switch {
		case errors.Is(err, domain.ErrStateChanged):
		case err != nil:
			return &res, err
		default:
			res.Orphaned++
		}
	}
	return &res, nil
}

// reclaim re-enqueues or gives up one claim whose lease expired.
func (g *Gate) reclaim(ctx context.Context, c *Claim, jobs JobControl) (gaveUp bool, err error) {
	policy, ok := g.policies[c.Tool]
	if !ok {
		return false, fmt.Errorf("gate: claim %d has tool %q without a policy", c.ID, c.Tool)
	}
	gaveUp = policy.FailUnknownOutcome || c.Attempts >= policy.reclaimBudget()
	err = g.inTx(ctx, func(tx Tx) error {
		if gaveUp {
			reason := fmt.Sprintf("lease expired after %d attempt(s); reclaim budget %d spent", c.Attempts, policy.reclaimBudget())
			if policy.FailUnknownOutcome {
				reason = "lease expired and " + c.Tool + " does not re-run an unknown outcome"
			}
			info := domain.ErrorInfo{Code: domain.CodeOutcomeUnknown, Message: reason}
			failed, err := tx.ClaimFail(ctx, &ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: info, LeaseExpiredOnly: true})
			if err != nil {
				return err
			}
			if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
				return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
			}
			return tx.AuditInsert(ctx, workerAudit(failed, domain.DecisionFailed, reason))
		}
		jobID, err := g.enqueuer.JobInsert(ctx, tx, c)
		if err != nil {
			return fmt.Errorf("gate: insert job: %w", err)
		}
		reclaimed, err := tx.ClaimReclaim(ctx, &ClaimReclaimParams{ID: c.ID, Epoch: c.Epoch, JobID: jobID})
		if err != nil {
			return err
		}
		// The dead worker's job, if River rescues it, finds it is no longer
		// the claim's job and ends without effect; mark it cancelled too.
		if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
			return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
		}
		return tx.AuditInsert(ctx, workerAudit(reclaimed, domain.DecisionReclaimed,
			fmt.Sprintf("lease of epoch %d expired; job %d replaces job %d", c.Epoch, jobID, c.JobID)))
	})
	return gaveUp, err
}

// PruneBatch is how many expired claims (or tombstones) one prune
// statement handles.
const PruneBatch = 1000

// Prune replaces terminal claims past their expiry by tombstones, never a
// queued or running one, and deletes tombstones past their retention, in
// bounded batches until none are left or maxBatches ran of each. It
// returns how many claims it archived.
func (g *Gate) Prune(ctx context.Context, maxBatches int) (int, error) {
	return g.prune(ctx, maxBatches, nil)
}

func (g *Gate) prune(ctx context.Context, maxBatches int, now *time.Time) (int, error) {
	total := 0
	for range maxBatches {
		var n int
		err := g.inTx(ctx, func(tx Tx) error {
			var err error
			n, err = tx.ClaimArchiveExpired(ctx, &ClaimArchiveExpiredParams{Limit: PruneBatch, Now: now})
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < PruneBatch {
			break
		}
	}
	for range maxBatches {
		n, err := g.store.TombstoneDeleteExpired(ctx, &TombstoneDeleteExpiredParams{Limit: PruneBatch, Now: now})
		if err != nil || n < PruneBatch {
			return total, err
		}
	}
	return total, nil
}

// PruneAt is Prune with the database clock overridden; tests only.
func (g *Gate) PruneAt(ctx context.Context, maxBatches int, now time.Time) (int, error) {
	return g.prune(ctx, maxBatches, &now)
}

// RedriveParams are the parameters of Gate.Redrive.
type RedriveParams struct {
	TenantID       string
	Tool           string
	IdempotencyKey string
	// Operator and Reason are written to the redriven audit row. Required.
	Operator string
	Reason   string
	// DryRun reports what would happen without changing anything.
	DryRun bool
}

// ErrRedriveSucceeded is returned for a claim that succeeded: re-driving it
// is refused.
var ErrRedriveSucceeded = errors.New("the operation succeeded; re-driving it is refused")

// ErrRedriveNotFailed is returned for a claim that is queued or running.
var ErrRedriveNotFailed = errors.New("the operation is not failed; only failed operations are re-driven")

// RedriveResult says what a re-drive did (or would do).
type RedriveResult struct {
	Claim *Claim
	// NextGeneration is true when the downstream key moves on.
	NextGeneration bool
	// FreshJob is true when a fresh job replaced the claim's job.
	FreshJob bool
}

// Redrive sets a failed claim back to queued and runs it again through the
// gate: its own job retried, or a fresh one when River cleaned it or was
// asked to cancel it (JobControl.JobRetryTx reports false), and a
// redriven audit row naming the operator and the reason. The downstream key
// stays unless the provider answered definitively that nothing happened.
func (g *Gate) Redrive(ctx context.Context, p *RedriveParams, jobs JobControl) (*RedriveResult, error) {
	if p.Operator == "" || p.Reason == "" {
		return nil, errors.New("gate: a re-drive needs an operator and a reason")
	}
	c, err := g.store.ClaimGetByKey(ctx, &ClaimGetByKeyParams{TenantID: p.TenantID, Tool: p.Tool, IdempotencyKey: p.IdempotencyKey})
	if err != nil {
		return nil, err
	}
	switch c.Status {
	case domain.StatusSucceeded:
		return &RedriveResult{Claim: c}, ErrRedriveSucceeded
	case domain.StatusQueued, domain.StatusRunning:
		return &RedriveResult{Claim: c}, ErrRedriveNotFailed
	}
	res := &RedriveResult{Claim: c, NextGeneration: c.Error != nil && (c.Error.NothingHappened || NothingHappened(c.Error.Code))}
	if p.DryRun {
		return res, nil
	}
	err = g.inTx(ctx, func(tx Tx) error {
		retried, err := jobs.JobRetryTx(ctx, tx, c.JobID)
		if err != nil {
			return fmt.Errorf("gate: retry job %d: %w", c.JobID, err)
		}
		var jobID int64
		if !retried {
			res.FreshJob = true
			if jobID, err = g.enqueuer.JobInsert(ctx, tx, c); err != nil {
				return fmt.Errorf("gate: insert job: %w", err)
			}
		}
		redriven, err := tx.ClaimRedrive(ctx, &ClaimRedriveParams{ID: c.ID, NextGeneration: res.NextGeneration, JobID: jobID})
		if err != nil {
			return err
		}
		res.Claim = redriven
		reason := p.Reason
		if res.NextGeneration {
			reason += " (next generation: " + redriven.DownstreamKey + ")"
		}
		ev := workerAudit(redriven, domain.DecisionRedriven, reason)
		ev.UserID = p.Operator
		return tx.AuditInsert(ctx, ev)
	})
	if errors.Is(err, domain.ErrStateChanged) {
		return res, ErrRedriveNotFailed
	}
	return res, err
}

// inTx runs fn in a transaction, committing when it returns nil.
func (g *Gate) inTx(ctx context.Context, fn func(tx Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	tx, err := g.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// workerAudit is an audit row about a claim written by the worker side.
func workerAudit(c *Claim, d domain.Decision, reason string) *AuditInsertParams {
	return &AuditInsertParams{
		TenantID:       c.TenantID,
		UserID:         "idemgate",
		Tool:           c.Tool,
		IdempotencyKey: c.IdempotencyKey,
		OperationID:    c.OperationID,
		JobID:          c.JobID,
		Decision:       d,
		Reason:         reason,
		ArgsHash:       c.ArgsHash,
		Result:         resultSummary(c),
	}
}
