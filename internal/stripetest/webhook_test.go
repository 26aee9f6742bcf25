package stripetest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/idemgate/idemgate/internal/stripetest"
)

const (
	whSecret    = "whsec_stripetest_current"
	whOldSecret = "whsec_stripetest_previous"
)

// receiver is a webhook endpoint that verifies every delivery with
// stripe-go's webhook package, as production will, and counts.
type receiver struct {
	mu       sync.Mutex
	secrets  []string // any one verifies
	events   []stripe.Event
	headers  []string
	rejected []error
	failNext int // answer 500 to the next n verified deliveries
	failAll  bool
}

func newReceiver(t *testing.T, secrets ...string) (*receiver, *httptest.Server) {
	t.Helper()
	rc := &receiver{secrets: secrets}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	return rc, srv
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	header := r.Header.Get("Stripe-Signature")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var ev stripe.Event
	err = webhook.ErrNoValidSignature
	for _, secret := range rc.secrets {
		ev, err = webhook.ConstructEventWithOptions(payload, header, secret,
			webhook.ConstructEventOptions{Tolerance: 5 * time.Minute})
		if err == nil {
			break
		}
	}
	if err != nil {
		rc.rejected = append(rc.rejected, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rc.failAll || rc.failNext > 0 {
		if rc.failNext > 0 {
			rc.failNext--
		}
		http.Error(w, "try later", http.StatusInternalServerError)
		return
	}
	rc.events = append(rc.events, ev)
	rc.headers = append(rc.headers, header)
	w.WriteHeader(http.StatusOK)
}

func (rc *receiver) got() []stripe.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]stripe.Event(nil), rc.events...)
}

func (rc *receiver) types() []string {
	var out []string
	for _, e := range rc.got() {
		out = append(out, string(e.Type))
	}
	return out
}

func (rc *receiver) ids() []string {
	var out []string
	for _, e := range rc.got() {
		out = append(out, e.ID)
	}
	return out
}

func (rc *receiver) rejections() []error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]error(nil), rc.rejected...)
}

type whBundle struct {
	s   *stripetest.Server
	ts  *httptest.Server
	rc  *receiver
	url string
}

// setupWebhooks starts a receiver, then a test Stripe with Seed 1 sending
// to it: synchronous, no backoff, retries as configured by mod.
func setupWebhooks(t *testing.T, mod func(*stripetest.WebhookOptions)) *whBundle {
	t.Helper()
	rc, rsrv := newReceiver(t, whSecret)
	s, ts := stripetest.Start(t, &stripetest.Options{Seed: 1})
	o := stripetest.WebhookOptions{URL: rsrv.URL, Secret: whSecret, Synchronous: true, Backoff: -1}
	if mod != nil {
		mod(&o)
	}
	require.NoError(t, s.EnableWebhooks(o))
	return &whBundle{s: s, ts: ts, rc: rc, url: rsrv.URL}
}

func flush(t *testing.T, s *stripetest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.FlushWebhooks(ctx))
}

func dataRefund(t *testing.T, e stripe.Event) stripe.Refund {
	t.Helper()
	var r stripe.Refund
	require.NoError(t, json.Unmarshal(e.Data.Raw, &r))
	require.Equal(t, "refund", r.Object)
	return r
}

func dataCharge(t *testing.T, e stripe.Event) stripe.Charge {
	t.Helper()
	var c stripe.Charge
	require.NoError(t, json.Unmarshal(e.Data.Raw, &c))
	require.Equal(t, "charge", c.Object)
	return c
}

var sigHeader = regexp.MustCompile(`^t=[0-9]+,v1=[0-9a-f]{64}$`)

