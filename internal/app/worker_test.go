package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/builtins/resetroute"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

type workerBundle struct {
	*testBundle
	stripe  *stripetest.Server
	mail    *mailpit.Client
	session *mcp.ClientSession
	worker  *app.Worker
}

// setupWorker runs the api and the worker in process against a fresh
// database, the test Stripe and a real Mailpit.
func setupWorker(t *testing.T, wait time.Duration) *workerBundle {
	t.Helper()
	return setupWorkerLogged(t, wait, nil)
}

// setupWorkerLogged is setupWorker with the api's and the worker's logs
// going to logger (nil: slog.Default()).
func setupWorkerLogged(t *testing.T, wait time.Duration, logger *slog.Logger) *workerBundle {
	t.Helper()
	return setupWorkerTraced(t, wait, logger, nil)
}

// setupWorkerTraced is setupWorkerLogged with the api's and the worker's
// spans going to tp (nil: no tracing).
func setupWorkerTraced(t *testing.T, wait time.Duration, logger *slog.Logger, tp trace.TracerProvider) *workerBundle {
	t.Helper()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	stripeSrv.AddCharge("ch_declined", 5000, "usd")
	stripeSrv.SetChargeError("ch_declined", http.StatusPaymentRequired, "card_error", "card_declined")
	smtpAddr, mailAPI := mailpit.Start(t)

	dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 30})
	seed := seedFile()
	seed.Rows.(*tools.Seed).Orders = append(seed.Rows.(*tools.Seed).Orders, tools.SeedOrder{Tenant: "acme", OrderID: "ord_declined", ChargeID: "ch_declined", AmountCents: 5000, Currency: "usd"})
	seed.Rows.(*tools.Seed).Customers = []tools.SeedCustomer{{Tenant: "acme", CustomerID: "cus_1", Currency: "usd"}}
	seed.Rows.(*tools.Seed).Seats = []tools.SeedSeat{{Tenant: "acme", SeatID: "seat_1", UserID: "usr_1"}}
	seed.Rows.(*tools.Seed).Users = []tools.SeedUser{{Tenant: "acme", UserID: "usr_1", Email: "ana@example.com"}}
	_, err := pgengine.New(pool).Seed(ctx, seed)
	require.NoError(t, err)

	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = dbURL
	cfg.Wait = wait
	cfg.StripeAPIKey = stripeKey
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.SMTPAddr = smtpAddr
	cfg.Secret = strings.Repeat("s", 32)
	cfg.InflightTimeout = 10 * time.Second

	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), logger, &app.APIOptions{TracerProvider: tp})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	listenDone := make(chan struct{})
	go func() { defer close(listenDone); a.Run(runCtx) }()
	srv := httptest.NewServer(a.Handler)
	cfg.ResetLinkBase = srv.URL + resetroute.PagePath // the mails link to this api's page

	w, err := app.NewWorker(cfg, pgengine.NewDriver(pool, cfg.Pooled()), logger, &app.WorkerOptions{MaxWorkers: 10, TracerProvider: tp})
	require.NoError(t, err)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(runCtx, 10*time.Second) }()
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-listenDone
		require.NoError(t, <-workerDone)
	})
	b := &workerBundle{
		testBundle: &testBundle{url: srv.URL, pool: pool, api: a},
		stripe:     stripeSrv,
		mail:       mailpit.New(mailAPI),
		worker:     w,
	}
	b.session = connect(t, srv.URL, tokenAcme)
	return b
}

// getOperation reads an operation through get_operation.
func getOperation(t *testing.T, s *mcp.ClientSession, tool, key string) *vocab.Operation {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_operation", Arguments: map[string]any{"tool": tool, "idempotency_key": key}})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content[0].(*mcp.TextContent).Text)
	var op vocab.Operation
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &op))
	return &op
}

func awaitStatus(t *testing.T, s *mcp.ClientSession, tool, key string, status vocab.Status) *vocab.Operation {
	t.Helper()
	var op *vocab.Operation
	require.Eventually(t, func() bool {
		op = getOperation(t, s, tool, key)
		return op.Status == status
	}, 60*time.Second, 50*time.Millisecond, "operation %s/%s never reached %s", tool, key, status)
	return op
}

