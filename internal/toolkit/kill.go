package toolkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// KillPoint is a point of an effect where KillNext kills the worker.
type KillPoint = jobs.FaultPoint

// The points a worker can be killed at.
const (
	// AfterCall: an external effect's Call returned (the provider acted);
	// nothing of it is recorded. External (Call) tools only.
	AfterCall = jobs.FaultAfterCall
	// BeforeCommit: inside the completing transaction, after the effect's
	// writes (InTx, or Call's Record) and the claim's and the job's
	// completion, before COMMIT. Both kinds of tool.
	BeforeCommit = jobs.FaultBeforeCommit
)

// errKilled is what a killed job's goroutine returns to River once the
// harness has recovered its claim; it has written nothing.
var errKilled = errors.New("gatetest: the worker was killed here")

// kill is one armed kill, and what became of it.
type kill struct {
	tool string
	at   KillPoint
	// fired is closed when the job was killed; claim is the claim it held.
	fired chan struct{}
	claim *core.Claim
	// done is closed when the harness has run the reaper for it; left is
	// what the killed job left (read before the clock moved) and err the
	// recovery's error.
	done chan struct{}
	left left
	err  error
}

// left is what a killed job left behind.
type left struct {
	status    vocab.Status
	leaseLive bool
	jobState  string
}

// KillNext kills the next run of toolName's effect at the point at, as
// SIGKILL kills a worker process there: its transaction rolls back,
// nothing after the point runs, and its River job stays running with the
// claim's lease held (an in-transaction tool's claim stays queued: its
// lock rolled back). The harness then does what time and the reaper do
// to a dead worker's claim: it moves the lease past its expiry (for a
// queued claim, its job's start past the lease) and runs a pass of the
// worker's reaper, which gives the claim a fresh job; the effect runs
// again with the same downstream key. The killed job's goroutine ends,
// writing nothing, once the reaper pass ran (its River job is cancelled),
// so that it does not hold a worker slot for the rest of the test. The
// other in-transaction jobs of its group, if it ran in one (the worker's
// group commit), roll back with it and return an error: River runs them
// again.
//
// It panics when toolName is not a mutation of the harness, or at is
// AfterCall and the tool is in-transaction: a mistake in the test.
func (h *Harness) KillNext(toolName string, at KillPoint) { h.armKill(toolName, at) }

// killPoints are the points at which toolName's effect can be killed.
func (h *Harness) killPoints(t testing.TB, toolName string) []KillPoint {
	t.Helper()
	spec := h.mutation(toolName)
	require.NotNil(t, spec, "%s is not a mutation of the harness", toolName)
	if spec.InTx {
		return []KillPoint{BeforeCommit}
	}
	return []KillPoint{AfterCall, BeforeCommit}
}

func (h *Harness) mutation(toolName string) *toolspec.Spec {
	spec, ok := h.specs.Get(toolName)
	if !ok || !spec.Mutating {
		return nil
	}
	return spec
}

func (h *Harness) armKill(toolName string, at KillPoint) *kill {
	spec := h.mutation(toolName)
	switch {
	case spec == nil:
		panic(fmt.Sprintf("gatetest: KillNext: %q is not a mutation of the harness", toolName))
	case at != AfterCall && at != BeforeCommit:
		panic(fmt.Sprintf("gatetest: KillNext: no kill point %v", at))
	case at == AfterCall && spec.InTx:
		panic(fmt.Sprintf("gatetest: KillNext: %s is in-transaction: AfterCall applies to external (Call) tools", toolName))
	}
	k := &kill{tool: toolName, at: at, fired: make(chan struct{}), done: make(chan struct{})}
	h.faults.mu.Lock()
	defer h.faults.mu.Unlock()
	if h.faults.kills == nil {
		h.faults.kills = map[string]*kill{}
	}
	h.faults.kills[toolName] = k
	return k
}

// takeKill returns the kill armed for tool at the point, disarming it.
func (f *faults) takeKill(toolName string, at KillPoint) *kill {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.kills[toolName]
	if k == nil || k.at != at {
		return nil
	}
	delete(f.kills, toolName)
	return k
}

// fault is the worker's jobs.Fault: it kills an armed job at its point.
// The goroutine rolls the transaction back (a killed process's connection
// drops), and waits, doing nothing, until the harness has run the reaper
// for the claim; then it returns errKilled, and the runner writes nothing.
func (h *Harness) fault(ctx context.Context, at jobs.FaultPoint, c *core.Claim, tx core.Tx) error {
	k := h.faults.takeKill(c.Tool, at)
	if k == nil {
		return nil
	}
	if tx != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
	k.claim = c
	close(k.fired)
	go h.recoverKilled(k)
	<-k.done
	return errKilled
}

