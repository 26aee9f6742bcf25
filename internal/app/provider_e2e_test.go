package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/idemgate/idemgate/internal/builtins/stripehook"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// The provider's side end to end: the test Stripe's own signed webhooks
// (duplicated, reordered, dropped) for refunds made through the api.

// enableWebhooks points the test Stripe's webhooks at the api, signed
// with the rotation's new secret and the old one.
func (s *edgeStack) enableWebhooks(t *testing.T, o stripetest.WebhookOptions) {
	t.Helper()
	o.URL, o.Secret, o.PreviousSecret = s.url+stripehook.Path, whsecNew, whsecOld
	if o.Backoff == 0 {
		o.Backoff = -1
	}
	require.NoError(t, s.stripe.EnableWebhooks(o))
}

// flush waits for the test Stripe's deliveries.
func (s *edgeStack) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, s.stripe.FlushWebhooks(ctx))
}

// waitSucceeded waits (bounded) for the operation of key to succeed.
func (s *edgeStack) waitSucceeded(t *testing.T, key string) {
	t.Helper()
	require.Eventually(t, func() bool { return s.claim(t, key).Status == vocab.StatusSucceeded }, time.Minute, 20*time.Millisecond,
		"operation %s did not succeed", key)
}

// requireStatusesMatchStripe requires a provider_refunds row for each of
// the test Stripe's refunds, in its current status.
func (s *edgeStack) requireStatusesMatchStripe(t *testing.T) {
	t.Helper()
	var want []string
	for _, r := range s.stripe.Refunds() {
		want = append(want, r.ID+"|"+r.Status)
	}
	slices.Sort(want)
	require.Equal(t, want, s.db.Rows(t, `SELECT refund_id || '|' || status FROM provider_refunds ORDER BY refund_id`))
}