func TestWorkerRefundSucceedsOnceAndReplays(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	first, isErr := callTool(t, b.session, "refund_order", refund("refund-e2e-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeAccepted, first.Outcome)
	require.Equal(t, vocab.StatusSucceeded, first.Operation.Status, "waited for the outcome")

	var result struct {
		RefundID string `json:"refund_id"`
		Amount   int64  `json:"amount_cents"`
	}
	require.NoError(t, json.Unmarshal(first.Operation.Result, &result))
	require.True(t, strings.HasPrefix(result.RefundID, "re_"), result.RefundID)
	require.Equal(t, int64(1500), result.Amount)
	op := getOperation(t, b.session, "refund_order", "refund-e2e-0001")
	require.JSONEq(t, string(first.Operation.Result), string(op.Result))

	again, isErr := callTool(t, b.session, "refund_order", refund("refund-e2e-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeReplayed, again.Outcome)
	require.JSONEq(t, string(first.Operation.Result), string(again.Operation.Result))

	downstream := intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", refund("refund-e2e-0001", 1500), 0)
	require.Equal(t, map[string]int{downstream: 1}, b.stripe.RefundsByKey())
	require.Empty(t, b.stripe.ForeignKeys())
	require.Zero(t, b.stripe.MissingKey())
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM refunds`))
	require.Equal(t, 1500, countRows(t, b.pool, `SELECT refunded_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_9f2'`))
	// The stored result keeps only the allowlisted fields, never card details.
	require.NotContains(t, string(first.Operation.Result), "last4")
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE result::text LIKE '%4242%' OR args::text LIKE '%4242%'`))
}

func TestWorkerRetriesWhileRunningNeverRefundTwice(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 0)
	applied, release := b.stripe.HoldNext()
	first, isErr := callTool(t, b.session, "refund_order", refund("refund-held-0001", 1000))
	require.False(t, isErr)
	select {
	case <-applied:
	case <-time.After(60 * time.Second):
		t.Fatal("the refund never reached the test Stripe")
	}
	// The refund is applied at Stripe, its response held: retries now get
	// the handle.
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: refund("refund-held-0001", 1000)})
			if !assertNoErr(t, err) {
				return
			}
			var out result
			_ = json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out)
			if out.Outcome != vocab.OutcomeInFlight || out.Operation.OperationID != first.Operation.OperationID {
				t.Errorf("retry while running: outcome %s op %s", out.Outcome, out.Operation.OperationID)
			}
		}()
	}
	wg.Wait()
	release()
	awaitStatus(t, b.session, "refund_order", "refund-held-0001", vocab.StatusSucceeded)
	require.Equal(t, 1, b.stripe.RefundsByKey()[intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", refund("refund-held-0001", 1000), 0)])
	require.Len(t, b.stripe.Refunds(), 1)
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("call: %v", err)
		return false
	}
	return true
}

func TestWorkerPermanentStripeErrorFailsAndReplays(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	args := map[string]any{"order_id": "ord_declined", "amount_cents": 1000, "idempotency_key": "refund-declined-1"}
	res, isErr := callTool(t, b.session, "refund_order", args)
	require.True(t, isErr)
	require.Equal(t, vocab.CodeCardDeclined, res.Error.Code)
	require.Equal(t, vocab.StatusFailed, res.Operation.Status)
	require.False(t, res.Replayed)

	res, isErr = callTool(t, b.session, "refund_order", args)
	require.True(t, isErr)
	require.Equal(t, vocab.CodeCardDeclined, res.Error.Code)
	require.True(t, res.Replayed)
	require.Empty(t, b.stripe.Refunds())
	// The job was cancelled in the failing transaction.
	require.Eventually(t, func() bool {
		return countRows(t, b.pool, `SELECT count(*) FROM river_job WHERE state = 'cancelled'`) == 1
	}, 60*time.Second, 50*time.Millisecond)

	// Over the refundable amount: definitive, before Stripe.
	res, isErr = callTool(t, b.session, "refund_order", refund("refund-too-much-1", 6000))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeAmountExceedsRefundable, res.Error.Code)
}

func TestWorkerTransientErrorsEndInOneRefund(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 0)
	b.stripe.FailNext(2, http.StatusInternalServerError)
	_, isErr := callTool(t, b.session, "refund_order", refund("refund-flaky-0001", 700))
	require.False(t, isErr)
	awaitStatus(t, b.session, "refund_order", "refund-flaky-0001", vocab.StatusSucceeded)

	// Applied, then the response is lost: the retry with the same key gets
	// Stripe's stored refund, not a second one.
	b.stripe.DropNext(1)
	_, isErr = callTool(t, b.session, "refund_order", refund("refund-dropped-01", 800))
	require.False(t, isErr)
	op := awaitStatus(t, b.session, "refund_order", "refund-dropped-01", vocab.StatusSucceeded)
	require.GreaterOrEqual(t, op.Attempts, 1)

	byKey := b.stripe.RefundsByKey()
	require.Equal(t, 1, byKey[intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", refund("refund-flaky-0001", 700), 0)])
	require.Equal(t, 1, byKey[intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", refund("refund-dropped-01", 800), 0)])
	require.Len(t, b.stripe.Refunds(), 2)
	require.Equal(t, 2, countRows(t, b.pool, `SELECT count(*) FROM refunds`))
}

func TestWorkerCreditSeatAndMailHappenOnce(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	ctx := context.Background()
	credit := map[string]any{"customer_id": "cus_1", "amount_cents": 250, "currency": "usd", "memo": "sorry", "idempotency_key": "credit-once-0001"}
	seat := map[string]any{"seat_id": "seat_1", "idempotency_key": "seat-once-00001"}
	mail := map[string]any{"user_id": "usr_1", "idempotency_key": "mail-once-00001"}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{{"apply_credit", credit}, {"reset_seat", seat}, {"send_password_reset", mail}} {
		res, isErr := callTool(t, b.session, tc.tool, tc.args)
		require.False(t, isErr, "%s: %+v", tc.tool, res.Error)
		require.Equal(t, vocab.StatusSucceeded, res.Operation.Status, tc.tool)
		again, isErr := callTool(t, b.session, tc.tool, tc.args)
		require.False(t, isErr)
		require.Equal(t, vocab.OutcomeReplayed, again.Outcome, tc.tool)
	}
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM ledger_entries WHERE customer_id = 'cus_1'`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM seat_resets WHERE seat_id = 'seat_1'`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM password_reset_tokens WHERE user_id = 'usr_1'`))

	mailOp := getOperation(t, b.session, "send_password_reset", "mail-once-00001")
	var sent struct {
		MessageID string `json:"message_id"`
	}
	require.NoError(t, json.Unmarshal(mailOp.Result, &sent))
	mailKey := intentKey(t, strings.Repeat("s", 32), "acme", "send_password_reset", mail, 0)
	require.True(t, strings.HasPrefix(sent.MessageID, "<"+mailKey+"@"), sent.MessageID)
	require.NotContains(t, sent.MessageID, mailOp.OperationID)
	require.Eventually(t, func() bool {
		n, err := b.mail.CountByMessageID(ctx, sent.MessageID)
		return err == nil && n == 1
	}, 60*time.Second, 100*time.Millisecond)
}

func TestWorkerWithStaleEpochWritesNothing(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 0)
	ctx := context.Background()
	applied, release := b.stripe.HoldNext()
	first, isErr := callTool(t, b.session, "refund_order", refund("refund-stale-0001", 1200))
	require.False(t, isErr)
	<-applied

	// While the worker waits on Stripe, its lease is reclaimed for another
	// job (as the reaper does once a lease expired). The new job is real and
	// scheduled an hour ahead, so that no worker runs it during the test and
	// the reaper sees a live job, not an orphan, whenever it runs.
	s := b.api.Gate.Store()
	c, err := s.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "refund-stale-0001"})
	require.NoError(t, err)
	require.Equal(t, vocab.StatusRunning, c.Status)
	args, err := jobs.ArgsFor(c)
	require.NoError(t, err)
	opts := jobs.InsertOpts()
	opts.ScheduledAt = time.Now().Add(time.Hour)
	next, err := b.worker.Client.Insert(ctx, args, opts)
	require.NoError(t, err)
	future := time.Now().Add(time.Hour)
	_, err = s.ClaimReclaim(ctx, &core.ClaimReclaimParams{ID: c.ID, Epoch: c.Epoch, JobID: next.Job.ID, Now: &future})
	require.NoError(t, err)

	release()
	// The old worker's completion finds its epoch gone: nothing is written.
	require.Eventually(t, func() bool {
		return countRows(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, first.Operation.JobID) == 1
	}, 60*time.Second, 50*time.Millisecond)
	after, err := s.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
	require.NoError(t, err)
	require.Equal(t, vocab.StatusQueued, after.Status)
	require.Equal(t, next.Job.ID, after.JobID)
	require.Nil(t, after.Result)
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM refunds`))
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE decision = 'succeeded'`))
	require.Equal(t, fmt.Sprint(1), fmt.Sprint(len(b.stripe.Refunds())), "Stripe applied it once; the new job will replay it with the same key")
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

func TestMetricsCountOutcomesCallsAndClaims(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	res, isErr := callTool(t, b.session, "refund_order", refund("refund-metrics-01", 100))
	require.False(t, isErr)
	require.Equal(t, vocab.StatusSucceeded, res.Operation.Status)
	_, isErr = callTool(t, b.session, "refund_order", refund("refund-metrics-01", 100))
	require.False(t, isErr)

	api := scrape(t, b.api.Handler)
	require.Contains(t, api, `idemgate_gate_outcomes_total{outcome="accepted",tool="refund_order"} 1`)
	require.Contains(t, api, `idemgate_gate_outcomes_total{outcome="replayed",tool="refund_order"} 1`)
	require.Contains(t, api, `idemgate_call_duration_seconds_count{result="accepted",tool="refund_order"} 1`)
	worker := scrape(t, b.worker.Handler)
	require.Contains(t, worker, `idemgate_downstream_calls_total{provider="stripe",result="ok"} 1`)
	require.Contains(t, worker, `idemgate_job_duration_seconds_count{result="succeeded",tool="refund_order"} 1`)
	require.Contains(t, worker, `idemgate_claims{status="succeeded"} 1`)
	require.NotContains(t, api+worker, tokenAcme)
}
