package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestStuckReaperJobDoesNotStopReaping: a worker killed while it ran
// River's reaper job leaves that job running until River's rescuer (on the
// leader, every 30s, past RescueStuckJobsAfter) sets it retryable, and the
// job is unique while running, so no process can insert another. A claim
// whose worker died meanwhile must still be reclaimed within the reaper's
// interval: every worker process reaps by itself. The check is causal, not
// timed: the claim is reclaimed while River still holds the stuck reaper
// job running, which it does for over a minute here (the lease is a
// minute, and River rescues only after the lease plus two intervals).
func TestStuckReaperJobDoesNotStopReaping(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := context.Background()
		_, stripeHTTP := stripetest.Start(t, &stripetest.Options{AutoChargeAmount: 100_000})
		d := enginetest.New(t, engine, &enginetest.Options{MaxConns: 10})
		_, err := d.Store.Seed(ctx, seedFile())
		require.NoError(t, err)
		cfg := opsConfig(d, nil)
		cfg.StripeAPIBase = stripeHTTP.URL
		cfg.InflightTimeout = time.Minute
		cfg.ReaperInterval = 200 * time.Millisecond

		var g *core.Gate
		var insertReaper func() int64
		var run func(ctx context.Context) error
		if d.Pool != nil {
			w, err := app.NewWorker(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil, &app.WorkerOptions{MaxWorkers: 2})
			require.NoError(t, err)
			g = w.Gate
			insertReaper = func() int64 {
				res, err := w.Client.Insert(ctx, jobs.ReaperArgs{}, nil)
				require.NoError(t, err)
				return res.Job.ID
			}
			run = func(ctx context.Context) error { return w.Run(ctx, 10*time.Second) }
		} else {
			e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(d.SQL), nil, nil, &app.WorkerOptions{MaxWorkers: 2})
			require.NoError(t, err)
			g = e.Gate
			insertReaper = func() int64 {
				res, err := e.Client.Insert(ctx, jobs.ReaperArgs{}, nil)
				require.NoError(t, err)
				return res.Job.ID
			}
			run = func(ctx context.Context) error { return e.Run(ctx, 10*time.Second) }
		}

		// A refund whose worker died holding it: its lease expired, its job
		// still running in River. Only a reaper pass can give it a new job.
		c := coretest.Claim(ctx, t, g, &coretest.ClaimOpts{Key: "stuck-reaper-01"}).Claim
		_, err = g.Store().ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID,
			Lease: time.Minute, Now: ptrTime(time.Now().Add(-2 * time.Minute))})
		require.NoError(t, err)
		// And River's reaper job, run by a worker that died: still running.
		reaperJob := insertReaper()
		for _, id := range []int64{c.JobID, reaperJob} {
			d.Exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = $1 WHERE id = $2`,
				d.Time(time.Now()), id)
		}
		_, err = g.Store().JobGet(ctx, &core.JobGetParams{ID: reaperJob})
		require.NoError(t, err)

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- run(runCtx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

		// A bound for a stuck test only: reaping takes one interval.
		require.Eventually(t, func() bool {
			return d.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = 'stuck-reaper-01' AND decision = $1`,
				string(vocab.DecisionReclaimed)) == 1
		}, 45*time.Second, 20*time.Millisecond, "the claim is reclaimed")
		require.Equal(t, []string{"running|1"}, d.Rows(t, `SELECT CAST(state AS TEXT) || '|' || CAST(attempt AS TEXT) FROM river_job WHERE id = $1`, reaperJob),
			"reclaimed while River's reaper job is still stuck: no process waited for River's rescuer")
	})
}

func ptrTime(t time.Time) *time.Time { return &t }