// TestStripeWebhooksEndToEnd: refunds made through the api, announced by
// the test Stripe's signed webhooks with duplicates, reordering and drops
// (a fixed seed), are each applied once; once the dropped events are
// resent every refund has its current status; a refund that fails later
// reads failed; and no refund idemgate made is drift.
func TestStripeWebhooksEndToEnd(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupEdgesStripe(t, engine, &stripetest.Options{Seed: 20261206}, func(cfg *config.Config) {
			cfg.StripeWebhookSecrets = whsecOld + "," + whsecNew
		})
		s.enableWebhooks(t, stripetest.WebhookOptions{RefundEvents: true, DuplicateRate: 0.4, ReorderRate: 0.4, DropRate: 0.25})
		s.startWorker()
		const n = 6
		for i := range n {
			// Distinct amounts: distinct intents, not possible duplicates.
			callPatiently(t, s.session, "refund_order", refund(fmt.Sprintf("e2e-hooks-%d", i), 100*(i+1)))
		}
		for i := range n {
			s.waitSucceeded(t, fmt.Sprintf("e2e-hooks-%d", i))
		}
		s.flush(t)
		st := s.stripe.WebhookStats()
		t.Logf("webhooks: emitted %d, delivered %d (distinct %d), duplicated %d, reordered %d, dropped %d, failed attempts %d",
			st.Emitted, st.Delivered, len(st.DeliveredByID), st.Duplicated, st.Reordered, len(st.DroppedIDs), st.FailedAttempts)
		require.Positive(t, st.Duplicated, "the seed duplicates some events")
		require.Positive(t, st.Reordered, "the seed reorders some events")
		require.NotEmpty(t, st.DroppedIDs, "the seed drops some events")
		require.Empty(t, st.GaveUpIDs)
		// The webhook's events only: the periodic list of Stripe's refunds
		// (its pass at a worker's start) records its own, source poll.
		require.Equal(t, len(st.DeliveredByID), s.db.Count(t, `SELECT count(*) FROM provider_events WHERE source = 'webhook'`),
			"each delivered event applied once")
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM refund_drift`), "idemgate made every refund")

		// Stripe redelivers what was dropped: every event is applied once,
		// every refund has its current status.
		for _, id := range st.DroppedIDs {
			require.NoError(t, s.stripe.ResendWebhook(context.Background(), id))
		}
		s.flush(t)
		st = s.stripe.WebhookStats()
		require.Equal(t, st.Emitted, s.db.Count(t, `SELECT count(*) FROM provider_events WHERE source = 'webhook'`))
		require.Len(t, s.stripe.Refunds(), n)
		s.requireStatusesMatchStripe(t)
		require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM provider_refunds WHERE operation_id IS NOT NULL AND tenant_id = 'acme' AND order_id = 'ord_9f2'`))

		// A refund that fails afterwards reads failed.
		first := s.stripe.Refunds()[0]
		require.NoError(t, s.stripe.FailRefund(context.Background(), first.ID, stripe.RefundFailureReasonExpiredOrCanceledCard))
		s.flush(t)
		for _, id := range s.stripe.WebhookStats().DroppedIDs {
			require.NoError(t, s.stripe.ResendWebhook(context.Background(), id))
		}
		s.flush(t)
		require.Equal(t, "failed", s.refundStatus(t, first.ID))
		s.requireStatusesMatchStripe(t)
		require.Equal(t, s.stripe.WebhookStats().Emitted, s.db.Count(t, `SELECT count(*) FROM provider_events WHERE source = 'webhook'`))
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM refund_drift`), "no false drift")

		// Both sides agree: n refunds of ord_9f2 by n operations under n keys.
		rep, err := stripehook.ReconcileOrder(context.Background(), s.db.Store, "acme", "ord_9f2", 100)
		require.NoError(t, err)
		require.Len(t, rep.Operations, n)
		require.Equal(t, n-1, rep.Refunds, "the failed refund moved no money: %s", rep.Summary)
		for _, op := range rep.Operations {
			require.Equal(t, []string{op.RefundID}, op.StripeRefunds, "matched by operation id")
		}
	})
}

// TestLostRefundSettledByWebhookAlone: the test Stripe applies a refund
// and its answer never reaches the worker (held, then dropped), the
// reaper ends the claim outcome_unknown after its reclaim budget, and the
// webhook Stripe redelivers settles it succeeded: one refund create at
// Stripe for the operation, no second call.
func TestLostRefundSettledByWebhookAlone(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		// The events of the refund are not delivered at first (as when the
		// endpoint was unreachable); Stripe sends them again later.
		s.enableWebhooks(t, stripetest.WebhookOptions{RefundEvents: true, DropRate: 1})
		applied, release := s.stripe.HoldNext()
		defer release()
		s.startWorker()
		called := make(chan error, 1)
		go func() { // it waits for the result a while: let it
			_, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: refund("lost-answer-01", 900)})
			called <- err
		}()
		var refundID string
		select {
		case refundID = <-applied:
		case <-time.After(time.Minute):
			t.Fatal("the worker never reached Stripe")
		}
		// The worker is stuck on the answer (as a killed one never gets it);
		// the reaper, its reclaim budget spent, ends the claim outcome_unknown.
		c := s.forceUnknown(t, "lost-answer-01")
		require.Equal(t, vocab.StatusFailed, c.Status)
		require.Equal(t, vocab.CodeOutcomeUnknown, c.Error.Code)

		s.flush(t)
		dropped := s.stripe.WebhookStats().DroppedIDs
		require.NotEmpty(t, dropped)
		for _, id := range dropped {
			require.NoError(t, s.stripe.ResendWebhook(context.Background(), id))
		}
		s.flush(t)

		got := s.claim(t, "lost-answer-01")
		require.Equal(t, vocab.StatusSucceeded, got.Status, "settled from the webhook alone")
		require.Contains(t, string(got.Result), refundID)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = 'lost-answer-01'
			AND decision = 'succeeded' AND reason LIKE 'settled_by_provider:%'`))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM refunds WHERE stripe_refund_id = $1`, refundID))
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM refund_drift`))

		// The held answer is lost for good; the stuck attempt ends.
		s.stripe.DropNext(1)
		release()
		stats := s.stripe.Stats()
		require.Equal(t, 1, stats.RefundCreates, "one refund create at Stripe")
		require.Equal(t, 1, stats.RefundsByMetadata[refunds.MetadataOperationID][c.OperationID])
		require.NoError(t, <-called)
		// The agent's retry gets the settled outcome; Stripe is not called.
		text := callPatiently(t, s.session, "refund_order", refund("lost-answer-01", 900))
		require.Contains(t, text, refundID)
		require.Equal(t, 1, s.stripe.Stats().RefundCreates, "no second call")
	})
}

// poller is the periodic list's pass on the stack's test Stripe, with
// pages of pageSize refunds.
func (s *edgeStack) poller(t *testing.T, pageSize int) *stripehook.Poller {
	t.Helper()
	p, err := stripehook.NewPoller(&stripehook.PollConfig{APIKey: stripeKey, BaseURL: s.stripeURL, PageSize: pageSize,
		Ingest: stripehook.NewIngester(s.db.Store, nil)})
	require.NoError(t, err)
	return p
}

