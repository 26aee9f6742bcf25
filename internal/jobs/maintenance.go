package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgate/idemgate/internal/core"
	pubjobs "github.com/idemgate/idemgate/jobs"
)

// MaintenanceQueue is the queue of the reaper's and the pruner's jobs, apart
// from the claim jobs so that a backlog of claims never delays the reaper.
const MaintenanceQueue = pubjobs.MaintenanceQueue

// DefaultPruneInterval is how often the pruner runs.
const DefaultPruneInterval = time.Minute

// pruneMaxBatches bounds one pruner run (core.PruneBatch rows each).
const pruneMaxBatches = 100

// Control is core.JobControl on a River client whose transactions are TTx.
type Control[TTx any] struct {
	Client *river.Client[TTx]
}

func (c *Control[TTx]) rawTx(tx core.Tx) (TTx, error) { return driverTx[TTx](tx) }

// JobCancelTx implements core.JobControl. A job River no longer has is
// fine: there is nothing to cancel.
func (c *Control[TTx]) JobCancelTx(ctx context.Context, tx core.Tx, jobID int64) error {
	raw, err := c.rawTx(tx)
	if err != nil {
		return err
	}
	_, err = c.Client.JobCancelTx(ctx, raw, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil
	}
	return err
}

// JobMarkCancelledTx implements core.JobControl with River's JobUpdateTx:
// the mark becomes the job's output, which River UI shows.
func (c *Control[TTx]) JobMarkCancelledTx(ctx context.Context, tx core.Tx, jobID int64, mark *core.CancelMark) error {
	raw, err := c.rawTx(tx)
	if err != nil {
		return err
	}
	_, err = c.Client.JobUpdateTx(ctx, raw, jobID, &river.JobUpdateParams{Output: mark})
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil
	}
	return err
}

