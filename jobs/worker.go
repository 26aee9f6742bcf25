package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// Effect is one tool's effect, split where the gate needs it split.
type Effect interface {
	// Call makes the downstream call (Stripe, SMTP) outside any transaction,
	// under a deadline shorter than the lease, and returns the result to
	// store. A *Failure is definitive; any other error is transient.
	Call(ctx context.Context, c *gate.Claim) (json.RawMessage, error)
	// Record writes the domain rows in the completing transaction, after the
	// claim's fenced update succeeded.
	Record(ctx context.Context, tx gate.Tx, c *gate.Claim, result json.RawMessage) error
}

// Failure is a definitive outcome: the claim fails with Info and the job is
// cancelled in the same transaction. Retrying cannot change it.
type Failure struct {
	Info domain.ErrorInfo
	// NothingHappened is true when the downstream answered definitively
	// that no effect was made, so a re-drive may use the next generation.
	NothingHappened bool
}

func (f *Failure) Error() string { return string(f.Info.Code) + ": " + f.Info.Message }

// Transient is a retryable error with the code to record as the claim's
// last_error.
type Transient struct {
	Info domain.ErrorInfo
	Err  error
}

func (t *Transient) Error() string { return string(t.Info.Code) + ": " + t.Info.Message }

// Unwrap returns the cause.
func (t *Transient) Unwrap() error { return t.Err }

// Fail returns a definitive *Failure.
func Fail(code domain.Code, nothingHappened bool, format string, args ...any) *Failure {
	return &Failure{Info: domain.ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}, NothingHappened: nothingHappened}
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Gate supplies the policies and the store. Required.
	Gate *gate.Gate
	// Effects maps each mutating tool to its effect. Required for every
	// tool a worker is registered for.
	Effects map[string]Effect
	// InflightTimeout is the lease (IDEMGATE_INFLIGHT_TIMEOUT) unless the
	// tool's policy overrides it.
	InflightTimeout time.Duration
	// Metrics, when set, receives the worker's series.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Runner runs claim jobs through the gate's worker steps: check, enter,
// effect, complete or fail.
type Runner struct {
	gate    *gate.Gate
	store   gate.Store
	effects map[string]Effect
	lease   time.Duration
	metrics *Metrics
	logger  *slog.Logger
}

// NewRunner returns a Runner.
func NewRunner(cfg *RunnerConfig) (*Runner, error) {
	if cfg.Gate == nil {
		return nil, errors.New("jobs: RunnerConfig.Gate is required")
	}
	if cfg.InflightTimeout <= 0 {
		return nil, errors.New("jobs: RunnerConfig.InflightTimeout must be positive")
	}
	r := &Runner{gate: cfg.Gate, store: cfg.Gate.Store(), effects: cfg.Effects, lease: cfg.InflightTimeout, metrics: cfg.Metrics, logger: cfg.Logger}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	return r, nil
}

// Lease returns the in-flight lease of tool.
func (r *Runner) Lease(tool string) time.Duration {
	if p, ok := r.gate.Policy(tool); ok && p.InflightTimeout > 0 {
		return p.InflightTimeout
	}
	return r.lease
}

// effectDeadline is how long the effect may take: well inside the lease, so
// the fenced write comes before anyone may reclaim.
func effectDeadline(lease time.Duration) time.Duration { return lease * 3 / 4 }

// JobTimeout is River's JobTimeout for a claim job under lease: below the
// lease, so a stuck effect is cancelled before anyone may reclaim.
func JobTimeout(lease time.Duration) time.Duration { return lease * 9 / 10 }

// jobHooks are the driver-specific operations on the completing transaction.
type jobHooks struct {
	complete func(ctx context.Context, tx gate.Tx) error
	cancel   func(ctx context.Context, tx gate.Tx) error
}

// jobInfo is what run needs of a River job.
type jobInfo struct {
	id, attempt, maxAttempts int
	ref                      ClaimRef
}

// run executes one job through the gate. It returns nil when the job is done
// (with or without effect), river.JobSnooze when another worker holds the
// lease, and an error for River to retry after a transient failure.
func (r *Runner) run(ctx context.Context, job jobInfo, hooks jobHooks) error {
	start := time.Now()
	result, err := r.runOnce(ctx, job, hooks)
	r.metrics.job(job.ref.Tool, result, time.Since(start))
	return err
}

