package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// The provider's side, through the built api on both engines: Stripe's
// signed webhooks applied once, in order, settling unknown outcomes and
// revealing drift.

const (
	whsecOld = "whsec_test_provider_old_0001"
	whsecNew = "whsec_test_provider_new_0002"
)

// setupProvider is setupEdges with the webhook endpoint's two secrets (a
// rotation).
func setupProvider(t *testing.T, engine string) *edgeStack {
	return setupEdges(t, engine, func(cfg *config.Config) {
		cfg.StripeWebhookSecrets = whsecOld + "," + whsecNew
	})
}

// hookRefund is the refund object of a test event.
type hookRefund struct {
	ID, Charge, Status, FailureReason string
	Amount, Created                   int64
	Metadata                          map[string]string
}

// event is a Stripe event's JSON carrying r.
func event(id, typ string, created int64, r *hookRefund) []byte {
	obj := map[string]any{"id": "cus_x", "object": "customer"}
	if r != nil {
		md := r.Metadata
		if md == nil {
			md = map[string]string{}
		}
		obj = map[string]any{"id": r.ID, "object": "refund", "amount": r.Amount, "charge": r.Charge, "currency": "usd",
			"status": r.Status, "created": r.Created, "metadata": md}
		if r.FailureReason != "" {
			obj["failure_reason"] = r.FailureReason
		}
	}
	b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": created,
		"api_version": "2023-10-16", "livemode": false, "data": map[string]any{"object": obj}})
	return b
}