// TestStripeRefundsListCatchesMissedWebhooks: every webhook dropped, the
// periodic list's pass (run directly) records a refund made through the
// api and one made in Stripe's dashboard (drift), page by page, forward
// from its cursor on the next pass, and a later failure; a pass that
// reads nothing new changes nothing. The worker runs the pass as a River
// periodic job too.
func TestStripeRefundsListCatchesMissedWebhooks(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		s.enableWebhooks(t, stripetest.WebhookOptions{RefundEvents: true, DropRate: 1})
		s.startWorker()
		ctx := context.Background()
		callPatiently(t, s.session, "refund_order", refund("list-pass-01", 300))
		s.waitSucceeded(t, "list-pass-01")
		dash, err := s.stripe.DashboardRefund(ctx, "ch_123", 250)
		require.NoError(t, err)
		callPatiently(t, s.session, "refund_order", refund("list-pass-02", 400))
		s.waitSucceeded(t, "list-pass-02")
		s.flush(t)
		require.Zero(t, s.stripe.WebhookStats().Delivered, "every webhook was dropped")

		p := s.poller(t, 2) // two pages
		res, err := p.Pass(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, res.Pages, 2)
		newest := s.stripe.Refunds()[2].ID
		require.Equal(t, newest, res.Cursor)
		require.Equal(t, []string{newest}, s.db.Rows(t, `SELECT value FROM provider_cursors WHERE name = 'stripe_refunds'`))
		s.requireStatusesMatchStripe(t)
		require.Equal(t, []string{"unexplained|acme|ord_9f2|" + dash.ID + "|250"},
			s.db.Rows(t, `SELECT kind, tenant_id, order_id, refund_id, amount_cents FROM refund_drift`),
			"the dashboard refund is drift; idemgate's are not")
		require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM provider_refunds WHERE operation_id IS NOT NULL`))

		// Nothing new: nothing applied.
		res, err = p.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Applied)

		// Three more refunds and a failure: forward from the cursor.
		for i := range 3 {
			callPatiently(t, s.session, "refund_order", refund(fmt.Sprintf("list-pass-1%d", i), 500+10*i))
			s.waitSucceeded(t, fmt.Sprintf("list-pass-1%d", i))
		}
		first := s.stripe.Refunds()[0]
		require.NoError(t, s.stripe.FailRefund(ctx, first.ID, stripe.RefundFailureReasonExpiredOrCanceledCard))
		res, err = p.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, s.stripe.Refunds()[5].ID, res.Cursor)
		s.requireStatusesMatchStripe(t)
		require.Equal(t, "failed", s.refundStatus(t, first.ID))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM refund_drift`), "no false drift")
		require.Positive(t, s.db.Count(t, `SELECT count(*) FROM provider_events WHERE source = 'poll'`))

		// The worker's River runs the pass as a periodic job on the
		// maintenance queue (first when its leader starts).
		require.Eventually(t, func() bool {
			return s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind LIKE '%stripe_refunds_poll' AND queue = $1 AND state = 'completed'`,
				jobs.MaintenanceQueue) > 0
		}, time.Minute, 50*time.Millisecond)
	})
}

// TestKnownRefundSettlesAnOutcomeThatBecameUnknown: Stripe's report of a
// refund arrives while its worker still holds the lease (nothing to
// settle then); the outcome becomes unknown afterwards (the reaper gives
// up). The next pass of the periodic list, which reads that refund again
// (an event id it applied before), settles the operation from the known
// report, with no second call to Stripe; another pass does nothing more.
func TestKnownRefundSettlesAnOutcomeThatBecameUnknown(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		s.enableWebhooks(t, stripetest.WebhookOptions{RefundEvents: true})
		applied, release := s.stripe.HoldNext()
		defer release()
		s.startWorker()
		const key = "known-then-unknown-01"
		called := make(chan error, 1)
		go func() {
			_, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: refund(key, 800)})
			called <- err
		}()
		var refundID string
		select {
		case refundID = <-applied:
		case <-time.After(time.Minute):
			t.Fatal("the worker never reached Stripe")
		}
		s.flush(t)
		poller := s.poller(t, 10)
		_, err := poller.Pass(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM provider_refunds WHERE refund_id = $1 AND status = 'succeeded'`, refundID),
			"Stripe's report is recorded")
		require.Equal(t, vocab.StatusRunning, s.claim(t, key).Status, "nothing to settle while the worker holds the lease")

		c := s.forceUnknown(t, key)
		require.Equal(t, vocab.CodeOutcomeUnknown, c.Error.Code)
		for range 2 {
			_, err = poller.Pass(context.Background())
			require.NoError(t, err)
		}
		got := s.claim(t, key)
		require.Equal(t, vocab.StatusSucceeded, got.Status, "settled from the known report")
		require.Contains(t, string(got.Result), refundID)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1
			AND decision = 'succeeded' AND reason LIKE 'settled_by_provider:%'`, key), "settled once")
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM refunds WHERE stripe_refund_id = $1`, refundID))
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM refund_drift`))

		s.stripe.DropNext(1)
		release()
		require.NoError(t, <-called)
		require.Equal(t, 1, s.stripe.Stats().RefundCreates, "no second call")
	})
}