// runOnce is run, also naming its result for the metrics.
func (r *Runner) runOnce(ctx context.Context, job jobInfo, hooks jobHooks) (string, error) {
	log := r.logger.With("job_id", job.id, "claim_id", job.ref.ClaimID, "tenant", job.ref.TenantID, "tool", job.ref.Tool, "key", job.ref.IdempotencyKey)
	effect, ok := r.effects[job.ref.Tool]
	if !ok {
		return "failed", river.JobCancel(fmt.Errorf("jobs: no effect registered for tool %q", job.ref.Tool))
	}
	lease := r.Lease(job.ref.Tool)

	// 1. check
	claim, err := r.store.ClaimGetByID(ctx, &gate.ClaimGetByIDParams{ID: job.ref.ClaimID})
	if errors.Is(err, domain.ErrNotFound) {
		log.Info("claim is gone (pruned or taken over); job ends without effect")
		return "no_effect", nil
	}
	if err != nil {
		return "retry", err
	}
	if claim.JobID != int64(job.id) {
		log.Info("job is not the claim's job; ends without effect", "claim_job_id", claim.JobID)
		return "no_effect", nil
	}

	// 2. enter
	claim, err = r.enter(ctx, claim, job, lease)
	switch {
	case errors.Is(err, errNoEffect):
		log.Info("claim needs no run", "status", claim.Status)
		return "no_effect", nil
	case errors.Is(err, errLeaseHeld):
		return "snoozed", river.JobSnooze(lease / 4)
	case err != nil:
		return "retry", err
	}
	log = log.With("epoch", claim.Epoch, "attempt", claim.Attempts)

	// 3. effect, outside any transaction, bounded well inside the lease.
	effectCtx, cancel := context.WithTimeout(ctx, effectDeadline(lease))
	result, err := effect.Call(effectCtx, claim)
	cancel()

	// 4./5. settle. The transactions that store the outcome run on a context
	// that the job's cancellation does not reach: committing a failure
	// cancels the job (JobCancelTx), River then cancels the running job's
	// context, and a commit waiting on that context could report an error
	// although Postgres committed. River's JobTimeout must not cut a fenced
	// write short either; the epoch keeps a late write harmless.
	ctx, cancelSettle := settleContext(ctx)
	defer cancelSettle()
	var failure *Failure
	switch {
	case err == nil:
		r.metrics.call(claim.Tool, "ok")
		return "succeeded", r.complete(ctx, claim, effect, result, hooks, log)
	case errors.As(err, &failure):
		r.metrics.call(claim.Tool, "definitive")
		return "failed", r.fail(ctx, claim, failure.Info, hooks, log)
	case job.attempt >= job.maxAttempts:
		r.metrics.call(claim.Tool, "transient")
		info := domain.ErrorInfo{Code: domain.CodeRetriesExhausted, Message: fmt.Sprintf("gave up after %d attempts: %v", job.attempt, err)}
		return "failed", r.fail(ctx, claim, info, hooks, log)
	default:
		r.metrics.call(claim.Tool, "transient")
		return "retry", r.release(ctx, claim, err, log)
	}
}

// SettleTimeout bounds the transaction that stores an outcome (complete,
// fail or release), which runs detached from the job's own cancellation.
const SettleTimeout = 30 * time.Second

// settleContext keeps ctx's values (River's client) but not its
// cancellation, bounded by SettleTimeout.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
}

var (
	errNoEffect  = errors.New("claim needs no run")
	errLeaseHeld = errors.New("lease held by a live worker")
)

