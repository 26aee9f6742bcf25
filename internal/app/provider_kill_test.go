package app_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/builtins/stripehook"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
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
	ks := startKillStack(t, lease, time.Second, func(cfg *config.Config) { cfg.StripeWebhookSecrets = whsecNew })
	stripeSrv, pool, session, env, a := ks.stripe, ks.pool, ks.session, ks.env, ks.api
	// Every event is dropped at first, as when the endpoint is unreachable.
	require.NoError(t, stripeSrv.EnableWebhooks(stripetest.WebhookOptions{URL: ks.url + stripehook.Path, Secret: whsecNew,
		RefundEvents: true, DropRate: 1, Backoff: -1}))

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