// post delivers payload to the webhook endpoint signed with secret at ts
// ("" secret: no signature), and returns the status and body.
func (s *edgeStack) post(t *testing.T, payload []byte, secret string, ts time.Time) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/webhooks/stripe", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: ts})
		req.Header.Set("Stripe-Signature", signed.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// deliver posts payload signed with the current secret and requires 200
// with outcome.
func (s *edgeStack) deliver(t *testing.T, payload []byte, outcome string) {
	t.Helper()
	status, body := s.post(t, payload, whsecOld, time.Now())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"outcome":"`+outcome+`"`, body)
}

// postAll delivers payloads at once, each signed with the current secret,
// and returns their statuses.
func (s *edgeStack) postAll(t *testing.T, payloads ...[]byte) []int {
	t.Helper()
	codes := make([]int, len(payloads))
	var wg sync.WaitGroup
	for i, p := range payloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: p, Secret: whsecOld})
			req, err := http.NewRequest(http.MethodPost, s.url+"/v1/webhooks/stripe", bytes.NewReader(p))
			if err != nil {
				return
			}
			req.Header.Set("Stripe-Signature", signed.Header)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return codes
}

// refundStatus is the status the provider's side holds for a refund.
func (s *edgeStack) refundStatus(t *testing.T, id string) string {
	t.Helper()
	rows := s.db.Rows(t, `SELECT status FROM provider_refunds WHERE refund_id = $1`, id)
	require.Len(t, rows, 1)
	return rows[0]
}

// TestStripeWebhookAppliesEachEventOnce: a signed event is applied once
// whatever its deliveries (redelivered, concurrent); a later refund status
// is never overwritten by an earlier event; unknown types are
// acknowledged; a bad signature, a stale timestamp or no signature change
// nothing; both secrets of a rotation verify.
func TestStripeWebhookAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		base := time.Now().Add(-time.Hour).Unix()
		re := &hookRefund{ID: "re_hook_0001", Charge: "ch_123", Status: "pending", Amount: 300, Created: base}
		created := event("evt_hook_created", "refund.created", base, re)
		s.deliver(t, created, "applied")
		s.deliver(t, created, "duplicate")

		// The same event delivered eight times at once, and a new one eight
		// times at once: each applied once.
		re0 := &hookRefund{ID: "re_hook_0000", Charge: "ch_123", Status: "pending", Amount: 100, Created: base}
		fresh := event("evt_hook_fresh", "refund.created", base, re0)
		for _, c := range s.postAll(t, created, created, created, created, fresh, fresh, fresh, fresh, fresh, fresh, fresh, fresh) {
			require.Equal(t, http.StatusOK, c)
		}
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM provider_events WHERE event_id = 'evt_hook_fresh'`))
		require.Equal(t, "pending", s.refundStatus(t, "re_hook_0000"))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM provider_events WHERE event_id = 'evt_hook_created'`))

		// Out of order: succeeded (later) first, then a pending update made
		// before it: the status stays succeeded.
		re.Status = "succeeded"
		s.deliver(t, event("evt_hook_updated_2", "refund.updated", base+20, re), "applied")
		re.Status = "pending"
		s.deliver(t, event("evt_hook_updated_1", "refund.updated", base+10, re), "stale")
		require.Equal(t, "succeeded", s.refundStatus(t, "re_hook_0001"))

		// Two events of one refund at once, the later delivered with the
		// earlier: the later status wins.
		re2 := &hookRefund{ID: "re_hook_0002", Charge: "ch_123", Status: "succeeded", Amount: 200, Created: base}
		late := *re2
		late.Status, late.FailureReason = "failed", "expired_or_canceled_card"
		for round := range 5 {
			codes := s.postAll(t, event(fmt.Sprintf("evt_hook_c_early_%d", round), "refund.updated", base+30+int64(round)*10, re2),
				event(fmt.Sprintf("evt_hook_c_late_%d", round), "refund.failed", base+35+int64(round)*10, &late))
			require.Equal(t, []int{http.StatusOK, http.StatusOK}, codes)
			require.Equal(t, "failed", s.refundStatus(t, "re_hook_0002"), "round %d", round)
		}

		// Unknown types: acknowledged, ignored.
		s.deliver(t, event("evt_hook_customer", "customer.created", base, nil), "ignored")

		// Refusals change nothing.
		before := s.db.Rows(t, `SELECT event_id FROM provider_events ORDER BY event_id`)
		beforeRefunds := s.db.Rows(t, `SELECT refund_id, status, status_at FROM provider_refunds ORDER BY refund_id`)
		re3 := &hookRefund{ID: "re_hook_0003", Charge: "ch_123", Status: "succeeded", Amount: 100, Created: base}
		forged := event("evt_hook_forged", "refund.created", base, re3)
		for _, c := range []struct {
			name, secret string
			ts           time.Time
			want         string
		}{
			{"OtherSecret", "whsec_test_someone_else_01", time.Now(), "no valid signature"},
			{"Stale", whsecOld, time.Now().Add(-10 * time.Minute), "older than 5m0s"},
			{"Unsigned", "", time.Now(), "no Stripe-Signature header"},
		} {
			status, body := s.post(t, forged, c.secret, c.ts)
			require.Equal(t, http.StatusBadRequest, status, c.name)
			require.Contains(t, body, c.want, c.name)
		}
		// A replay of an applied event's body with a fresh signature of the
		// wrong secret is refused too; with a right one it is a duplicate.
		status, _ := s.post(t, created, "whsec_test_someone_else_01", time.Now())
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, before, s.db.Rows(t, `SELECT event_id FROM provider_events ORDER BY event_id`))
		require.Equal(t, beforeRefunds, s.db.Rows(t, `SELECT refund_id, status, status_at FROM provider_refunds ORDER BY refund_id`))

		// The rotation's new secret verifies.
		status, body := s.post(t, forged, whsecNew, time.Now())
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, `"outcome":"applied"`)
	})
}

// forceUnknown makes the operation of key failed with outcome_unknown, as
// the reaper leaves a refund whose answer was lost.
func (s *edgeStack) forceUnknown(t *testing.T, key string) *core.Claim {
	t.Helper()
	s.db.Exec(t, `UPDATE idempotency_claims SET status = 'failed', attempts = 1, lease_expires_at = NULL,
		error = '{"code":"outcome_unknown","message":"lease expired after 1 attempt(s); reclaim budget 1 spent"}',
		expires_at = $1 WHERE tenant_id = 'acme' AND idempotency_key = $2`, s.db.Time(time.Now().Add(time.Hour)), key)
	return s.claim(t, key)
}

// claim reads the operation of key.
func (s *edgeStack) claim(t *testing.T, key string) *core.Claim {
	t.Helper()
	c, err := s.db.Store.ClaimGetByKey(context.Background(), &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	return c
}

// stripeRefund makes a refund at the test Stripe directly, as a lost
// attempt (or a person in the dashboard) would, with metadata.
func (s *edgeStack) stripeRefund(t *testing.T, amount int, metadata map[string]string) {
	t.Helper()
	form := url.Values{"charge": {"ch_123"}, "amount": {fmt.Sprint(amount)}}
	for k, v := range metadata {
		form.Set("metadata["+k+"]", v)
	}
	req, err := http.NewRequest(http.MethodPost, s.stripeURL+"/v1/refunds", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+stripeKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// TestWebhookSettlesAnUnknownRefund: a refund whose answer was lost (made
// at Stripe under the operation's metadata) and whose operation ended
// outcome_unknown succeeds from the webhook alone, with the refund as its
// result and recorded on the order, audited as settled_by_provider, and
// Stripe is not called again; a failed one fails with Stripe's reason.
func TestWebhookSettlesAnUnknownRefund(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		// No worker runs: the claims stay as the test leaves them.
		callPatiently(t, s.session, "refund_order", refund("settle-unknown-01", 700))
		c := s.forceUnknown(t, "settle-unknown-01")
		s.stripeRefund(t, 700, map[string]string{refunds.MetadataOperationID: c.OperationID})
		made := s.stripe.Refunds()
		require.Len(t, made, 1)
		re := &hookRefund{ID: made[0].ID, Charge: "ch_123", Status: "succeeded", Amount: 700, Created: made[0].Created.Unix(),
			Metadata: made[0].Metadata}
		s.deliver(t, event("evt_settle_1", "refund.created", time.Now().Unix(), re), "applied")
		s.deliver(t, event("evt_settle_1", "refund.created", time.Now().Unix(), re), "duplicate")

		got := s.claim(t, "settle-unknown-01")
		require.Equal(t, vocab.StatusSucceeded, got.Status)
		require.JSONEq(t, fmt.Sprintf(`{"refund_id":%q,"order_id":"ord_9f2","amount_cents":700,"currency":"usd","status":"succeeded"}`, made[0].ID), string(got.Result))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM refunds WHERE stripe_refund_id = $1`, made[0].ID))
		require.Equal(t, 700, s.db.Count(t, `SELECT refunded_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_9f2'`))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = 'settle-unknown-01'
			AND decision = 'succeeded' AND reason LIKE 'settled_by_provider:%'`))
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM refund_drift`), "the operation explains its refund")
		require.Len(t, s.stripe.Refunds(), 1, "Stripe was not called again")

		// The agent's retry replays the settled outcome.
		text := callPatiently(t, s.session, "refund_order", refund("settle-unknown-01", 700))
		require.Contains(t, text, made[0].ID)
		require.Len(t, s.stripe.Refunds(), 1)

		// A refund Stripe reports failed: the operation fails with its reason.
		callPatiently(t, s.session, "refund_order", refund("settle-unknown-02", 800))
		c2 := s.forceUnknown(t, "settle-unknown-02")
		failed := &hookRefund{ID: "re_settle_failed", Charge: "ch_123", Status: "failed", FailureReason: "expired_or_canceled_card",
			Amount: 800, Created: time.Now().Unix(), Metadata: map[string]string{refunds.MetadataOperationID: c2.OperationID}}
		s.deliver(t, event("evt_settle_2", "refund.failed", time.Now().Unix(), failed), "applied")
		got = s.claim(t, "settle-unknown-02")
		require.Equal(t, vocab.StatusFailed, got.Status)
		require.Equal(t, vocab.CodeDownstreamRejected, got.Error.Code)
		require.Contains(t, got.Error.Message, "expired_or_canceled_card")
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = 'settle-unknown-02'
			AND decision = 'failed' AND reason LIKE 'settled_by_provider:%'`))
		require.Len(t, s.stripe.Refunds(), 1, "nothing was called at Stripe")
	})
}

// TestRefundMadeOutsideIdemgateIsDrift: a refund made directly at the test
// Stripe, with no metadata, is recorded as drift once (tenant and order
// from its charge), with an audit row.
func TestRefundMadeOutsideIdemgateIsDrift(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupProvider(t, engine)
		s.stripeRefund(t, 450, nil)
		made := s.stripe.Refunds()
		require.Len(t, made, 1)
		re := &hookRefund{ID: made[0].ID, Charge: "ch_123", Status: "succeeded", Amount: 450, Created: made[0].Created.Unix()}
		s.deliver(t, event("evt_drift_1", "refund.created", time.Now().Unix(), re), "applied")
		s.deliver(t, event("evt_drift_2", "refund.updated", time.Now().Unix()+1, re), "applied")
		require.Equal(t, []string{"unexplained|acme|ord_9f2|ch_123|" + made[0].ID + "|450"},
			s.db.Rows(t, `SELECT kind, tenant_id, order_id, charge_id, refund_id, amount_cents FROM refund_drift`))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE decision = 'drift' AND tenant_id = 'acme'`))
	})
}
