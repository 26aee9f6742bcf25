package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/groups"
	"github.com/idemgate/idemgate/internal/vocab"
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Gate supplies the policies and the store. Required.
	Gate *core.Gate
	// Tools are the deployment's tools; the runner runs the mutations'
	// effects. Required.
	Tools *toolspec.Registry
	// InflightTimeout is the lease (IDEMGATE_INFLIGHT_TIMEOUT) unless the
	// tool's policy overrides it.
	InflightTimeout time.Duration
	// Metrics, when set, receives the worker's series.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxGroup is the most in-transaction jobs that share one transaction
	// (group commit, group.go): default DefaultMaxGroup, at most
	// MaxMaxGroup; 1 gives each its own.
	MaxGroup int
	// Groups is how many group transactions run at once: default
	// DefaultGroups; 1 where transactions wait for one another anyway
	// (SQLite's one connection), so that one group takes what queued.
	Groups int
	// Fault, nil in production, is a test's hook called at each FaultPoint
	// of every claim job; package toolkit kills jobs with it.
	Fault Fault
}

// FaultPoint names a point of a claim job where RunnerConfig.Fault is
// called.
type FaultPoint int

// The points of a claim job a Fault sees.
const (
	// FaultAfterCall: an external effect's Call returned a result; nothing
	// of it is recorded yet.
	FaultAfterCall FaultPoint = iota + 1
	// FaultBeforeCommit: inside the completing transaction, everything
	// written (an in-transaction effect's rows, the claim's fenced update,
	// an external effect's Record, the job's completion), before COMMIT.
	FaultBeforeCommit
)

// String names the point as package toolkit does.
func (p FaultPoint) String() string {
	switch p {
	case FaultAfterCall:
		return "AfterCall"
	case FaultBeforeCommit:
		return "BeforeCommit"
	}
	return fmt.Sprintf("FaultPoint(%d)", int(p))
}

// Fault is called at a point of a claim job with the claim, and at
// FaultBeforeCommit with the completing transaction (else nil). An error
// abandons the job there, as a killed process would: the runner writes
// nothing more, rolls tx back (the hook may have ended it already) and
// returns the error to River. When the transaction is a group's, the
// whole group is abandoned: its other jobs return errAbandoned.
type Fault func(ctx context.Context, at FaultPoint, c *core.Claim, tx core.Tx) error

// Runner runs claim jobs through the gate's worker steps: check, enter,
// effect, complete or fail.
type Runner struct {
	gate    *core.Gate
	store   core.Store
	tools   *toolspec.Registry
	lease   time.Duration
	metrics *Metrics
	logger  *slog.Logger
	fault   Fault
	// txGroups forms the groups of in-transaction jobs; nil: MaxGroup 1.
	txGroups *groups.Queue[*txOp]
}

