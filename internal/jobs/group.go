package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// Group commit of in-transaction operations: the in-transaction jobs of
// one worker process that run at once share transactions (core.WorkTx).
// Jobs queue; up to RunnerConfig.Groups groups run at once, and a runner
// free takes its share of what queued, at most RunnerConfig.MaxGroup jobs.
// Nobody waits for a group to fill: a lone job is a group of one, with the
// statements it has alone. In a group each job in turn locks its claim,
// runs its effect and stores its outcome with its job's completion, under
// a savepoint from the second job on. A job that fails there is undone to
// its savepoint and leaves the group; once the group has ended, a failed
// effect is recorded as alone (effectFailed), and a job that failed in
// any other way (its claim not to be had, a panic) runs alone (runAlone).
// One COMMIT stores the rest. A group whose transaction fails (its COMMIT
// too) keeps nothing, and each of its jobs runs alone. External effects
// are never grouped: their lease is committed before they run.

// DefaultMaxGroup is the default RunnerConfig.MaxGroup.
const DefaultMaxGroup = 32

// MaxMaxGroup bounds RunnerConfig.MaxGroup: every job of a group after
// the first writes in a savepoint, a subtransaction with an id of its
// own, and a Postgres backend keeps 64 of them in shared memory before
// every snapshot in the cluster gets costlier.
const MaxMaxGroup = 64

// DefaultGroups is the default RunnerConfig.Groups. Four beat both fewer
// (a group's statements run one after another) and more (groups of one,
// and more transactions contending for two cores) in the drain benchmark
// (docs/benchmarks.md).
const DefaultGroups = 4

// errAlone is runGrouped's answer for a job that runs alone.
var errAlone = errors.New("jobs: the job runs alone")

// errAbandoned is what the other jobs of a group return when a fault
// killed its transaction (as a killed process's jobs would end): they
// wrote nothing, and River runs them again.
var errAbandoned = errors.New("jobs: abandoned: a fault killed the transaction of its group")

// txOp is one in-transaction job in its group.
type txOp struct {
	// ctx is the job's context without its cancellation; deadline is its
	// transaction's deadline (effectDeadline), from the job's arrival.
	ctx      context.Context
	deadline time.Time
	params   *core.LeaseParams
	spec     *toolspec.Spec
	hooks    core.JobHooks
	log      *slog.Logger

	// done is closed when the group has ended. Then claim is the job's
	// committed claim; or killed the error a fault ended its group with;
	// or effectErr its effect's error, on the claim as locked; with none,
	// the job runs alone.
	done      chan struct{}
	claim     *core.Claim
	killed    error
	locked    *core.Claim
	effectErr error
}

// effectError is an effect's own error in a group.
type effectError struct {
	locked *core.Claim
	err    error
}

func (e *effectError) Error() string { return e.err.Error() }

// killedError is a fault's error, which abandons the whole group.
type killedError struct{ err error }

func (e *killedError) Error() string { return e.err.Error() }

// runGrouped runs the job in the next group: "succeeded" once committed,
// or errAlone when it must run alone.
func (r *Runner) runGrouped(ctx context.Context, params *core.LeaseParams, spec *toolspec.Spec, job jobInfo, hooks core.JobHooks, log *slog.Logger) (string, error) {
	op := &txOp{ctx: context.WithoutCancel(ctx), deadline: time.Now().Add(effectDeadline(params.Lease)),
		params: params, spec: spec, hooks: hooks, log: log, done: make(chan struct{})}
	r.txGroups.Add(op)
	<-op.done
	switch {
	case op.claim != nil:
		r.metrics.call(spec.Provider, "ok")
		log.DebugContext(ctx, "operation succeeded", "epoch", op.claim.Epoch, "attempt", op.claim.Attempts)
		return "succeeded", nil
	case op.killed != nil:
		return "abandoned", op.killed
	case op.effectErr != nil:
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectDeadline(params.Lease))
		defer cancel()
		log = log.With("epoch", op.locked.Epoch, "attempt", op.locked.Attempts+1)
		return r.effectFailed(ctx, params, op.locked, spec, job, hooks, op.effectErr, log)
	}
	return "", errAlone
}

