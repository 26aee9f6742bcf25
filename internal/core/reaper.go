package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
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
	// JobMarkCancelledTx records on a job, where River UI shows it (the
	// job's output), that its claim's owner cancelled it. A job River no
	// longer has is fine.
	JobMarkCancelledTx(ctx context.Context, tx Tx, jobID int64, mark *CancelMark) error
}

// CancelMark is what a job's output says of its owner's cancellation.
type CancelMark struct {
	// Idemgate is always "cancelled_by_owner": River UI shows it where a
	// failure shows its error.
	Idemgate string `json:"idemgate"`
	// By is the user who cancelled.
	By string `json:"cancelled_by"`
	// Reason is the claim's cancellation message.
	Reason string `json:"reason"`
	// Redrive says that a re-drive, River UI's Retry included, is refused.
	Redrive string `json:"redrive"`
}

// ReapBatch is how many claims one reaper pass handles of each kind.
const ReapBatch = 100

// ReapResult counts what one reaper pass did, by event.
type ReapResult struct {
	// Reclaimed claims (EventReclaim) went back to queued with a fresh job.
	Reclaimed int
	// GaveUp claims (EventGiveUp) failed with outcome_unknown: reclaim
	// budget spent, or a tool that must not re-run an unknown outcome.
	GaveUp int
	// Repointed claims (EventRepoint) were queued behind a job that a
	// worker fetched and stopped before the lease; a fresh job replaced it.
	Repointed int
	// Abandoned claims (EventAbandon) failed because their job ended
	// without them (orphanVerdict).
	Abandoned int
}

// NothingHappened reports whether a failure with code means the provider
// definitively made no effect, so that a re-drive may move to the next
// generation (a new downstream key).
func NothingHappened(code vocab.Code) bool {
	switch code {
	case vocab.CodeCardDeclined, vocab.CodeDownstreamRejected, vocab.CodeAmountExceedsRefundable,
		vocab.CodeDownstreamIdempotencyMismatch, vocab.CodeNotFound, vocab.CodeInvalidArgument:
		return true
	}
	return false
}

// Reap is one reaper pass. Running claims whose lease expired go back to
// queued with a fresh job that job_id points to, and a reclaimed audit row,
// in one transaction each; past the tool's reclaim budget, or for a tool
// that fails unknown outcomes, they fail with outcome_unknown instead. Claims
// whose job ended while they were not terminal and held no live lease fail
// with a code that says what ended the job (job_cancelled_by_operator,
// job_vanished, or outcome_unknown after attempts), never cancelled, which
// only an owner's cancellation writes; they are never re-enqueued behind
// the attempt budget's back.
//
// A queued claim whose job River has reported running for longer than
// staleAfter (the in-flight lease) was fetched by a worker that stopped
// before taking the lease: it gets a fresh job too, instead of waiting for
// River's rescuer.
func (g *Gate) Reap(ctx context.Context, jobs JobControl, staleAfter time.Duration) (*ReapResult, error) {
	var res ReapResult
	if err := g.reapExpired(ctx, jobs, &res); err != nil {
		return &res, err
	}
	if err := g.reapStalled(ctx, jobs, staleAfter, &res); err != nil {
		return &res, err
	}
	return &res, g.reapAbandoned(ctx, &res)
}

// reapExpired reclaims, or gives up on, running claims whose lease expired.
func (g *Gate) reapExpired(ctx context.Context, jobs JobControl, res *ReapResult) error {
	expired, err := g.store.ClaimListLeaseExpired(ctx, &ClaimListLeaseExpiredParams{Limit: ReapBatch})
	if err != nil {
		return err
	}
	for _, c := range expired {
		event, err := g.reclaim(ctx, c, jobs)
		switch {
		case errors.Is(err, vocab.ErrLeaseLost):
			continue // a worker finished or another reaper got there first
		case err != nil:
			return err
		case event == EventGiveUp:
			res.GaveUp++
		default:
			res.Reclaimed++
		}
		g.observe(event)
	}
	return nil
}