func TestWebhookRefundCreateSendsSignedEvents(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.RefundEvents = true })
	b.s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(b.ts.URL)

	ref, err := sc.Refunds.New(refundParams("ch_1", 1200, "idg_w1"))
	require.NoError(t, err)
	// Synchronous: delivered before the API answered.
	require.Equal(t, []string{"charge.refunded", "refund.created"}, b.rc.types())
	evs := b.rc.got()
	for i, e := range evs {
		require.True(t, strings.HasPrefix(e.ID, "evt_"), e.ID)
		require.Equal(t, "event", e.Object)
		require.Equal(t, stripe.APIVersion, e.APIVersion)
		require.False(t, e.Livemode)
		require.EqualValues(t, 1, e.PendingWebhooks)
		require.NotZero(t, e.Created)
		require.NotNil(t, e.Request)
		require.Equal(t, ref.LastResponse.RequestID, e.Request.ID)
		require.Equal(t, "idg_w1", e.Request.IdempotencyKey)
		require.Regexp(t, sigHeader, b.rc.headers[i])
	}
	ch := dataCharge(t, evs[0])
	require.Equal(t, "ch_1", ch.ID)
	require.EqualValues(t, 5000, ch.Amount)
	require.EqualValues(t, 1200, ch.AmountRefunded)
	require.False(t, ch.Refunded, "partially refunded")
	require.EqualValues(t, 0, evs[0].Data.PreviousAttributes["amount_refunded"])
	r := dataRefund(t, evs[1])
	require.Equal(t, ref.ID, r.ID)
	require.EqualValues(t, 1200, r.Amount)
	require.EqualValues(t, "usd", r.Currency)
	require.Equal(t, "ch_1", r.Charge.ID)
	require.Equal(t, stripe.RefundStatusSucceeded, r.Status)
	require.Equal(t, "op-idg_w1", r.Metadata["idemgate_operation_id"])
	require.Equal(t, ref.Created, r.Created)
	require.Empty(t, r.FailureReason)

	// A replay creates nothing and sends nothing; the rest of the charge
	// refunds it fully.
	_, err = sc.Refunds.New(refundParams("ch_1", 1200, "idg_w1"))
	require.NoError(t, err)
	require.Len(t, b.rc.got(), 2)
	_, err = sc.Refunds.New(refundParams("ch_1", 3800, "idg_w2"))
	require.NoError(t, err)
	evs = b.rc.got()
	require.Len(t, evs, 4)
	ch = dataCharge(t, evs[2])
	require.EqualValues(t, 5000, ch.AmountRefunded)
	require.True(t, ch.Refunded, "fully refunded")
	require.Equal(t, false, evs[2].Data.PreviousAttributes["refunded"])

	st := b.s.Stats().Webhooks
	require.True(t, st.Enabled)
	require.Equal(t, 4, st.Emitted)
	require.Equal(t, 4, st.Delivered)
	require.Equal(t, 4, st.Attempts)
	require.Equal(t, map[string]int{"charge.refunded": 2, "refund.created": 2}, st.DeliveredByType)
	require.Len(t, st.DeliveredByID, 4)
	require.Zero(t, st.Pending)
	require.Empty(t, b.rc.rejections())
}

func TestWebhookPinnedVersionSendsOnlyChargeEvents(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, nil)
	b.s.AddCharge("ch_1", 5000, "usd")
	ref, err := newClient(b.ts.URL).Refunds.New(refundParams("ch_1", 1000, "idg_p"))
	require.NoError(t, err)
	require.NoError(t, b.s.FailRefund(context.Background(), ref.ID, stripe.RefundFailureReasonLostOrStolenCard))
	require.Equal(t, []string{"charge.refunded", "charge.refund.updated"}, b.rc.types())
	r := dataRefund(t, b.rc.got()[1])
	require.Equal(t, stripe.RefundStatusFailed, r.Status)
	require.Equal(t, stripe.RefundFailureReasonLostOrStolenCard, r.FailureReason)
}

