package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// TestEnqueuerInsertsAndDeletesManyInTheGatesTransaction: a group's jobs
// go in with one InsertManyTx, in the claims' order, and the jobs of rows
// not written are deleted in the same transaction, more than River deletes
// in one call included.
func TestEnqueuerInsertsAndDeletesManyInTheGatesTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
	require.NoError(t, err)
	enq := &jobs.Enqueuer[pgx.Tx]{Client: client}
	st := pgengine.New(pool)

	const n = jobs.MaxDeleteMany + 3
	claims := make([]*core.Claim, n)
	for i := range claims {
		claims[i] = &core.Claim{OperationID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), TenantID: "acme",
			Tool: "refund_order", IdempotencyKey: fmt.Sprintf("key-%d", i)}
	}
	tx, err := st.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ids, err := enq.JobInsertMany(ctx, tx, claims)
	require.NoError(t, err)
	require.Len(t, ids, n)
	var kind, opID string
	require.NoError(t, tx.(*pgengine.Tx).DriverTx().QueryRow(ctx, `SELECT kind, args->>'operation_id' FROM river_job WHERE id = $1`, ids[7]).Scan(&kind, &opID))
	require.Equal(t, "idemgate.refund_order", kind)
	require.Equal(t, claims[7].OperationID, opID, "ids come back in the claims' order")
	require.NoError(t, enq.JobDeleteMany(ctx, tx, ids[1:]))
	require.NoError(t, tx.Commit(ctx))

	rows, err := pool.Query(ctx, `SELECT id FROM river_job`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, left)
}

// TestEnqueuerApprovalNoticeOnlyWhenOn: the notice job goes into the
// gate's transaction (none when it rolls back), and only once notices are
// on.
func TestEnqueuerApprovalNoticeOnlyWhenOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
	require.NoError(t, err)
	enq := &jobs.Enqueuer[pgx.Tx]{Client: client}
	st := pgengine.New(pool)
	c := &core.Claim{OperationID: "00000000-0000-4000-8000-000000000001", TenantID: "acme", Tool: "refund_order"}
	notices := func() []string {
		rows, err := pool.Query(ctx, `SELECT args->>'tenant_id' || '/' || (args->>'operation_id') FROM river_job WHERE kind = $1`, jobs.ApprovalNoticeKind)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	insert := func(commit bool) {
		t.Helper()
		tx, err := st.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, enq.ApprovalNoticeInsert(ctx, tx, c))
		if commit {
			require.NoError(t, tx.Commit(ctx))
		}
	}

	insert(true)
	require.Empty(t, notices(), "off by default: no worker would work it")
	enq.SetApprovalNotices(true)
	insert(false)
	require.Empty(t, notices(), "rolled back with the claim's transaction")
	insert(true)
	require.Equal(t, []string{"acme/" + c.OperationID}, notices())
}
