package jobs

import (
	"context"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"riverqueue.com/riverui/uiendpoints"

	"github.com/idemgate/idemgate/internal/core"
)

// Client is a River client on a driver's database, with the gate's job
// operations (core.BatchEnqueuer, core.JobControl) in the driver's
// transactions. jobs.River implements it for any River driver.
type Client interface {
	core.BatchEnqueuer
	core.JobControl
	// ApprovalNoticeInsert inserts the job that mails a claim's approvers,
	// once SetApprovalNotices turned it on; before, it inserts nothing.
	core.ApprovalNoticer
	// SetApprovalNotices turns ApprovalNoticeInsert on or off: on only
	// where the deployment's workers work the notices.
	SetApprovalNotices(on bool)
	// JobRetryable reports whether JobRetryTx would retry the job itself;
	// false means a fresh job would replace it.
	JobRetryable(ctx context.Context, jobID int64) (bool, error)
	// JobClaim returns the tenant, tool and key of the operation a claim
	// job runs; ok is false for any other job.
	JobClaim(ctx context.Context, jobID int64) (tenantID, tool, key string, ok bool, err error)
	// AddWorkers registers a worker for every mutating tool of runner's
	// registry, on this engine's River driver.
	AddWorkers(workers *river.Workers, runner *Runner) error
	// Open creates the client with cfg: call it once, after AddWorkers
	// and before the methods below or the job operations.
	Open(cfg *river.Config) error
	// Insert inserts a job outside any transaction.
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	// Start starts the client's queues, workers and maintenance.
	Start(ctx context.Context) error
	// Stop stops fetching and waits for running jobs until ctx ends.
	Stop(ctx context.Context) error
	// UI is River UI's endpoints on the client.
	UI() uiendpoints.Bundle
}