func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.DuplicateRate = 1 })
	b.s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(b.ts.URL)
	for _, key := range []string{"idg_d1", "idg_d2"} {
		_, err := sc.Refunds.New(refundParams("ch_1", 100, key))
		require.NoError(t, err)
	}
	ids := b.rc.ids()
	require.Len(t, ids, 4)
	require.Equal(t, ids[0], ids[1])
	require.Equal(t, ids[2], ids[3])
	require.NotEqual(t, ids[0], ids[2])
	st := b.s.WebhookStats()
	require.Equal(t, 2, st.Emitted)
	require.Equal(t, 2, st.Duplicated)
	require.Equal(t, 4, st.Delivered)
	require.Equal(t, map[string]int{ids[0]: 2, ids[2]: 2}, st.DeliveredByID)
	require.Equal(t, map[string]int{"charge.refunded": 4}, st.DeliveredByType)
	for _, e := range b.s.WebhookEvents() {
		require.True(t, e.Duplicated)
		require.Equal(t, 2, e.Delivered)
	}
}

func TestWebhookReorderHoldsOneUntilTheNext(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.ReorderRate = 1 })
	b.s.AddCharge("ch_1", 5000, "usd")
	ctx := context.Background()

	var emitted []string
	for i := range 3 {
		_, err := b.s.DashboardRefund(ctx, "ch_1", 100)
		require.NoError(t, err)
		evs := b.s.WebhookEvents()
		emitted = append(emitted, evs[len(evs)-1].ID)
		if i == 0 {
			require.Empty(t, b.rc.got(), "the first event is held back")
		}
	}
	// e1 held; e2 sent, then e1; e3 held (nothing else is), sent by Flush.
	require.Equal(t, []string{emitted[1], emitted[0]}, b.rc.ids())
	require.Equal(t, 1, b.s.WebhookStats().Pending)
	flush(t, b.s)
	require.Equal(t, []string{emitted[1], emitted[0], emitted[2]}, b.rc.ids())
	st := b.s.WebhookStats()
	require.Equal(t, 2, st.Reordered)
	require.Equal(t, 3, st.Delivered)
	require.Zero(t, st.Pending)
}

func TestWebhookDropsAreRecordedAndResendable(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.DropRate = 1 })
	b.s.AddCharge("ch_1", 5000, "usd")
	_, err := newClient(b.ts.URL).Refunds.New(refundParams("ch_1", 100, "idg_x"))
	require.NoError(t, err)
	flush(t, b.s)
	require.Empty(t, b.rc.got())
	evs := b.s.WebhookEvents()
	require.Len(t, evs, 1)
	require.True(t, evs[0].Dropped)
	require.Zero(t, evs[0].Attempts)
	require.Equal(t, "ch_1", evs[0].ObjectID)
	st := b.s.WebhookStats()
	require.Equal(t, []string{evs[0].ID}, st.DroppedIDs)
	require.Zero(t, st.Attempts)

	require.NoError(t, b.s.ResendWebhook(context.Background(), evs[0].ID))
	require.Equal(t, []string{evs[0].ID}, b.rc.ids())
	require.Error(t, b.s.ResendWebhook(context.Background(), "evt_nope"))
}

// dropPattern runs 30 dashboard refunds with DropRate 0.5 and the given seed
// and returns which were dropped.
func dropPattern(t *testing.T, seed int64) []bool {
	rc, rsrv := newReceiver(t, whSecret)
	s, _ := stripetest.Start(t, &stripetest.Options{Seed: seed})
	require.NoError(t, s.EnableWebhooks(stripetest.WebhookOptions{URL: rsrv.URL, Secret: whSecret, DropRate: 0.5, Backoff: -1}))
	s.AddCharge("ch_1", 1_000_000, "usd")
	for range 30 {
		_, err := s.DashboardRefund(context.Background(), "ch_1", 1)
		require.NoError(t, err)
	}
	flush(t, s)
	var out []bool
	dropped := 0
	for _, e := range s.WebhookEvents() {
		out = append(out, e.Dropped)
		if e.Dropped {
			dropped++
		} else {
			require.Equal(t, 1, e.Delivered)
		}
	}
	require.Len(t, rc.got(), 30-dropped, "every event not dropped arrives")
	require.Equal(t, dropped, len(s.WebhookStats().DroppedIDs))
	return out
}

func TestWebhookDropRateIsSeeded(t *testing.T) {
	t.Parallel()
	a, b := dropPattern(t, 42), dropPattern(t, 42)
	require.Equal(t, a, b)
	require.Contains(t, a, true)
	require.Contains(t, a, false)
}