// recoverKilled does to a killed job's claim what time and the reaper do:
// it reads what the job left, ends the claim's lease (a queued claim's
// job started longer than the lease ago) and runs a reaper pass. Each
// step is retried while it fails (SQLite's one writer busy under load).
func (h *Harness) recoverKilled(k *kill) {
	defer close(k.done)
	ctx, cancel := context.WithTimeout(context.Background(), AwaitTimeout)
	defer cancel()
	store := h.gate.Store()
	var c *core.Claim
	k.err = retry(ctx, "read the claim", func() (err error) {
		c, err = store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: k.claim.TenantID, OperationID: k.claim.OperationID})
		return err
	})
	if k.err != nil {
		return
	}
	var job *core.Job
	if k.err = retry(ctx, "read the job", func() (err error) {
		job, err = store.JobGet(ctx, &core.JobGetParams{ID: c.JobID})
		return err
	}); k.err != nil {
		return
	}
	k.left = left{status: c.Status, leaseLive: c.LeaseLive, jobState: job.State}
	now := time.Now()
	if k.err = retry(ctx, "move the clock", func() error {
		switch c.Status {
		case vocab.StatusRunning:
			return h.exec(ctx, `UPDATE idempotency_claims SET lease_expires_at = $1 WHERE id = $2 AND status = 'running'`,
				h.dbTime(now.Add(-time.Second)), c.ID)
		case vocab.StatusQueued:
			return h.exec(ctx, `UPDATE river_job SET attempted_at = $1 WHERE id = $2 AND state = 'running'`,
				h.dbTime(now.Add(-h.lease-time.Second)), c.JobID)
		}
		return nil
	}); k.err != nil {
		return
	}
	k.err = retry(ctx, "reap", func() error {
		_, err := h.reap(ctx)
		return err
	})
}

// retry runs fn until it succeeds or ctx ends.
func retry(ctx context.Context, what string, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CheckKilledMidEffect checks that a worker killed at the point at
// (KillNext) leaves its claim as a dead process does (running with its
// lease held; an in-transaction tool's queued, its lock rolled back),
// with its River job running; that the reaper then gives the claim a
// fresh job; and that the effect runs again with the same downstream key
// and makes one effect in all. A tool that fails unknown outcomes
// (Policy.FailUnknownOutcome) with an external effect fails
// outcome_unknown instead, its effect never run again.
func CheckKilledMidEffect(t testing.TB, h *Harness, c *Case, prefix string, at KillPoint) {
	t.Helper()
	spec := h.mutation(c.Tool)
	require.NotNil(t, spec, "%s is not a mutation of the harness", c.Tool)
	key := prefix + "-kill-" + strings.ToLower(at.String())
	k := h.armKill(c.Tool, at)
	first := h.Call(t, c.Tool, key, c.Args)
	require.Nil(t, first.Error, "%+v", first.Error)
	select {
	case <-k.fired:
	case <-time.After(AwaitTimeout):
		require.FailNow(t, "the worker was never killed", "%s never reached %s within %s", c.Tool, at, AwaitTimeout)
	}
	require.Equal(t, first.Operation.OperationID, k.claim.OperationID, "the kill hit this call's operation")
	<-k.done
	require.NoError(t, k.err, "the harness's recovery of the killed job")
	if spec.InTx {
		require.Equal(t, vocab.StatusQueued, k.left.status, "the killed in-transaction effect's lock rolled back: the claim is queued")
	} else {
		require.Equal(t, vocab.StatusRunning, k.left.status, "the killed external effect's claim is running")
		require.True(t, k.left.leaseLive, "the killed worker's lease is held")
	}
	require.Equal(t, "running", k.left.jobState, "the killed job is still running in River")

	op := h.Await(t, c.Tool, key)
	require.NotEqual(t, k.claim.JobID, op.JobID, "the reaper gave the claim a fresh job")
	runs := h.faults.ranWith(op.OperationID)
	require.NotEmpty(t, runs)
	for i, ds := range runs {
		require.Equal(t, k.claim.DownstreamKey, ds, "run %d of the effect had the killed run's downstream key", i+1)
	}
	if spec.Policy.FailUnknownOutcome && !spec.InTx {
		require.Equal(t, vocab.StatusFailed, op.Status, "a tool that fails unknown outcomes is not run again")
		require.Equal(t, vocab.CodeOutcomeUnknown, op.Error.Code)
		require.Len(t, runs, 1, "the effect never ran again")
		require.LessOrEqual(t, c.Effects(t, h, op), 1, "no second effect")
		return
	}
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	require.GreaterOrEqual(t, len(runs), 2, "the effect ran again after the kill")
	require.Equal(t, 1, c.Effects(t, h, op), "one effect in all: the killed run's and the reclaimed run's are one")
}