// reapStalled gives a fresh job to queued claims whose job a worker fetched
// and left before taking the lease (EventRepoint).
func (g *Gate) reapStalled(ctx context.Context, jobs JobControl, staleAfter time.Duration, res *ReapResult) error {
	stalled, err := g.store.ClaimListStalled(ctx, &ClaimListStalledParams{Limit: ReapBatch, StaleAfter: staleAfter})
	if err != nil {
		return err
	}
	for _, c := range stalled {
		err := g.inTx(ctx, func(tx Tx) error {
			jobID, err := g.enqueuer.JobInsert(ctx, tx, c)
			if err != nil {
				return fmt.Errorf("gate: insert job: %w", err)
			}
			repointed, err := apply(ctx, tx, EventRepoint, c, Facts{}, &ClaimRepointParams{ID: c.ID, Epoch: c.Epoch, OldJobID: c.JobID, NewJobID: jobID})
			if err != nil {
				return err
			}
			// Marked cancelled, River's rescuer cancels the stuck job
			// rather than retrying it.
			if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
				return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
			}
			return tx.AuditInsert(ctx, transitionAudit(ctx, repointed, EventRepoint,
				fmt.Sprintf("repoint: job %d was fetched but never took the lease; job %d replaces it", c.JobID, jobID), nil))
		})
		switch {
		case errors.Is(err, vocab.ErrStateChanged):
		case err != nil:
			return err
		default:
			res.Repointed++
			g.observe(EventRepoint)
		}
	}
	return nil
}

// reapAbandoned fails claims whose job ended without them (EventAbandon),
// with a code that says what ended it (orphanVerdict).
func (g *Gate) reapAbandoned(ctx context.Context, res *ReapResult) error {
	orphans, err := g.store.ClaimListOrphaned(ctx, &ClaimListOrphanedParams{Limit: ReapBatch})
	if err != nil {
		return err
	}
	for _, c := range orphans {
		err := g.inTx(ctx, func(tx Tx) error {
			job, err := tx.JobGet(ctx, &JobGetParams{ID: c.JobID})
			if err != nil && !errors.Is(err, vocab.ErrNotFound) {
				return err
			}
			info := orphanVerdict(c, job)
			failed, err := apply(ctx, tx, EventAbandon, c, Facts{}, &ClaimAbandonParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID, Error: info})
			if err != nil {
				return err
			}
			return tx.AuditInsert(ctx, transitionAudit(ctx, failed, EventAbandon, "abandon: "+string(info.Code)+": "+info.Message, nil))
		})
		switch {
		case errors.Is(err, vocab.ErrStateChanged):
		case err != nil:
			return err
		default:
			res.Abandoned++
			g.observe(EventAbandon)
		}
	}
	return nil
}

// orphanVerdict is the failure of a claim whose job ended without it (job
// nil: River no longer has it). The gate's own cancellations never leave
// such a claim (an owner's cancel fails the claim in the same transaction,
// and a replaced job is no longer the claim's), so a cancel asked of River
// for the claim's job came from outside the gate: an operator, in River UI,
// rivercli or with the River client (job_cancelled_by_operator). A job
// that is gone, or that its worker ended without running the claim, is
// job_vanished; one that ended after attempts without a cancel asked is
// outcome_unknown. None is the owner's cancellation: each may be re-driven,
// with the same downstream key.
func orphanVerdict(c *Claim, job *Job) vocab.ErrorInfo {
	attempts := "before the operation ran"
	if c.Attempts > 0 {
		attempts = fmt.Sprintf("after %d attempt(s) whose outcome is unknown", c.Attempts)
	}
	const redrive = "; its owner did not cancel it, and an operator can re-drive it"
	switch {
	case job == nil:
		return vocab.ErrorInfo{Code: vocab.CodeJobVanished,
			Message: fmt.Sprintf("job %d was deleted from River %s", c.JobID, attempts) + redrive}
	case job.State == "cancelled" && job.CancelRequested:
		return vocab.ErrorInfo{Code: vocab.CodeJobCancelledByOperator,
			Message: fmt.Sprintf("job %d was cancelled in River by an operator (River UI, rivercli or the River client), not through idemgate, %s", c.JobID, attempts) + redrive}
	case c.Attempts > 0:
		return vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown,
			Message: fmt.Sprintf("job %d ended (%s) after %d attempt(s) without an outcome", c.JobID, job.State, c.Attempts)}
	default:
		return vocab.ErrorInfo{Code: vocab.CodeJobVanished,
			Message: fmt.Sprintf("job %d ended (%s) %s", c.JobID, job.State, attempts) + redrive}
	}
}

