package idemgate_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/builtins"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
	"github.com/idemgate/idemgate/jobs"
)

// teamPing is a team's own job on River's default queue.
type teamPing struct {
	N int `json:"n"`
}

func (teamPing) Kind() string { return "team_ping" }

type teamPingWorker struct {
	river.WorkerDefaults[teamPing]
	done *atomic.Int64
}

func (w *teamPingWorker) Work(context.Context, *river.Job[teamPing]) error {
	w.done.Add(1)
	return nil
}

// teamTick is a team's periodic job.
type teamTick struct{}

func (teamTick) Kind() string { return "team_tick" }

type teamTickWorker struct {
	river.WorkerDefaults[teamTick]
	ran *atomic.Int64
}

func (w *teamTickWorker) Work(context.Context, *river.Job[teamTick]) error {
	w.ran.Add(1)
	return nil
}

// A team's River client beside idemgate on one database, its queue River's
// default: under load (40 refunds, 60 team jobs at once) neither takes the
// other's jobs, so no job fails "not registered", every refund succeeds
// with one refund at Stripe, every team job completes, and idemgate's
// worker fetches nothing but its own queues. River elects one leader per
// database schema, and only the leader enqueues periodic jobs (its own) and
// rescues stuck jobs: with IDEMGATE_RIVER=shared idemgate's worker never
// leads, so the team's periodic job runs.
func TestTeamRiverBesideIdemgate(t *testing.T) {
	t.Parallel()
	runTeamRiver(t, false)
}

// The same with idemgate's jobs inside the team's client (jobs.Configure)
// and no worker of idemgate's own: the team's client works both, and, the
// only leader, enqueues its periodic job and idemgate's.
func TestTeamRiverWorksIdemgateJobs(t *testing.T) {
	t.Parallel()
	runTeamRiver(t, true)
}