// NewRunner returns a Runner.
func NewRunner(cfg *RunnerConfig) (*Runner, error) {
	if cfg.Gate == nil {
		return nil, errors.New("jobs: RunnerConfig.Gate is required")
	}
	if cfg.Tools == nil {
		return nil, errors.New("jobs: RunnerConfig.Tools is required")
	}
	if cfg.InflightTimeout <= 0 {
		return nil, errors.New("jobs: RunnerConfig.InflightTimeout must be positive")
	}
	maxGroup, groupsAtOnce := cmp.Or(cfg.MaxGroup, DefaultMaxGroup), cmp.Or(cfg.Groups, DefaultGroups)
	if maxGroup < 1 || maxGroup > MaxMaxGroup {
		return nil, fmt.Errorf("jobs: RunnerConfig.MaxGroup must be between 1 and %d", MaxMaxGroup)
	}
	if groupsAtOnce < 1 {
		return nil, errors.New("jobs: RunnerConfig.Groups must be positive")
	}
	r := &Runner{gate: cfg.Gate, store: cfg.Gate.Store(), tools: cfg.Tools, lease: cfg.InflightTimeout, metrics: cfg.Metrics, logger: cfg.Logger, fault: cfg.Fault}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if maxGroup > 1 {
		r.txGroups = &groups.Queue[*txOp]{Max: maxGroup, Runners: groupsAtOnce, Share: true, Do: r.runGroup}
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

// jobInfo is what run needs of a River job.
type jobInfo struct {
	id, attempt, maxAttempts int
	ref                      ClaimRef
}

// run executes one job through the gate. It returns nil when the job is done
// (with or without effect), river.JobSnooze when another worker holds the
// lease, and an error for River to retry after a transient failure.
func (r *Runner) run(ctx context.Context, job jobInfo, hooks core.JobHooks) error {
	start := time.Now()
	result, err := r.runOnce(ctx, job, hooks)
	r.metrics.job(job.ref.Tool, result, time.Since(start))
	return err
}

// runOnce is run, also naming its result for the metrics.
func (r *Runner) runOnce(ctx context.Context, job jobInfo, hooks core.JobHooks) (string, error) {
	log := r.logger.With("job_id", job.id, "operation_id", job.ref.OperationID, "tenant", job.ref.TenantID, "tool", job.ref.Tool, "key", job.ref.IdempotencyKey)
	spec, ok := r.tools.Get(job.ref.Tool)
	if !ok || !spec.Mutating {
		return "failed", river.JobCancel(fmt.Errorf("jobs: no mutating tool %q is registered", job.ref.Tool))
	}
	lease := r.Lease(job.ref.Tool)

	// The job carries its claim's tenant and operation: the lease (or,
	// in a transaction, the lock) is the check, and the claim is read only
	// when it matches no row, to tell why.
	params := &core.LeaseParams{Claim: &core.Claim{OperationID: job.ref.OperationID, TenantID: job.ref.TenantID,
		Tool: job.ref.Tool, IdempotencyKey: job.ref.IdempotencyKey}, JobID: int64(job.id), Lease: lease}
	if spec.InTx {
		return r.runInTx(ctx, params, spec, job, hooks, log)
	}

	// 2. enter
	claim, err := r.gate.Enter(ctx, params)
	if err != nil {
		return notLeased(ctx, claim, err, lease, log)
	}
	log = log.With("epoch", claim.Epoch, "attempt", claim.Attempts)

	// 3. effect, outside any transaction, bounded well inside the lease.
	effectCtx, cancel := context.WithTimeout(ctx, effectDeadline(lease))
	result, err := spec.Effect.Call(effectCtx, claim)
	cancel()
	if err == nil && r.fault != nil {
		if ferr := r.fault(ctx, FaultAfterCall, claim, nil); ferr != nil {
			return "abandoned", ferr
		}
	}

	// 4./5. settle. The transactions that store the outcome run on a context
	// that the job's cancellation does not reach: committing a failure
	// cancels the job (JobCancelTx), River then cancels the running job's
	// context, and a commit waiting on that context could report an error
	// although Postgres committed. River's JobTimeout must not cut a fenced
	// write short either; the epoch keeps a late write harmless.
	ctx, cancelSettle := settleContext(ctx)
	defer cancelSettle()
	if err == nil {
		r.metrics.call(spec.Provider, "ok")
		return "succeeded", r.complete(ctx, claim, spec, nil, result, hooks, log)
	}
	info, failed := r.verdict(err, job, spec.Provider)
	if failed {
		return "failed", r.fail(ctx, claim, info, hooks, log)
	}
	return "retry", r.release(ctx, claim, info, err, log)
}

// notLeased names what a job does when it could not take the lease:
// nothing (the claim needs no run), snooze (a live lease elsewhere), or
// retry (an error).
func notLeased(ctx context.Context, claim *core.Claim, err error, lease time.Duration, log *slog.Logger) (string, error) {
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		log.InfoContext(ctx, "claim is gone (pruned or taken over); job ends without effect")
		return "no_effect", nil
	case errors.Is(err, core.ErrNoRun):
		// Succeeded, or another job's claim now.
		log.InfoContext(ctx, "claim needs no run by this job", "status", claim.Status, "claim_job_id", claim.JobID)
		return "no_effect", nil
	case errors.Is(err, core.ErrLeaseHeld):
		return "snoozed", river.JobSnooze(lease / 4)
	case errors.Is(err, core.ErrRedriveCancelled):
		// An operator retried, in River UI, the job of an operation its
		// owner cancelled: the gate refused the re-drive (with a denied
		// audit row) and the job is cancelled again, the refusal as its
		// error, where River UI shows it.
		log.WarnContext(ctx, "re-drive of a cancelled operation refused", "error", err)
		return "refused", river.JobCancel(err)
	}
	return "retry", err
}

// verdict reads an effect's error for the operation: failed (definitive,
// or the last attempt's transient error, as retries_exhausted) or to be
// retried, with the error to record; it counts the call.
func (r *Runner) verdict(err error, job jobInfo, provider string) (vocab.ErrorInfo, bool) {
	info, definitive := classify(err)
	switch {
	case definitive:
		r.metrics.call(provider, "definitive")
		return info, true
	case job.attempt >= job.maxAttempts:
		r.metrics.call(provider, "transient")
		return vocab.ErrorInfo{Code: vocab.CodeRetriesExhausted, Message: fmt.Sprintf("gave up after %d attempts: %v", job.attempt, err)}, true
	}
	r.metrics.call(provider, "transient")
	return info, false
}

// classify reads an effect's error: a definitive *toolspec.Error fails the
// operation with its code; anything else is transient.
func classify(err error) (vocab.ErrorInfo, bool) {
	te, ok := toolspec.AsError(err)
	if !ok {
		return vocab.ErrorInfo{Code: "transient", Message: err.Error()}, false
	}
	info := te.Info
	info.NothingHappened = te.Outcome == toolspec.OutcomeNothingHappened
	if te.Outcome == toolspec.OutcomeUnknown {
		info.Code = vocab.CodeOutcomeUnknown
	}
	return info, te.Definitive()
}

// runInTx runs an in-transaction effect: one transaction locks the claim,
// runs the effect, takes the lease and stores the result in one fenced
// write with its audit row, and completes the job. Nothing is committed
// before, so nothing can happen twice: a worker killed mid-way leaves the
// claim as it was. The transaction is a group's, shared with the
// process's other in-transaction jobs (group.go): a failed effect is
// undone and recorded after the group, and a job that fails there in
// another way runs alone.
func (r *Runner) runInTx(ctx context.Context, params *core.LeaseParams, spec *toolspec.Spec, job jobInfo, hooks core.JobHooks, log *slog.Logger) (string, error) {
	if r.txGroups != nil {
		if result, err := r.runGrouped(ctx, params, spec, job, hooks, log); !errors.Is(err, errAlone) {
			return result, err
		}
	}
	return r.runAlone(ctx, params, spec, job, hooks, log)
}

// runAlone is runInTx in a transaction of the job's own. A failed effect
// rolls back, and a second transaction records the failure (definitive)
// or the attempt (transient).
func (r *Runner) runAlone(ctx context.Context, params *core.LeaseParams, spec *toolspec.Spec, job jobInfo, hooks core.JobHooks, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectDeadline(params.Lease))
	defer cancel()
	tx, locked, err := r.gate.LockTx(ctx, params)
	if err != nil {
		return notLeased(ctx, locked, err, params.Lease, log)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a panicking effect's too
	log = log.With("epoch", locked.Epoch, "attempt", locked.Attempts+1)
	ttx, err := toolspec.WrapTx(tx)
	if err != nil {
		_ = tx.Rollback(ctx)
		return "retry", err
	}
	result, err := spec.Effect.Apply(ctx, ttx, locked)
	if err == nil {
		r.metrics.call(spec.Provider, "ok")
		return "succeeded", r.complete(ctx, locked, spec, tx, result, hooks, log)
	}
	_ = tx.Rollback(ctx)
	return r.effectFailed(ctx, params, locked, spec, job, hooks, err, log)
}

// effectFailed records the failure (definitive) or the attempt
// (transient) of an in-transaction effect on the claim as locked, whose
// transaction rolled back.
func (r *Runner) effectFailed(ctx context.Context, params *core.LeaseParams, locked *core.Claim, spec *toolspec.Spec, job jobInfo, hooks core.JobHooks, err error, log *slog.Logger) (string, error) {
	info, failed := r.verdict(err, job, spec.Provider)
	// The attempt rolled back: take the lease, committed, to record it
	// (attempts, last_error) or the failure.
	params.Claim = locked
	entered, enterErr := r.gate.Enter(ctx, params)
	if enterErr != nil {
		log.InfoContext(ctx, "claim changed before the attempt's outcome was stored; the new holder decides", "error", enterErr)
		if failed {
			return "no_effect", nil
		}
		return "retry", err
	}
	if failed {
		return "failed", r.fail(ctx, entered, info, hooks, log)
	}
	return "retry", r.release(ctx, entered, info, err, log)
}

// SettleTimeout bounds the transaction that stores an outcome (complete,
// fail or release), which runs detached from the job's own cancellation.
const SettleTimeout = 30 * time.Second

// settleContext keeps ctx's values (River's client) but not its
// cancellation, bounded by SettleTimeout.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
}