// reclaim re-enqueues (EventReclaim) or gives up on (EventGiveUp) one
// claim whose lease expired, and says which.
func (g *Gate) reclaim(ctx context.Context, c *Claim, jobs JobControl) (Event, error) {
	policy, ok := g.policies[c.Tool]
	if !ok {
		return "", fmt.Errorf("gate: claim %d has tool %q without a policy", c.ID, c.Tool)
	}
	if policy.FailUnknownOutcome || c.Attempts >= policy.reclaimBudget() {
		return EventGiveUp, g.inTx(ctx, func(tx Tx) error { return g.giveUp(ctx, tx, c, policy, jobs) })
	}
	return EventReclaim, g.inTx(ctx, func(tx Tx) error {
		jobID, err := g.enqueuer.JobInsert(ctx, tx, c)
		if err != nil {
			return fmt.Errorf("gate: insert job: %w", err)
		}
		reclaimed, err := apply(ctx, tx, EventReclaim, c, Facts{}, &ClaimReclaimParams{ID: c.ID, Epoch: c.Epoch, JobID: jobID})
		if err != nil {
			return err
		}
		// The dead worker's job, if River rescues it, finds it is no longer
		// the claim's job and ends without effect; mark it cancelled too.
		if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
			return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
		}
		return tx.AuditInsert(ctx, transitionAudit(ctx, reclaimed, EventReclaim,
			fmt.Sprintf("lease of epoch %d expired; job %d replaces job %d", c.Epoch, jobID, c.JobID), nil))
	})
}

// giveUp fails a claim whose lease expired with outcome_unknown, in tx.
func (g *Gate) giveUp(ctx context.Context, tx Tx, c *Claim, policy *Policy, jobs JobControl) error {
	reason := fmt.Sprintf("lease expired after %d attempt(s); reclaim budget %d spent", c.Attempts, policy.reclaimBudget())
	if policy.FailUnknownOutcome {
		reason = "lease expired and " + c.Tool + " does not re-run an unknown outcome"
	}
	info := vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown, Message: reason}
	failed, err := apply(ctx, tx, EventGiveUp, c, Facts{}, &ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: info, LeaseExpiredOnly: true})
	if err != nil {
		return err
	}
	if err := jobs.JobCancelTx(ctx, tx, c.JobID); err != nil {
		return fmt.Errorf("gate: cancel job %d: %w", c.JobID, err)
	}
	return tx.AuditInsert(ctx, transitionAudit(ctx, failed, EventGiveUp, "give_up: "+reason, nil))
}

// PruneBatch is how many expired claims (or tombstones) one prune
// statement handles.
const PruneBatch = 1000

// Prune moves terminal claims past their expiry into their keys' history
// (EventArchive), never a queued or running one, and forgets history rows
// past their retention (EventForget), each with its audit rows, in
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
			n, err = applyCount(ctx, tx, EventArchive, &ClaimArchiveExpiredParams{Limit: PruneBatch, Now: now})
			return err
		})
		if err != nil {
			return total, err
		}
		g.observeN(EventArchive, n)
		total += n
		if n < PruneBatch {
			break
		}
	}
	for range maxBatches {
		n, err := applyCount(ctx, g.store, EventForget, &TombstoneDeleteExpiredParams{Limit: PruneBatch, Now: now})
		g.observeN(EventForget, n)
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
	// Operator is the person (the row's user_id).
	Operator string
	Reason   string
	// Via is the channel the operator acted through ("idemctl",
	// "/ops/redrive (oauth)", "riverui (basic)"), named in the audit row's
	// reason with the person.
	Via string
	// DryRun reports what would happen without changing anything.
	DryRun bool
}

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
// What the state machine refuses (a succeeded, in-flight or cancelled
// claim) is answered with its refusal and, unless DryRun, a denied audit
// row naming the operator.
func (g *Gate) Redrive(ctx context.Context, p *RedriveParams, jobs JobControl) (*RedriveResult, error) {
	if p.Operator == "" || p.Reason == "" {
		return nil, errors.New("gate: a re-drive needs an operator and a reason")
	}
	c, err := g.store.ClaimGetByKey(ctx, &ClaimGetByKeyParams{TenantID: p.TenantID, Tool: p.Tool, IdempotencyKey: p.IdempotencyKey})
	if err != nil {
		return nil, err
	}
	return g.redrive(ctx, c, &redrive{operator: p.Operator, via: p.Via, reason: p.Reason, dryRun: p.DryRun, jobs: jobs})
}