// enter takes the lease in its own committed transaction, with a started
// audit row.
func (r *Runner) enter(ctx context.Context, claim *gate.Claim, job jobInfo, lease time.Duration) (*gate.Claim, error) {
	for range 2 {
		tx, err := r.store.Begin(ctx)
		if err != nil {
			return claim, err
		}
		leased, err := tx.ClaimLease(ctx, &gate.ClaimLeaseParams{ID: claim.ID, JobID: int64(job.id), Lease: lease})
		if errors.Is(err, domain.ErrLeaseUnavailable) {
			_ = tx.Rollback(ctx)
			switch {
			case leased.Status == domain.StatusSucceeded:
				return leased, errNoEffect
			case leased.Status == domain.StatusFailed:
				// An operator retried this very job (River UI): re-drive it
				// through the gate, then lease.
				if err := r.redriveFromRiverUI(ctx, leased); err != nil {
					return leased, err
				}
				continue
			case leased.LeaseLive:
				return leased, errLeaseHeld
			default:
				return leased, errNoEffect // another job's claim now
			}
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return claim, err
		}
		if err := tx.AuditInsert(ctx, r.audit(leased, domain.DecisionStarted, fmt.Sprintf("attempt %d, epoch %d", leased.Attempts, leased.Epoch), nil)); err != nil {
			_ = tx.Rollback(ctx)
			return claim, err
		}
		if err := tx.Commit(ctx); err != nil {
			return claim, err
		}
		return leased, nil
	}
	return claim, errNoEffect
}

