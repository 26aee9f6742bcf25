// Package jobs holds the River job arguments that carry a claim to a worker,
// the enqueuer the gate inserts them with, and (from the Durable workers
// issue on) the workers that re-enter the gate before any effect.
package jobs

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
	pubjobs "github.com/idemgate/idemgate/jobs"
)

// MaxAttempts caps River's attempts for a claim's job. With River's default
// backoff (attempt^4 seconds plus jitter) the ninth retry starts about 4.3
// hours after the first attempt: every retry falls well inside Stripe's
// 24-hour idempotency-key window.
const MaxAttempts = 10

// Queue is the queue claim jobs and approval notices go to: idemgate's
// own, never River's default, which a team's client may work.
const Queue = pubjobs.Queue

// Kind is the River kind of one of idemgate's jobs (a tool's name, or
// reaper, pruner, approval_notice): idemgate's prefix and the name.
func Kind(name string) string { return pubjobs.Kind(name) }

// ClaimRef is what every claim job carries: enough to find the claim (by
// tenant and operation) and to read in River UI whose job it is. The
// arguments themselves stay in the claim (one decoded value, hashed and
// executed). A call's job is inserted before its claim, so it carries no
// claim id; jobs the reaper or an operator insert for a claim do.
type ClaimRef struct {
	ClaimID        int64  `json:"claim_id,omitempty"`
	OperationID    string `json:"operation_id"`
	TenantID       string `json:"tenant_id"`
	Tool           string `json:"tool"`
	IdempotencyKey string `json:"idempotency_key"`
}

// ClaimArgs is the job of a claim. Its kind is the tool's name after
// idemgate's prefix (Kind), so River UI shows idemgate.refund_order jobs
// as such; one worker per mutating tool is registered with
// river.AddWorkerArgs.
type ClaimArgs struct {
	ClaimRef
	kind string
}

// Kind implements river.JobArgs. A job decoded by River for work carries no
// kind; its tool is in the reference.
func (a ClaimArgs) Kind() string {
	if a.kind != "" {
		return a.kind
	}
	return Kind(a.Tool)
}

// ArgsFor returns the job arguments for claim.
func ArgsFor(c *core.Claim) (river.JobArgs, error) {
	if c.Tool == "" {
		return nil, fmt.Errorf("jobs: claim %d has no tool", c.ID)
	}
	ref := ClaimRef{ClaimID: c.ID, OperationID: c.OperationID, TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey}
	return ClaimArgs{ClaimRef: ref, kind: Kind(c.Tool)}, nil
}

// InsertOpts are the options every claim job is inserted with.
func InsertOpts() *river.InsertOpts {
	return &river.InsertOpts{MaxAttempts: MaxAttempts, Queue: Queue}
}

// Enqueuer inserts claim jobs with a River client, inside the gate's
// transaction. TTx is the driver's transaction type (pgx.Tx, *sql.Tx).
type Enqueuer[TTx any] struct {
	Client *river.Client[TTx]
	// Unavailable, when set, tells a database outage from other insert
	// errors (each engine driver's Unavailable): those are wrapped
	// in vocab.ErrUnavailable so that callers answer "unavailable, retry"
	// rather than "internal".
	Unavailable func(error) bool
	// notices is whether ApprovalNoticeInsert inserts (SetApprovalNotices).
	notices atomic.Bool
}

// JobInsert implements core.Enqueuer.
func (e *Enqueuer[TTx]) JobInsert(ctx context.Context, tx core.Tx, c *core.Claim) (int64, error) {
	rawTx, err := e.tx(tx)
	if err != nil {
		return 0, err
	}
	args, err := ArgsFor(c)
	if err != nil {
		return 0, err
	}
	res, err := e.Client.InsertTx(ctx, rawTx, args, InsertOpts())
	if err != nil {
		return 0, e.wrap(err)
	}
	return res.Job.ID, nil
}

// JobInsertMany implements core.BatchEnqueuer: one statement for all the
// claims' jobs.
func (e *Enqueuer[TTx]) JobInsertMany(ctx context.Context, tx core.Tx, claims []*core.Claim) ([]int64, error) {
	rawTx, err := e.tx(tx)
	if err != nil {
		return nil, err
	}
	params := make([]river.InsertManyParams, len(claims))
	for i, c := range claims {
		args, err := ArgsFor(c)
		if err != nil {
			return nil, err
		}
		params[i] = river.InsertManyParams{Args: args, InsertOpts: InsertOpts()}
	}
	res, err := e.Client.InsertManyTx(ctx, rawTx, params)
	if err != nil {
		return nil, e.wrap(err)
	}
	if len(res) != len(claims) {
		return nil, fmt.Errorf("jobs: River inserted %d jobs for %d claims", len(res), len(claims))
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids, nil
}

// JobDeleteMany implements core.BatchEnqueuer.
func (e *Enqueuer[TTx]) JobDeleteMany(ctx context.Context, tx core.Tx, ids []int64) error {
	rawTx, err := e.tx(tx)
	if err != nil {
		return err
	}
	// River deletes at most maxDeleteMany jobs per call.
	for chunk := range slices.Chunk(ids, maxDeleteMany) {
		res, err := e.Client.JobDeleteManyTx(ctx, rawTx, river.NewJobDeleteManyParams().IDs(chunk...).First(len(chunk)))
		if err != nil {
			return e.wrap(err)
		}
		if len(res.Jobs) != len(chunk) {
			return fmt.Errorf("jobs: deleted %d of %d jobs", len(res.Jobs), len(chunk))
		}
	}
	return nil
}

// maxDeleteMany is River's bound on JobDeleteManyParams.First.
const maxDeleteMany = 10_000

// tx is the River driver's transaction of a store transaction.
func (e *Enqueuer[TTx]) tx(tx core.Tx) (TTx, error) { return driverTx[TTx](tx) }

// wrap marks a database outage as vocab.ErrUnavailable.
func (e *Enqueuer[TTx]) wrap(err error) error {
	if e.Unavailable != nil && e.Unavailable(err) {
		return fmt.Errorf("%w: %w", vocab.ErrUnavailable, err)
	}
	return err
}