// runGroup runs one group in one transaction and sets each job's outcome.
func (r *Runner) runGroup(ops []*txOp) {
	defer func() {
		for _, op := range ops {
			close(op.done)
		}
	}()
	deadline := ops[0].deadline
	for _, op := range ops[1:] {
		if op.deadline.Before(deadline) {
			deadline = op.deadline
		}
	}
	// The group's own statements (BEGIN, savepoints, COMMIT) carry the
	// first job's values (its trace); nobody's cancellation ends them.
	gctx, cancel := context.WithDeadline(ops[0].ctx, deadline)
	defer cancel()
	w := r.gate.BeginWork()
	defer func() { _ = w.Rollback(gctx) }()
	var kept []int // the ops kept, in order
	for i, op := range ops {
		if err := w.Mark(gctx); err != nil {
			if errors.Is(err, core.ErrNoSavepoints) {
				continue // alone, after the group
			}
			r.logger.WarnContext(gctx, "a group's transaction failed; each of its jobs runs alone", "jobs", len(ops), "error", err)
			clearEffectErrors(ops)
			return
		}
		err := r.applyOp(w, op, deadline)
		var (
			killed    *killedError
			effectErr *effectError
		)
		switch {
		case err == nil:
			w.Keep()
			kept = append(kept, i)
			continue
		case errors.As(err, &effectErr):
			op.locked, op.effectErr = effectErr.locked, effectErr.err
		case errors.As(err, &killed):
			// As a killed process: nothing of the group commits (the
			// deferred rollback), and every job of it ends.
			for _, o := range ops {
				o.killed = errAbandoned
			}
			op.killed = killed.err
			return
		}
		op.log.DebugContext(gctx, "operation leaves its group", "error", err)
		if err := w.Undo(gctx); err != nil {
			r.logger.WarnContext(gctx, "a group's transaction failed; each of its jobs runs alone", "jobs", len(ops), "error", err)
			clearEffectErrors(ops)
			return
		}
	}
	if w.Kept() == 0 {
		return
	}
	if err := w.Commit(gctx); err != nil {
		r.logger.WarnContext(gctx, "a group's commit failed; each of its jobs runs alone", "jobs", len(ops), "error", err)
		clearEffectErrors(ops)
		return
	}
	r.metrics.group(w.Kept())
	for j, claim := range w.Committed() {
		ops[kept[j]].claim = claim
	}
}

// clearEffectErrors has every job of a failed group run alone, those whose
// effect failed in it too: the failure may have been the group's.
func clearEffectErrors(ops []*txOp) {
	for _, op := range ops {
		op.locked, op.effectErr = nil, nil
	}
}

// applyOp runs one job of a group in w, after its Mark: lock, effect,
// outcome with the job's completion, and the fault's BeforeCommit point.
// Any error but a fault's (killedError) undoes only this job; an effect's
// own error is an effectError.
func (r *Runner) applyOp(w *core.WorkTx, op *txOp, deadline time.Time) (err error) {
	defer func() {
		if p := recover(); p != nil { // it panics again alone, in River's goroutine
			err = fmt.Errorf("jobs: the effect panicked: %v", p)
		}
	}()
	ctx, cancel := context.WithDeadline(op.ctx, deadline)
	defer cancel()
	locked, err := w.Lock(ctx, op.params)
	if err != nil {
		return err // runAlone tells why
	}
	ttx, err := toolspec.WrapTx(w.Tx())
	if err != nil {
		return err
	}
	result, err := op.spec.Effect.Apply(ctx, ttx, locked)
	if err != nil {
		return &effectError{locked: locked, err: err}
	}
	stored, err := op.spec.Policy.RedactResult(result)
	if err != nil {
		return err
	}
	if err := w.Apply(ctx, locked, stored, op.hooks); err != nil {
		return err
	}
	if r.fault != nil {
		// The fault sees the claim's completion written, as alone.
		if err := w.Flush(ctx); err != nil {
			return err
		}
		if err := r.fault(ctx, FaultBeforeCommit, locked, w.Tx()); err != nil {
			return &killedError{err}
		}
	}
	return nil
}