// complete stores the outcome through the gate (EventComplete): tx when an
// in-transaction effect already runs in it, else a new one; an external
// effect's domain rows are recorded in the same transaction.
func (r *Runner) complete(ctx context.Context, claim *core.Claim, spec *toolspec.Spec, tx core.Tx, result json.RawMessage, hooks core.JobHooks, log *slog.Logger) error {
	stored, err := spec.Policy.RedactResult(result)
	if err != nil {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		return err
	}
	p := &core.CompleteParams{Tx: tx, Locked: spec.InTx, Claim: claim, Result: stored, Job: r.beforeCommit(claim, hooks)}
	if !spec.InTx {
		p.Record = func(ctx context.Context, tx core.Tx, done *core.Claim) error {
			ttx, err := toolspec.WrapTx(tx)
			if err != nil {
				return err
			}
			return spec.Effect.Record(ctx, ttx, done, result)
		}
	}
	_, err = r.gate.Complete(ctx, p)
	if errors.Is(err, vocab.ErrLeaseLost) {
		log.WarnContext(ctx, "lease lost before completing; writing nothing")
		return nil
	}
	if err == nil {
		if spec.InTx {
			r.metrics.group(1)
		}
		log.DebugContext(ctx, "operation succeeded")
	}
	return err
}

// beforeCommit is hooks with the fault, when there is one, called after
// the job's completion in the completing transaction: the last write
// before COMMIT. A fault's error rolls the transaction back, so that the
// gate's commit fails and nothing is written.
func (r *Runner) beforeCommit(claim *core.Claim, hooks core.JobHooks) core.JobHooks {
	if r.fault == nil {
		return hooks
	}
	complete := hooks.Complete
	hooks.Complete = func(ctx context.Context, tx core.Tx) error {
		if err := complete(ctx, tx); err != nil {
			return err
		}
		if err := r.fault(ctx, FaultBeforeCommit, claim, tx); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return nil
	}
	return hooks
}

