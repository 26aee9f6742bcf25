package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// cancelOnCommit is a core.Store whose transactions cancel the running
// job's context as their commit starts: the moment River's cancel
// notification, sent by that very commit (JobCancelTx), can reach the
// worker at the latest. It injects the race; it does not replace the store.
type cancelOnCommit struct {
	core.Store
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (s *cancelOnCommit) arm(cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel = cancel
}

func (s *cancelOnCommit) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &cancelOnCommitTx{Tx: tx.(*pgengine.Tx), s: s}, nil
}

type cancelOnCommitTx struct {
	*pgengine.Tx
	s *cancelOnCommit
}

func (tx *cancelOnCommitTx) Commit(ctx context.Context) error {
	tx.s.mu.Lock()
	cancel := tx.s.cancel
	tx.s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return tx.Tx.Commit(ctx)
}

type refundArgs struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// failingRefund fails definitively, as an over-refund does, after arming
// the store: the lease is committed by then, and the next commit is the
// failure's.
func failingRefund(arm func()) *gate.Mutation[refundArgs, struct{}] {
	return &gate.Mutation[refundArgs, struct{}]{
		Name: "refund_order", Title: "Refund", Description: "A refund that fails.", Scope: "billing:refund", Provider: "stripe",
		Call: func(context.Context, *gate.Op[refundArgs]) (*struct{}, error) {
			arm()
			return nil, gate.NothingHappened(vocab.CodeAmountExceedsRefundable, "amount_cents exceeds what is refundable")
		},
	}
}

// TestFailureCancellingItsOwnJobStillLogsAndCounts: a failing operation's
// transaction cancels its own job (JobCancelTx), and River cancels the job's
// context once that commit lands. The outcome must still be committed,
// logged and counted, and the job must end cancelled, not retried.
func TestFailureCancellingItsOwnJobStillLogsAndCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
	require.NoError(t, err)
	store := &cancelOnCommit{Store: pgengine.New(pool)}
	g, err := core.New(&core.Config{Store: store, Enqueuer: &jobs.Enqueuer[pgx.Tx]{Client: client}, Policies: coretest.Policies()})
	require.NoError(t, err)

	logger, logs := logtest.New()
	reg := prometheus.NewRegistry()
	metrics, err := jobs.NewMetrics(reg)
	require.NoError(t, err)
	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	tools := gate.NewRegistry().MustAdd(failingRefund(func() { store.arm(cancelJob) }))
	runner, err := jobs.NewRunner(&jobs.RunnerConfig{Gate: g, Tools: toolspec.Of(tools),
		InflightTimeout: time.Minute, Metrics: metrics, Logger: logger})
	require.NoError(t, err)

	c := coretest.Claim(ctx, t, g, &coretest.ClaimOpts{Key: "settle-race-0001"}).Claim
	hooks := core.JobHooks{
		Complete: func(context.Context, core.Tx) error { return errors.New("a failing job is not completed") },
		Cancel: func(ctx context.Context, tx core.Tx) error {
			_, err := client.JobCancelTx(ctx, tx.(jobs.DriverTx[pgx.Tx]).DriverTx(), c.JobID)
			return err
		},
	}
	err = runner.Run(jobCtx, int(c.JobID), 1, 10, refOf(c), hooks)

	var cancelErr *river.JobCancelError
	require.ErrorAs(t, err, &cancelErr, "the job ends cancelled, not retried")
	require.Error(t, jobCtx.Err(), "the commit cancelled the job's context, as River does")
	stored, err := pgengine.New(pool).ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
	require.NoError(t, err)
	require.Equal(t, vocab.StatusFailed, stored.Status)
	require.Equal(t, vocab.CodeAmountExceedsRefundable, stored.Error.Code)
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, c.JobID).Scan(&state))
	require.Equal(t, "cancelled", state, "cancelled in the failing transaction")
	require.Contains(t, logs.String(), `"msg":"operation failed"`)
	require.Equal(t, 1, testutil.CollectAndCount(metrics.JobDuration()))
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.Downstream().WithLabelValues("stripe", "definitive")))
	h, err := metrics.JobDuration().GetMetricWithLabelValues("refund_order", "failed")
	require.NoError(t, err)
	require.Equal(t, 1, testutil.CollectAndCount(h.(prometheus.Collector)))
}

// refOf is the jobs.ClaimRef a claim's job carries.
func refOf(c *core.Claim) jobs.ClaimRef {
	return jobs.ClaimRef{ClaimID: c.ID, OperationID: c.OperationID, TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey}
}