func TestWebhookRetries(t *testing.T) {
	t.Parallel()
	t.Run("500ThenOK", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.MaxAttempts = 4 })
		b.s.AddCharge("ch_1", 5000, "usd")
		b.rc.mu.Lock()
		b.rc.failNext = 2
		b.rc.mu.Unlock()
		_, err := b.s.DashboardRefund(context.Background(), "ch_1", 0)
		require.NoError(t, err)
		require.Len(t, b.rc.got(), 1)
		st := b.s.WebhookStats()
		require.Equal(t, 3, st.Attempts)
		require.Equal(t, 2, st.FailedAttempts)
		require.Equal(t, 1, st.Delivered)
		require.Empty(t, st.GaveUpIDs)
	})
	t.Run("AlwaysFailingGivesUp", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.MaxAttempts = 3 })
		b.s.AddCharge("ch_1", 5000, "usd")
		b.rc.mu.Lock()
		b.rc.failAll = true
		b.rc.mu.Unlock()
		_, err := b.s.DashboardRefund(context.Background(), "ch_1", 0)
		require.NoError(t, err)
		st := b.s.WebhookStats()
		require.Equal(t, 3, st.Attempts)
		require.Equal(t, 3, st.FailedAttempts)
		require.Zero(t, st.Delivered)
		ev := b.s.WebhookEvents()[0]
		require.Equal(t, []string{ev.ID}, st.GaveUpIDs)
		require.Equal(t, 1, ev.GaveUp)
	})
	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		s, _ := stripetest.Start(t, &stripetest.Options{Seed: 1})
		require.NoError(t, s.EnableWebhooks(stripetest.WebhookOptions{URL: gone.URL, Secret: whSecret, Backoff: -1, MaxAttempts: 2}))
		s.AddCharge("ch_1", 5000, "usd")
		_, err := s.DashboardRefund(context.Background(), "ch_1", 0)
		require.NoError(t, err)
		flush(t, s)
		st := s.WebhookStats()
		require.Equal(t, 2, st.Attempts)
		require.Equal(t, 2, st.FailedAttempts)
		require.Len(t, st.GaveUpIDs, 1)
	})
	t.Run("RetryGoesBehindLaterEvents", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, func(o *stripetest.WebhookOptions) {
			o.Synchronous = false
			o.RefundEvents = true // one refund, two events queued at once
		})
		b.s.AddCharge("ch_1", 5000, "usd")
		b.rc.mu.Lock()
		b.rc.failNext = 1
		b.rc.mu.Unlock()
		_, err := b.s.DashboardRefund(context.Background(), "ch_1", 100)
		require.NoError(t, err)
		flush(t, b.s)
		evs := b.s.WebhookEvents()
		require.Equal(t, []string{evs[1].ID, evs[0].ID}, b.rc.ids())
	})
}

func TestWebhookDashboardRefundHasNoKeyNorMetadata(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.RefundEvents = true })
	b.s.AddCharge("ch_1", 5000, "usd")
	ref, err := b.s.DashboardRefund(context.Background(), "ch_1", 700)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ref.ID, "re_"))
	require.Empty(t, ref.Metadata)
	require.Empty(t, ref.IdempotencyKey)
	require.Equal(t, "succeeded", ref.Status)

	evs := b.rc.got()
	require.Equal(t, []string{"charge.refunded", "refund.created"}, b.rc.types())
	for _, e := range evs {
		require.True(t, strings.HasPrefix(e.Request.ID, "req_"), e.Request.ID)
		require.Empty(t, e.Request.IdempotencyKey)
	}
	require.Contains(t, string(b.s.WebhookEvents()[1].Payload), `"idempotency_key": null`)
	r := dataRefund(t, evs[1])
	require.Equal(t, ref.ID, r.ID)
	require.Empty(t, r.Metadata)
	require.Contains(t, string(evs[1].Data.Raw), `"metadata": {}`)

	// Counted as a refund, not as an API request; visible through the API.
	require.Zero(t, b.s.Requests())
	require.Zero(t, b.s.MissingKey())
	require.Equal(t, map[string]int{"ch_1": 1}, b.s.RefundsByCharge())
	require.Empty(t, b.s.RefundsByKey())
	require.EqualValues(t, 700, b.s.RefundedAmount("ch_1"))
	got, err := newClient(b.ts.URL).Refunds.Get(ref.ID, nil)
	require.NoError(t, err)
	require.EqualValues(t, 700, got.Amount)

	_, err = b.s.DashboardRefund(context.Background(), "ch_1", 99999)
	require.ErrorContains(t, err, "greater than unrefunded amount")
	_, err = b.s.DashboardRefund(context.Background(), "ch_nope", 1)
	require.ErrorContains(t, err, "No such charge")
	require.Len(t, b.s.Refunds(), 1)
}