// JobRetryTx implements core.JobControl. It reports false, and leaves the
// job alone, when River no longer has the job, will not run it again (still
// running), or was asked to cancel it: the worker that failed the claim
// cancelled its own job with JobCancelTx, and River's producer may deliver
// that cancellation late, to a retried job of the same id, which would then
// be cancelled before it takes the lease. The gate gives such a claim a
// fresh job instead.
func (c *Control[TTx]) JobRetryTx(ctx context.Context, tx core.Tx, jobID int64) (bool, error) {
	raw, err := c.rawTx(tx)
	if err != nil {
		return false, err
	}
	job, err := c.Client.JobGetTx(ctx, raw, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !retryable(job) {
		return false, nil
	}
	if job, err = c.Client.JobRetryTx(ctx, raw, jobID); err != nil {
		return false, err
	}
	return job.State != rivertype.JobStateRunning, nil
}

// JobRetryable reports whether JobRetryTx would retry the job itself (a
// re-drive's dry run says so); false means a fresh job would replace it.
func (c *Control[TTx]) JobRetryable(ctx context.Context, jobID int64) (bool, error) {
	job, err := c.Client.JobGet(ctx, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return retryable(job), nil
}

// JobClaim returns the tenant, tool and key of the operation a claim job
// runs (its ClaimRef); ok is false for another kind of job, or one River
// no longer has. The operator routes use it (ops.JobClaims).
func (c *Control[TTx]) JobClaim(ctx context.Context, jobID int64) (tenantID, tool, key string, ok bool, err error) {
	job, err := c.Client.JobGet(ctx, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return "", "", "", false, nil
	}
	if err != nil {
		return "", "", "", false, err
	}
	var ref ClaimRef
	if json.Unmarshal(job.EncodedArgs, &ref) != nil || ref.TenantID == "" || ref.Tool == "" || ref.IdempotencyKey == "" ||
		job.Kind != Kind(ref.Tool) {
		return "", "", "", false, nil
	}
	return ref.TenantID, ref.Tool, ref.IdempotencyKey, true, nil
}

// retryable: River would run the job again, and no cancellation of it was
// requested. A running job is left alone by River's JobRetry: its worker has
// returned (the claim failed) but River has not finalized the row yet.
func retryable(job *rivertype.JobRow) bool {
	if job.State == rivertype.JobStateRunning {
		return false
	}
	var meta struct {
		CancelAttemptedAt *time.Time `json:"cancel_attempted_at"`
	}
	if err := json.Unmarshal(job.Metadata, &meta); err != nil {
		return false
	}
	return meta.CancelAttemptedAt == nil
}

// ReaperArgs is the reaper's periodic job.
type ReaperArgs struct{}

// Kind implements river.JobArgs.
func (ReaperArgs) Kind() string { return Kind("reaper") }

// InsertOpts keeps one reaper job at a time.
func (ReaperArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: MaintenanceQueue, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// PrunerArgs is the pruner's periodic job.
type PrunerArgs struct{}

// Kind implements river.JobArgs.
func (PrunerArgs) Kind() string { return Kind("pruner") }

// InsertOpts keeps one pruner job at a time.
func (PrunerArgs) InsertOpts() river.InsertOpts { return ReaperArgs{}.InsertOpts() }

// ReaperWorker runs gate.Reap.
type ReaperWorker struct {
	river.WorkerDefaults[ReaperArgs]
	Gate    *core.Gate
	Control core.JobControl
	Logger  *slog.Logger
	// StaleAfter is how long a job may stay running before its queued
	// claim is given a fresh one: the in-flight lease.
	StaleAfter time.Duration
}

// Work implements river.Worker.
func (w *ReaperWorker) Work(ctx context.Context, _ *river.Job[ReaperArgs]) error {
	return w.Reap(ctx)
}

// Reap runs one reaper pass (gate.Reap) and logs what it did: the reaper
// job's work, and what KeepReaping runs in every worker process. Passes may
// overlap (two processes, or a pass and the job): every write they make is
// conditional on the claim's epoch and job.
func (w *ReaperWorker) Reap(ctx context.Context) error {
	res, err := w.Gate.Reap(ctx, w.Control, w.StaleAfter)
	if res != nil && (res.Reclaimed+res.GaveUp+res.Abandoned+res.Repointed > 0) {
		w.Logger.InfoContext(ctx, "reaper", string(core.EventReclaim), res.Reclaimed, string(core.EventRepoint), res.Repointed,
			string(core.EventGiveUp), res.GaveUp, string(core.EventAbandon), res.Abandoned)
	}
	// Operations whose approval window ended fail approval_expired: no
	// job exists for them, so nothing else would.
	expired, expErr := w.Gate.ExpireApprovals(ctx, &core.ExpireApprovalsParams{})
	if expired > 0 {
		w.Logger.InfoContext(ctx, "reaper", string(core.EventApprovalExpire), expired)
	}
	return errors.Join(err, expErr)
}

// PrunerWorker runs gate.Prune.
type PrunerWorker struct {
	river.WorkerDefaults[PrunerArgs]
	Gate   *core.Gate
	Logger *slog.Logger
}

// Work implements river.Worker.
func (w *PrunerWorker) Work(ctx context.Context, _ *river.Job[PrunerArgs]) error {
	n, err := w.Gate.Prune(ctx, pruneMaxBatches)
	if n > 0 {
		w.Logger.InfoContext(ctx, "pruner", "deleted", n)
	}
	return err
}

// PeriodicJobs are the reaper (every reaperInterval) and the pruner; River
// runs periodic jobs on the elected leader only.
func PeriodicJobs(reaperInterval, pruneInterval time.Duration) []*river.PeriodicJob {
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(reaperInterval), func() (river.JobArgs, *river.InsertOpts) {
			return ReaperArgs{}, nil
		}, &river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(pruneInterval), func() (river.JobArgs, *river.InsertOpts) {
			return PrunerArgs{}, nil
		}, &river.PeriodicJobOpts{RunOnStart: true}),
	}
}

// KeepReaping runs a reaper pass (reap) in this process every interval
// until ctx ends, besides River's periodic reaper job. River runs periodic
// jobs on its elected leader only, a new leader is elected only after
// River's leadership TTL (about 15s in v0.51, not configurable), and the
// reaper job is unique while one is pending or running: a worker killed
// while it ran the reaper job left that job running until River's rescuer,
// on the leader and every 30s, found it stuck past RescueStuckJobsAfter and
// set it retryable with River's backoff, and no process could insert
// another meanwhile (the chaos runs' unexplained reaper gaps of 37-63s).
// Reaping in every process, outside any job, goes on within one interval
// whoever dies and whatever River's jobs are doing.
func KeepReaping(ctx context.Context, reap func(context.Context) error, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := reap(ctx); err != nil && ctx.Err() == nil {
				logger.WarnContext(ctx, "reaper: a pass failed; the next runs in one interval", "error", err)
			}
		}
	}
}