// redrive is how a re-drive is asked for: by an operator (idemctl, POST
// /ops/redrive), whose jobs retry or replace the claim's job, or by River
// UI's Retry of the claim's own job (jobs nil: River has made the job
// available again, and the worker running it asks).
type redrive struct {
	operator, via, reason string
	dryRun                bool
	jobs                  JobControl
}

// by names who asked for the re-drive and how, for its audit rows:
// "ana@example.com via riverui (oauth)".
func (r *redrive) by() string {
	if r.via == "" {
		return r.operator
	}
	return r.operator + " via " + r.via
}

// redrive is the one re-drive path: the table's check (EventRedrive), then
// in one transaction the job, the claim (its store guard agrees with the
// table) and the redriven audit row.
func (g *Gate) redrive(ctx context.Context, c *Claim, r *redrive) (*RedriveResult, error) {
	res := &RedriveResult{Claim: c, NextGeneration: c.Error != nil && (c.Error.NothingHappened || NothingHappened(c.Error.Code))}
	if err := TransitionOf(EventRedrive).Check(c, Facts{}); err != nil {
		if !r.dryRun {
			if aerr := g.refuseRedrive(ctx, c, r, err); aerr != nil {
				return nil, aerr
			}
		}
		return res, err
	}
	if r.dryRun {
		return res, nil
	}
	err := g.inTx(ctx, func(tx Tx) error {
		var jobID int64
		if r.jobs != nil {
			retried, err := r.jobs.JobRetryTx(ctx, tx, c.JobID)
			if err != nil {
				return fmt.Errorf("gate: retry job %d: %w", c.JobID, err)
			}
			if !retried {
				res.FreshJob = true
				if jobID, err = g.enqueuer.JobInsert(ctx, tx, c); err != nil {
					return fmt.Errorf("gate: insert job: %w", err)
				}
			}
		}
		redriven, err := apply(ctx, tx, EventRedrive, c, Facts{}, &ClaimRedriveParams{ID: c.ID, NextGeneration: res.NextGeneration, JobID: jobID})
		if err != nil {
			return err
		}
		res.Claim = redriven
		reason := "redriven by " + r.by() + ": " + r.reason
		if res.NextGeneration {
			reason += " (next generation: " + redriven.DownstreamKey + ")"
		}
		ev := transitionAudit(ctx, redriven, EventRedrive, reason, nil)
		ev.UserID = r.operator
		return tx.AuditInsert(ctx, ev)
	})
	if errors.Is(err, vocab.ErrStateChanged) {
		return res, ErrRedriveNotFailed
	}
	if err == nil {
		g.observe(EventRedrive)
	}
	return res, err
}

// refuseRedrive writes the denied audit row of r's refused re-drive of c.
func (g *Gate) refuseRedrive(ctx context.Context, c *Claim, r *redrive, refusal error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	ev := transitionAudit(ctx, c, EventRedrive, "redrive refused: "+refusal.Error()+" (asked by "+r.by()+")", nil)
	ev.Decision, ev.UserID = vocab.DecisionDenied, r.operator
	return g.store.AuditInsert(ctx, ev)
}

// inTx runs fn in a transaction bounded by the gate's DBTimeout.
func (g *Gate) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return WithTx(ctx, g.store, g.timeout, func(_ context.Context, tx Tx) error { return fn(tx) })
}

// WithTx runs fn in a transaction of s, committing when fn returns nil and
// rolling back otherwise. A positive timeout bounds the whole transaction;
// fn must use the context it is given.
func WithTx(ctx context.Context, s Store, timeout time.Duration, fn func(ctx context.Context, tx Tx) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