func TestWebhookFailRefund(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.RefundEvents = true })
	b.s.AddCharge("ch_1", 5000, "usd")
	sc := newClient(b.ts.URL)
	ref, err := sc.Refunds.New(refundParams("ch_1", 5000, "idg_f"))
	require.NoError(t, err)
	require.EqualValues(t, 5000, b.s.RefundedAmount("ch_1"))

	ctx := context.Background()
	require.NoError(t, b.s.FailRefund(ctx, ref.ID, stripe.RefundFailureReasonExpiredOrCanceledCard))
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refund.updated", "refund.updated", "refund.failed"}, b.rc.types())
	evs := b.rc.got()[2:]
	for _, e := range evs {
		r := dataRefund(t, e)
		require.Equal(t, ref.ID, r.ID)
		require.Equal(t, stripe.RefundStatusFailed, r.Status)
		require.Equal(t, stripe.RefundFailureReasonExpiredOrCanceledCard, r.FailureReason)
		require.NotNil(t, r.FailureBalanceTransaction)
		require.Equal(t, "op-idg_f", r.Metadata["idemgate_operation_id"])
		require.Empty(t, e.Request.ID, "not caused by an API request")
	}
	require.Equal(t, "succeeded", evs[1].Data.PreviousAttributes["status"])

	got, err := sc.Refunds.Get(ref.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusFailed, got.Status)
	require.Equal(t, stripe.RefundFailureReasonExpiredOrCanceledCard, got.FailureReason)
	require.Zero(t, b.s.RefundedAmount("ch_1"), "a failed refund gives the amount back")
	require.Equal(t, "failed", b.s.Refunds()[0].Status)
	require.Equal(t, map[string]int{"failed": 1}, b.s.Stats().RefundsByStatus)

	require.ErrorContains(t, b.s.FailRefund(ctx, ref.ID, ""), "already failed")
	require.ErrorContains(t, b.s.FailRefund(ctx, "re_nope", ""), "no such refund")
	require.ErrorContains(t, b.s.FailRefund(ctx, ref.ID, "insufficient_funds"), "unknown failure reason")

	// The charge can be refunded again.
	_, err = sc.Refunds.New(refundParams("ch_1", 5000, "idg_f2"))
	require.NoError(t, err)
}

func TestWebhookPendingThenSucceeded(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) { o.RefundEvents = true })
	b.s.AddCharge("ch_1", 5000, "usd")
	b.s.PendNext(1)
	ref, err := newClient(b.ts.URL).Refunds.New(refundParams("ch_1", 100, "idg_pend"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusPending, ref.Status)
	require.Equal(t, stripe.RefundStatusPending, dataRefund(t, b.rc.got()[1]).Status)

	ctx := context.Background()
	require.NoError(t, b.s.SucceedRefund(ctx, ref.ID))
	evs := b.rc.got()
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refund.updated", "refund.updated"}, b.rc.types())
	require.Equal(t, stripe.RefundStatusSucceeded, dataRefund(t, evs[3]).Status)
	require.Equal(t, "pending", evs[3].Data.PreviousAttributes["status"])
	require.ErrorContains(t, b.s.SucceedRefund(ctx, ref.ID), "not pending")
}