// fail stores a definitive failure and cancels the job through the gate
// (EventFail).
func (r *Runner) fail(ctx context.Context, claim *core.Claim, info vocab.ErrorInfo, hooks core.JobHooks, log *slog.Logger) error {
	_, err := r.gate.Fail(ctx, claim, info, hooks)
	if errors.Is(err, vocab.ErrLeaseLost) {
		log.WarnContext(ctx, "lease lost before failing; writing nothing")
		return nil
	}
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "operation failed", "code", info.Code)
	// JobCancelTx only marks a running job; the state changes when the
	// worker returns, so say so to River too.
	return river.JobCancel(fmt.Errorf("%s: %s", info.Code, info.Message))
}

// release hands a transient failure back to River through the gate
// (EventRelease): the claim goes back to queued and the job retries.
func (r *Runner) release(ctx context.Context, claim *core.Claim, info vocab.ErrorInfo, cause error, log *slog.Logger) error {
	_, err := r.gate.Release(ctx, claim, info)
	if errors.Is(err, vocab.ErrLeaseLost) {
		log.WarnContext(ctx, "lease lost before releasing; the new holder decides")
		return nil
	}
	if err != nil {
		log.ErrorContext(ctx, "release failed; the lease will expire and the reaper reclaims", "error", err)
	}
	log.InfoContext(ctx, "transient failure; River retries", "code", info.Code, "error", cause)
	return cause
}

// Worker is the River worker of claim jobs on driver TDriver.
type Worker[TDriver riverdriver.Driver[TTx], TTx any] struct {
	river.WorkerDefaults[ClaimArgs]
	runner *Runner
}

// Timeout is River's JobTimeout for the job: below the lease.
func (w *Worker[TDriver, TTx]) Timeout(job *river.Job[ClaimArgs]) time.Duration {
	return JobTimeout(w.runner.Lease(job.Args.Tool))
}

// Work implements river.Worker.
func (w *Worker[TDriver, TTx]) Work(ctx context.Context, job *river.Job[ClaimArgs]) error {
	hooks := core.JobHooks{
		Complete: func(ctx context.Context, tx core.Tx) error {
			dtx, err := driverTx[TTx](tx)
			if err != nil {
				return err
			}
			_, err = river.JobCompleteTx[TDriver](ctx, dtx, job)
			return err
		},
		Cancel: func(ctx context.Context, tx core.Tx) error {
			client, err := river.ClientFromContextSafely[TTx](ctx)
			if err != nil {
				return err
			}
			dtx, err := driverTx[TTx](tx)
			if err != nil {
				return err
			}
			_, err = client.JobCancelTx(ctx, dtx, job.ID)
			return err
		},
	}
	return w.runner.run(ctx, jobInfo{id: int(job.ID), attempt: job.Attempt, maxAttempts: job.MaxAttempts, ref: job.Args.ClaimRef}, hooks)
}

// AddWorkers registers a River worker for every mutating tool of the
// runner's registry, under the tool's kind (Kind of its name).
func AddWorkers[TDriver riverdriver.Driver[TTx], TTx any](workers *river.Workers, r *Runner) error {
	for _, spec := range r.tools.Mutations() {
		if err := addWorker(workers, Kind(spec.Name), &Worker[TDriver, TTx]{runner: r}); err != nil {
			return err
		}
	}
	return nil
}

// addWorker registers w for the kind: river.AddWorkerArgs takes the kind
// from an args value, which is how one args type serves every tool. It
// panics on a duplicate kind; that becomes an error here.
func addWorker(workers *river.Workers, kind string, w river.Worker[ClaimArgs]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("jobs: worker for %s: %v", kind, p)
		}
	}()
	river.AddWorkerArgs(workers, ClaimArgs{kind: kind}, w)
	return nil
}
