package app_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/builtins/stripehook"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// TestKilledWorkersRefundSettledByWebhookAlone: the only worker process
// is killed with SIGKILL once the test Stripe has applied its refund and
// holds the answer; no worker runs after it. The claim is left running
// under a lease that expires. The refund's signed webhook, which Stripe
// could not deliver at first and sends again, alone settles it:
// succeeded with that refund, audited settled_by_provider, one refund
// create at Stripe, and the agent's retry replays it without calling
// Stripe.
func TestKilledWorkersRefundSettledByWebhookAlone(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	smtpAddr, _ := mailpit.Start(t)
	dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 20})
	_, err := pgengine.New(pool).Seed(ctx, seedFile())
	require.NoError(t, err)

	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	cfg.StripeAPIKey = "sk_test_idemgate"
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.SMTPAddr = smtpAddr
	cfg.Secret = "3f9a1c7e5b2d8046e1f7a9c3b5d2e8f041a6c9e3b7d5f2a8c0e4b6d9f1a3c5e7" // a real secret: the worker process validates it
	cfg.InflightTimeout = lease
	cfg.ReaperInterval = time.Second
	cfg.StripeWebhookSecrets = whsecNew
	a, err := app.NewAPI(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	go a.Run(runCtx)
	t.Cleanup(cancel)
	srvURL := startHTTP(t, a)
	session := connect(t, srvURL, tokenAcme)
	// Every event is dropped at first, as when the endpoint is unreachable.
	require.NoError(t, stripeSrv.EnableWebhooks(stripetest.WebhookOptions{URL: srvURL + stripehook.Path, Secret: whsecNew,
		RefundEvents: true, DropRate: 1, Backoff: -1}))

	env := []string{
		"DATABASE_URL=" + dbURL,
		"STRIPE_API_KEY=sk_test_idemgate",
		"STRIPE_API_BASE=" + stripeHTTP.URL,
		"SMTP_ADDR=" + smtpAddr,
		"IDEMGATE_SECRET=" + cfg.Secret,
		"IDEMGATE_INFLIGHT_TIMEOUT=" + lease.String(),
		"IDEMGATE_REAPER_INTERVAL=1s",
		"IDEMGATE_LOG_LEVEL=debug",
		"IDEMGATE_WORKER_ADDR=127.0.0.1:0",
	}
	logPath := filepath.Join(t.TempDir(), "worker.log")
	victim := startWorkerProcess(t, env, logPath)
	applied, release := stripeSrv.HoldNext()
	defer release()
	const key = "refund-kill9-hook-01"
	_, isErr := callTool(t, session, "refund_order", refund(key, 1700))
	require.False(t, isErr)
	var refundID string
	select {
	case refundID = <-applied:
	case <-time.After(60 * time.Second):
		logs, _ := os.ReadFile(logPath)
		t.Fatalf("the worker never reached Stripe; its log:\n%s", logs)
	}
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()

	store := a.Gate.Store()
	claim := func() *core.Claim {
		c, err := store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
		require.NoError(t, err)
		return c
	}
	// The dead worker's lease runs out by the database's clock.
	require.Eventually(t, func() bool {
		c := claim()
		return c.Status == vocab.StatusRunning && !c.LeaseLive
	}, time.Minute, 50*time.Millisecond, "the killed worker's claim, running past its lease")

	// Stripe sends the refund's events again; they alone settle it.
	flush := func() {
		fctx, fcancel := context.WithTimeout(ctx, time.Minute)
		defer fcancel()
		require.NoError(t, stripeSrv.FlushWebhooks(fctx))
	}
	flush()
	dropped := stripeSrv.WebhookStats().DroppedIDs
	require.NotEmpty(t, dropped)
	for _, id := range dropped {
		require.NoError(t, stripeSrv.ResendWebhook(ctx, id))
	}
	flush()
	got := claim()
	require.Equal(t, vocab.StatusSucceeded, got.Status, "settled from the webhook alone")
	require.Contains(t, string(got.Result), refundID)
	require.Equal(t, 1, countRows(t, pool, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1
		AND decision = 'succeeded' AND reason LIKE 'settled_by_provider:%'`, key))
	require.Equal(t, 1, countRows(t, pool, `SELECT count(*) FROM refunds WHERE stripe_refund_id = $1`, refundID))
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM refund_drift`))

	// The held answer is lost with the dead connection; the agent's retry
	// gets the settled outcome and Stripe is not called again.
	stripeSrv.DropNext(1)
	release()
	text := callPatiently(t, session, "refund_order", refund(key, 1700))
	require.Contains(t, text, refundID)
	stats := stripeSrv.Stats()
	require.Equal(t, 1, stats.RefundCreates, "one refund create at Stripe")
	require.Equal(t, 1, stats.RefundsByMetadata[refunds.MetadataOperationID][got.OperationID])
}