func TestWebhookSignatureRotation(t *testing.T) {
	t.Parallel()
	// The endpoint still knows only the old secret.
	rc, rsrv := newReceiver(t, whOldSecret)
	s, _ := stripetest.Start(t, &stripetest.Options{Seed: 1})
	s.AddCharge("ch_1", 5000, "usd")
	ctx := context.Background()
	require.NoError(t, s.EnableWebhooks(stripetest.WebhookOptions{
		URL: rsrv.URL, Secret: whSecret, PreviousSecret: whOldSecret, Synchronous: true, Backoff: -1, MaxAttempts: 1,
	}))
	_, err := s.DashboardRefund(ctx, "ch_1", 100)
	require.NoError(t, err)
	require.Len(t, rc.got(), 1)
	require.Regexp(t, `^t=[0-9]+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$`, rc.headers[0])
	// Each v1 entry alone verifies with its own secret.
	payload := s.WebhookEvents()[0].Payload
	parts := strings.Split(rc.headers[0], ",")
	require.NoError(t, webhook.ValidatePayload(payload, parts[0]+","+parts[1], whSecret))
	require.NoError(t, webhook.ValidatePayload(payload, parts[0]+","+parts[2], whOldSecret))
	require.ErrorIs(t, webhook.ValidatePayload(payload, parts[0]+","+parts[1], whOldSecret), webhook.ErrNoValidSignature)

	// The old secret expires: the endpoint that did not roll rejects.
	require.NoError(t, s.EnableWebhooks(stripetest.WebhookOptions{URL: rsrv.URL, Secret: whSecret, Synchronous: true, Backoff: -1, MaxAttempts: 1}))
	_, err = s.DashboardRefund(ctx, "ch_1", 100)
	require.NoError(t, err)
	require.Len(t, rc.got(), 1)
	require.Len(t, rc.rejections(), 1)
	require.ErrorIs(t, rc.rejections()[0], webhook.ErrNoValidSignature)
	require.Len(t, s.WebhookStats().GaveUpIDs, 1)
}

func TestWebhookStaleSignatureIsRejected(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) {
		o.MaxAttempts = 1
		o.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
	})
	b.s.AddCharge("ch_1", 5000, "usd")
	_, err := b.s.DashboardRefund(context.Background(), "ch_1", 100)
	require.NoError(t, err)
	require.Empty(t, b.rc.got())
	require.Len(t, b.rc.rejections(), 1)
	require.ErrorIs(t, b.rc.rejections()[0], webhook.ErrTooOld)
}

func TestWebhookAsyncCloseDeliversEverything(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, func(o *stripetest.WebhookOptions) {
		o.Synchronous = false
		o.ReorderRate = 0.5
		o.DuplicateRate = 0.3
	})
	b.s.AddCharge("ch_1", 5000, "usd")
	for range 10 {
		_, err := b.s.DashboardRefund(context.Background(), "ch_1", 100)
		require.NoError(t, err)
	}
	b.s.Close() // waits for every delivery, the held one included
	st := b.s.WebhookStats()
	require.Zero(t, st.Pending)
	require.Equal(t, 10, st.Emitted)
	require.Equal(t, 10+st.Duplicated, st.Delivered)
	require.Len(t, b.rc.got(), st.Delivered)
	require.Len(t, st.DeliveredByID, 10, "none lost")
	require.Positive(t, st.Reordered)

	// After Close events are recorded, not delivered; EnableWebhooks refuses.
	_, err := b.s.DashboardRefund(context.Background(), "ch_1", 100)
	require.NoError(t, err)
	require.Equal(t, 11, b.s.WebhookStats().Emitted)
	require.Len(t, b.rc.got(), st.Delivered)
	require.Error(t, b.s.EnableWebhooks(stripetest.WebhookOptions{URL: b.url, Secret: whSecret}))
}