func runTeamRiver(t *testing.T, inside bool) {
	const refundCalls, teamJobs = 40, 60
	ctx := t.Context()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_team", 1<<30, "usd")
	dbURL, seedPool := pgtest.NewDB(t)
	_, err := pgengine.New(seedPool).Seed(ctx, &store.SeedFile{
		Rows:   &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_team", ChargeID: "ch_team", AmountCents: 1 << 30, Currency: "usd"}}},
		Tokens: []store.SeedToken{{Tenant: "acme", User: "bot", Scopes: []string{"billing:refund", "operations:read"}, Token: "idg_test_team_bot"}},
	})
	require.NoError(t, err)

	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // many one-cent refunds of one order under their own keys, on purpose
	cfg.DatabaseURL = dbURL
	cfg.Wait = 100 * time.Millisecond
	cfg.RateLimit = 0
	cfg.StripeAPIKey = "sk_test_idemgate"
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.Secret = "7f3c9a1e5b2d8f4a6c0e9b3d7a1f5c2e8b4d0a6f9c3e7b1d5a2f8c4e0b6d9a3f"
	cfg.River = config.RiverShared
	logger := slog.New(slog.DiscardHandler)
	svc, err := idemgate.Open(ctx, idemgate.ConfigFrom(cfg), gate.NewRegistry(), &idemgate.Options{Builtins: builtins.Tools(), Logger: logger})
	require.NoError(t, err)
	require.NoError(t, svc.Migrate(ctx))
	srv := httptest.NewServer(svc)
	t.Cleanup(func() { srv.Close(); svc.Close() })
	if !inside {
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(runCtx) }()
		t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	}

	// The team's client: its own pool, River's default queue, its own
	// kinds and a periodic job.
	teamPool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(teamPool.Close)
	var pinged, ticked atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &teamPingWorker{done: &pinged})
	river.AddWorker(workers, &teamTickWorker{ran: &ticked})
	teamCfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Second),
			func() (river.JobArgs, *river.InsertOpts) { return teamTick{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            logger,
	}
	if inside {
		require.NoError(t, jobs.Configure(teamCfg, svc))
	}
	team, err := river.NewClient(riverpgxv5.New(teamPool), teamCfg)
	require.NoError(t, err)
	require.NoError(t, team.Start(context.WithoutCancel(ctx)))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, team.Stop(stopCtx))
	})

	// The load: idemgate's refunds and the team's jobs at once.
	var wg sync.WaitGroup
	statuses := make([]int, refundCalls)
	for i := range refundCalls {
		wg.Go(func() {
			statuses[i], _ = callJSON(t, http.MethodPost, srv.URL+"/v1/tools/refund_order", "idg_test_team_bot",
				fmt.Sprintf("team-river-%04d", i), `{"order_id":"ord_team","amount_cents":1}`)
		})
	}
	for i := range teamJobs {
		wg.Go(func() {
			_, err := team.Insert(ctx, teamPing{N: i}, nil)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for i, s := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, s, "call %d", i)
	}

	count := func(sql string) int {
		var n int
		require.NoError(t, seedPool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	succeeded := func() int {
		return count(`SELECT count(*) FROM idempotency_claims WHERE tool = 'refund_order' AND status = 'succeeded'`)
	}
	notRegistered := func() int {
		return count(`SELECT count(*) FROM river_job j WHERE EXISTS (SELECT 1 FROM unnest(j.errors) e WHERE e->>'error' LIKE '%not registered%')`)
	}
	// River marks a worked job completed a moment after its worker returns.
	teamCompleted := func() int {
		return count(`SELECT count(*) FROM river_job WHERE kind = 'team_ping' AND queue = 'default' AND state = 'completed'`)
	}
	refundsCompleted := func() int {
		return count(`SELECT count(*) FROM river_job WHERE queue = 'idemgate' AND kind = 'idemgate.refund_order' AND state = 'completed'`)
	}
	// Inside the team's client, its leader also runs the built-ins'
	// periodic list of Stripe's refunds (first when it starts).
	pollsCompleted := func() int {
		return count(`SELECT count(*) FROM river_job WHERE queue = 'idemgate_maintenance' AND kind = 'idemgate.stripe_refunds_poll' AND state = 'completed'`)
	}
	deadline := time.Now().Add(3 * time.Minute) // a bound for a stuck test, not a speed requirement
	for time.Now().Before(deadline) && (succeeded() < refundCalls || teamCompleted() < teamJobs || refundsCompleted() < refundCalls ||
		ticked.Load() < 1 || notRegistered() > 0 || (inside && pollsCompleted() < 1)) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("refunds succeeded %d/%d, team jobs done %d/%d (completed %d), team ticks %d, jobs with a \"not registered\" error %d, Stripe refunds %d",
		succeeded(), refundCalls, pinged.Load(), teamJobs, teamCompleted(), ticked.Load(), notRegistered(), len(stripeSrv.RefundsByMetadata(refunds.MetadataOperationID)))

	require.Zero(t, notRegistered(), "jobs whose kind the client that fetched them did not know")
	if inside {
		require.Positive(t, pollsCompleted(), "the team's leader ran the list of Stripe's refunds")
	}
	require.Equal(t, refundCalls, succeeded(), "refunds succeeded")
	require.EqualValues(t, teamJobs, pinged.Load(), "team jobs worked")
	require.Equal(t, teamJobs, teamCompleted(), "team jobs completed")
	byOp := stripeSrv.RefundsByMetadata(refunds.MetadataOperationID)
	require.Len(t, byOp, refundCalls, "one refund at Stripe per operation")
	for op, n := range byOp {
		require.Equal(t, 1, n, "refunds of operation %s", op)
	}
	require.Zero(t, count(`SELECT count(*) FROM river_job WHERE queue = 'default' AND kind LIKE 'idemgate%'`), "idemgate jobs on the team's queue")
	require.Zero(t, count(`SELECT count(*) FROM river_job WHERE queue LIKE 'idemgate%' AND kind NOT LIKE 'idemgate.%'`), "team jobs on idemgate's queues")
	require.Equal(t, refundCalls, refundsCompleted(), "refund jobs completed on idemgate's queue")
	require.Positive(t, ticked.Load(), "the team's periodic job ran")
	if inside {
		require.Positive(t, count(`SELECT count(*) FROM river_job WHERE kind = 'idemgate.reaper' AND queue = 'idemgate_maintenance'`),
			"idemgate's periodic reaper, enqueued by the team's client")
	}
}
