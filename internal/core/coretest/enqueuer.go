package coretest

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/core"
)

// JobArgs is the job RiverEnqueuer inserts for a claim.
type JobArgs struct {
	TenantID    string `json:"tenant_id"`
	OperationID string `json:"operation_id"`
}

// Kind implements river.JobArgs.
func (JobArgs) Kind() string { return "gatetest_claim" }

// RiverEnqueuer inserts real River jobs in the gate's transaction, one at a
// time or many at once: a core.BatchEnqueuer. TTx is the River driver's
// transaction type.
type RiverEnqueuer[TTx any] struct {
	Client *river.Client[TTx]
}

// JobInsert implements core.Enqueuer.
func (e RiverEnqueuer[TTx]) JobInsert(ctx context.Context, tx core.Tx, c *core.Claim) (int64, error) {
	res, err := e.Client.InsertTx(ctx, tx.(interface{ DriverTx() TTx }).DriverTx(), JobArgs{TenantID: c.TenantID, OperationID: c.OperationID}, nil)
	if err != nil {
		return 0, err
	}
	return res.Job.ID, nil
}

// JobInsertMany implements core.BatchEnqueuer.
func (e RiverEnqueuer[TTx]) JobInsertMany(ctx context.Context, tx core.Tx, claims []*core.Claim) ([]int64, error) {
	params := make([]river.InsertManyParams, len(claims))
	for i, c := range claims {
		params[i] = river.InsertManyParams{Args: JobArgs{TenantID: c.TenantID, OperationID: c.OperationID}}
	}
	res, err := e.Client.InsertManyTx(ctx, tx.(interface{ DriverTx() TTx }).DriverTx(), params)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids, nil
}

// JobDeleteMany implements core.BatchEnqueuer.
func (e RiverEnqueuer[TTx]) JobDeleteMany(ctx context.Context, tx core.Tx, ids []int64) error {
	res, err := e.Client.JobDeleteManyTx(ctx, tx.(interface{ DriverTx() TTx }).DriverTx(), river.NewJobDeleteManyParams().IDs(ids...).First(len(ids)))
	if err != nil {
		return err
	}
	if len(res.Jobs) != len(ids) {
		return fmt.Errorf("gatetest: deleted %d of %d jobs", len(res.Jobs), len(ids))
	}
	return nil
}