func TestEnableWebhooksValidates(t *testing.T) {
	t.Parallel()
	s := stripetest.New(nil)
	t.Cleanup(s.Close)
	for _, tc := range []struct {
		name string
		o    stripetest.WebhookOptions
		want string
	}{
		{"NoURL", stripetest.WebhookOptions{Secret: whSecret}, "URL"},
		{"RelativeURL", stripetest.WebhookOptions{URL: "/hook", Secret: whSecret}, "URL"},
		{"NoSecret", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook"}, "Secret"},
		{"DropRate", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook", Secret: whSecret, DropRate: 1.5}, "DropRate"},
		{"ReorderRate", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook", Secret: whSecret, ReorderRate: -0.1}, "ReorderRate"},
		{"DuplicateRate", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook", Secret: whSecret, DuplicateRate: 2}, "DuplicateRate"},
		{"Delay", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook", Secret: whSecret, Delay: -time.Second}, "Delay"},
		{"MaxAttempts", stripetest.WebhookOptions{URL: "http://127.0.0.1:1/hook", Secret: whSecret, MaxAttempts: -1}, "MaxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, s.EnableWebhooks(tc.o), tc.want)
		})
	}
	require.False(t, s.WebhookStats().Enabled)
	require.NoError(t, s.FlushWebhooks(context.Background()), "nothing to flush when off")
}

func TestWebhookControlEndpoints(t *testing.T) {
	t.Parallel()
	rc, rsrv := newReceiver(t, whSecret)
	_, ts := stripetest.Start(t, &stripetest.Options{Seed: 3})
	code, body := control(t, http.MethodPost, ts.URL+"/_webhooks",
		`{"url":"`+rsrv.URL+`","secret":"`+whSecret+`","refund_events":true,"backoff":"1ms","max_attempts":2}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = control(t, http.MethodPost, ts.URL+"/_webhooks", `{"url":"`+rsrv.URL+`","secret":"","backoff":"1ms"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body["error"], "Secret")
	code, _ = control(t, http.MethodPost, ts.URL+"/_webhooks", `{"url":"`+rsrv.URL+`","secret":"x","backoff":"soon"}`)
	require.Equal(t, http.StatusBadRequest, code)

	code, _ = control(t, http.MethodPost, ts.URL+"/_charges", `{"id":"ch_c","amount":1000}`)
	require.Equal(t, http.StatusOK, code)
	code, body = control(t, http.MethodPost, ts.URL+"/_dashboard_refund?charge=ch_c&amount=400", "")
	require.Equal(t, http.StatusOK, code, body)
	id, _ := body["id"].(string)
	require.True(t, strings.HasPrefix(id, "re_"), body)
	code, body = control(t, http.MethodPost, ts.URL+"/_fail_refund?id="+id+"&reason=lost_or_stolen_card", "")
	require.Equal(t, http.StatusOK, code, body)
	code, _ = control(t, http.MethodPost, ts.URL+"/_succeed_refund?id="+id, "")
	require.Equal(t, http.StatusBadRequest, code)

	code, body = control(t, http.MethodPost, ts.URL+"/_webhooks/flush?timeout=30s", "")
	require.Equal(t, http.StatusOK, code, body)
	require.EqualValues(t, 5, body["delivered"])
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refund.updated", "refund.updated", "refund.failed"}, rc.types())

	code, body = control(t, http.MethodGet, ts.URL+"/_stats", "")
	require.Equal(t, http.StatusOK, code)
	wh, _ := body["webhooks"].(map[string]any)
	require.EqualValues(t, 5, wh["emitted"], body)
	require.Equal(t, map[string]any{"failed": float64(1)}, body["refunds_by_status"])

	req, err := http.NewRequest(http.MethodGet, ts.URL+"/_webhook_events", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var events []stripetest.WebhookEvent
	require.NoError(t, json.NewDecoder(res.Body).Decode(&events))
	require.Len(t, events, 5)
	require.Equal(t, "refund.failed", events[4].Type)
	require.Equal(t, id, events[4].ObjectID)
	code, _ = control(t, http.MethodPost, ts.URL+"/_webhooks/resend?id="+events[4].ID, "")
	require.Equal(t, http.StatusOK, code)
	code, _ = control(t, http.MethodPost, ts.URL+"/_webhooks/flush", "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, rc.got(), 6)
	require.Equal(t, events[4].ID, rc.got()[5].ID)
}