// redriveFromRiverUI re-drives a failed claim whose own job an operator
// retried. The same downstream key is kept unless the provider answered
// definitively that nothing happened.
func (r *Runner) redriveFromRiverUI(ctx context.Context, c *gate.Claim) error {
	tx, err := r.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	next := c.Error != nil && gate.NothingHappened(c.Error.Code)
	redriven, err := tx.ClaimRedrive(ctx, &gate.ClaimRedriveParams{ID: c.ID, NextGeneration: next})
	if errors.Is(err, domain.ErrStateChanged) {
		return nil // someone else re-drove it meanwhile
	}
	if err != nil {
		return err
	}
	r.metrics.redrive()
	reason := "job retried in River UI"
	if next {
		reason += "; next generation " + redriven.DownstreamKey
	}
	ev := r.audit(redriven, domain.DecisionRedriven, reason, nil)
	ev.UserID = "riverui"
	if err := tx.AuditInsert(ctx, ev); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// complete stores the outcome: the fenced claim update first (lease lost:
// roll back, write nothing), then the domain rows, the audit row and the
// job's completion, in one transaction.
func (r *Runner) complete(ctx context.Context, claim *gate.Claim, effect Effect, result json.RawMessage, hooks jobHooks, log *slog.Logger) error {
	policy, _ := r.gate.Policy(claim.Tool)
	stored, err := policy.RedactResult(result)
	if err != nil {
		return err
	}
	tx, err := r.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	done, err := tx.ClaimComplete(ctx, &gate.ClaimCompleteParams{ID: claim.ID, Epoch: claim.Epoch, Result: stored})
	if errors.Is(err, domain.ErrLeaseLost) {
		log.Warn("lease lost before completing; writing nothing")
		return nil
	}
	if err != nil {
		return err
	}
	if err := effect.Record(ctx, tx, done, result); err != nil {
		return err
	}
	if err := tx.AuditInsert(ctx, r.audit(done, domain.DecisionSucceeded, "", stored)); err != nil {
		return err
	}
	if err := hooks.complete(ctx, tx); err != nil {
		// The epoch held, so the outcome is ours to commit even if River
		// moved the job row meanwhile (rescued, say).
		log.Warn("river did not complete the job row; committing the claim anyway", "error", err)
	}
	return tx.Commit(ctx)
}

// fail stores a definitive failure and cancels the job in one transaction.
func (r *Runner) fail(ctx context.Context, claim *gate.Claim, info domain.ErrorInfo, hooks jobHooks, log *slog.Logger) error {
	tx, err := r.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	failed, err := tx.ClaimFail(ctx, &gate.ClaimFailParams{ID: claim.ID, Epoch: claim.Epoch, Error: info})
	if errors.Is(err, domain.ErrLeaseLost) {
		log.Warn("lease lost before failing; writing nothing")
		return nil
	}
	if err != nil {
		return err
	}
	summary, _ := json.Marshal(map[string]any{"status": failed.Status, "error_code": info.Code})
	if err := tx.AuditInsert(ctx, r.audit(failed, domain.DecisionFailed, info.Message, summary)); err != nil {
		return err
	}
	if err := hooks.cancel(ctx, tx); err != nil {
		log.Warn("river did not cancel the job row; committing the failure anyway", "error", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	log.Info("operation failed", "code", info.Code)
	// JobCancelTx only marks a running job; the state changes when the
	// worker returns, so say so to River too.
	return river.JobCancel(fmt.Errorf("%s: %s", info.Code, info.Message))
}

// release hands a transient failure back to River: the claim goes back to
// queued (same epoch, lease cleared, last_error kept) and the job retries.
func (r *Runner) release(ctx context.Context, claim *gate.Claim, cause error, log *slog.Logger) error {
	info := domain.ErrorInfo{Code: "transient", Message: cause.Error()}
	var t *Transient
	if errors.As(cause, &t) {
		info = t.Info
	}
	_, err := r.store.ClaimRelease(ctx, &gate.ClaimReleaseParams{ID: claim.ID, Epoch: claim.Epoch, LastError: info})
	if errors.Is(err, domain.ErrLeaseLost) {
		log.Warn("lease lost before releasing; the new holder decides")
		return nil
	}
	if err != nil {
		log.Error("release failed; the lease will expire and the reaper reclaims", "error", err)
	}
	log.Info("transient failure; River retries", "code", info.Code, "error", cause)
	return cause
}

func (r *Runner) audit(c *gate.Claim, d domain.Decision, reason string, result json.RawMessage) *gate.AuditInsertParams {
	return &gate.AuditInsertParams{
		TenantID:       c.TenantID,
		UserID:         "worker",
		Tool:           c.Tool,
		IdempotencyKey: c.IdempotencyKey,
		OperationID:    c.OperationID,
		JobID:          c.JobID,
		Decision:       d,
		Reason:         reason,
		ArgsHash:       c.ArgsHash,
		Result:         result,
	}
}

// claimArgs is implemented by every claim job's args.
type claimArgs interface {
	river.JobArgs
	Ref() ClaimRef
}

// Worker is the River worker of one tool's claim jobs on driver TDriver.
type Worker[TDriver riverdriver.Driver[TTx], TTx any, A claimArgs] struct {
	river.WorkerDefaults[A]
	runner *Runner
}

// Timeout is River's JobTimeout for the job: below the lease.
func (w *Worker[TDriver, TTx, A]) Timeout(job *river.Job[A]) time.Duration {
	return JobTimeout(w.runner.Lease(job.Args.Ref().Tool))
}

// Work implements river.Worker.
func (w *Worker[TDriver, TTx, A]) Work(ctx context.Context, job *river.Job[A]) error {
	hooks := jobHooks{
		complete: func(ctx context.Context, tx gate.Tx) error {
			_, err := river.JobCompleteTx[TDriver](ctx, tx.Raw().(TTx), job)
			return err
		},
		cancel: func(ctx context.Context, tx gate.Tx) error {
			client, err := river.ClientFromContextSafely[TTx](ctx)
			if err != nil {
				return err
			}
			_, err = client.JobCancelTx(ctx, tx.Raw().(TTx), job.ID)
			return err
		},
	}
	return w.runner.run(ctx, jobInfo{id: int(job.ID), attempt: job.Attempt, maxAttempts: job.MaxAttempts, ref: job.Args.Ref()}, hooks)
}

// AddWorkers registers a worker for every tool of the four built-in kinds
// that has an effect.
func AddWorkers[TDriver riverdriver.Driver[TTx], TTx any](workers *river.Workers, r *Runner) error {
	adders := map[string]func() error{
		"refund_order": func() error {
			return river.AddWorkerSafely(workers, &Worker[TDriver, TTx, RefundOrderArgs]{runner: r})
		},
		"apply_credit": func() error {
			return river.AddWorkerSafely(workers, &Worker[TDriver, TTx, ApplyCreditArgs]{runner: r})
		},
		"reset_seat": func() error {
			return river.AddWorkerSafely(workers, &Worker[TDriver, TTx, ResetSeatArgs]{runner: r})
		},
		"send_password_reset": func() error {
			return river.AddWorkerSafely(workers, &Worker[TDriver, TTx, SendPasswordResetArgs]{runner: r})
		},
	}
	for tool, add := range adders {
		if _, ok := r.effects[tool]; !ok {
			return fmt.Errorf("jobs: no effect for tool %q", tool)
		}
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}
