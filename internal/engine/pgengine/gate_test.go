package pgengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/pgtest"
)

func count(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string) func(context.Context) int {
	return func(ctx context.Context) int {
		var n int
		require.NoError(t, db.QueryRow(ctx, sql).Scan(&n))
		return n
	}
}

// TestGateConformance runs the suite every core.Store passes.
func TestGateConformance(t *testing.T) {
	t.Parallel()
	coretest.Exercise(t, func(t *testing.T) *coretest.Bundle {
		_, pool := pgtest.NewDB(t)
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
		require.NoError(t, err)
		b := &coretest.Bundle{
			Store:    pgengine.New(pool),
			Enqueuer: coretest.RiverEnqueuer[pgx.Tx]{Client: client},
			Control:  &jobs.Control[pgx.Tx]{Client: client},
			JobState: func(ctx context.Context, id int64) string {
				var state string
				_ = pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", id).Scan(&state)
				return state
			},
			DeleteJob: func(ctx context.Context, id int64) {
				_, err := client.JobDelete(ctx, id)
				require.NoError(t, err)
			},
			EndJob: func(ctx context.Context, id int64, state string) {
				_, err := pool.Exec(ctx, "UPDATE river_job SET state = $2, finalized_at = now() WHERE id = $1", id, state)
				require.NoError(t, err)
			},
			MarkJobRunning: func(ctx context.Context, id int64, since time.Duration) {
				_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1,
							attempted_at = now() - make_interval(secs => $2) WHERE id = $1`, id, since.Seconds())
				require.NoError(t, err)
			},
			SetClaimUpdatedAt: func(ctx context.Context, id int64, at time.Time) {
				_, err := pool.Exec(ctx, "UPDATE idempotency_claims SET updated_at = $2 WHERE id = $1", id, at)
				require.NoError(t, err)
			},
			JobCount:   count(t, pool, "SELECT count(*) FROM river_job"),
			ClaimCount: count(t, pool, "SELECT count(*) FROM idempotency_claims"),
		}
		return b
	})
}
