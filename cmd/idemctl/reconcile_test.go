package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/idemgate/idemgate/internal/builtins/stripehook"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

const reconcileSecret = "whsec_test_reconcile_0001"

// seedOrders adds acme's orders ord_9f2 (charge ch_9f2) and ord_once
// (charge ch_once) and ord_dash (charge ch_dash).
func (b *opBundle) seedOrders(t *testing.T) {
	t.Helper()
	_, err := b.db.Store.Seed(context.Background(), &store.SeedFile{Rows: &tools.Seed{Orders: []tools.SeedOrder{
		{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_9f2", AmountCents: 5000, Currency: "usd"},
		{Tenant: "acme", OrderID: "ord_once", ChargeID: "ch_once", AmountCents: 5000, Currency: "usd"},
		{Tenant: "acme", OrderID: "ord_dash", ChargeID: "ch_dash", AmountCents: 5000, Currency: "usd"},
	}}})
	require.NoError(t, err)
}

// refundOf claims a refund of order under key and brings it to succeeded
// with Stripe refund refundID as its result, as the worker does.
func (b *opBundle) refundOf(t *testing.T, key, order, refundID string) *core.Claim {
	t.Helper()
	ctx := context.Background()
	c := coretest.Claim(ctx, t, b.ops.Gate, &coretest.ClaimOpts{Key: key,
		Args: map[string]any{"order_id": order, "amount_cents": json.Number("1500")}}).Claim
	s := b.ops.Gate.Store()
	leased, err := s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	res := fmt.Sprintf(`{"refund_id":%q,"order_id":%q,"amount_cents":1500,"currency":"usd","status":"succeeded"}`, refundID, order)
	done, err := s.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(res)})
	require.NoError(t, err)
	return done
}

// stripeSays delivers a signed refund event to the ingest the webhook
// endpoint uses (the signature checked by stripe-go's webhook package),
// and returns its outcome.
func (b *opBundle) stripeSays(t *testing.T, eventID, refundID, charge, operationID string) stripehook.Outcome {
	t.Helper()
	md := map[string]string{}
	if operationID != "" {
		md[refunds.MetadataOperationID] = operationID
	}
	now := time.Now().Unix()
	payload, err := json.Marshal(map[string]any{"id": eventID, "object": "event", "type": "charge.refund.updated", "created": now,
		"api_version": "2023-10-16", "data": map[string]any{"object": map[string]any{"id": refundID, "object": "refund",
			"amount": 1500, "charge": charge, "currency": "usd", "status": "succeeded", "created": now, "metadata": md}}})
	require.NoError(t, err)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: reconcileSecret})
	ev, err := webhook.ConstructEventWithOptions(payload, signed.Header, reconcileSecret, webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.NoError(t, err)
	e, err := stripehook.FromStripe(&ev)
	require.NoError(t, err)
	out, err := stripehook.NewIngester(b.db.Store, nil).Ingest(context.Background(), e, stripehook.SourceWebhook)
	require.NoError(t, err)
	return out
}

// An order refunded under two keys is reported refunded twice, matched
// by operation id; one refunded once, its call retried, once; a refund
// made in Stripe's dashboard is drift in the list.
func TestReconcile(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		b.seedOrders(t)
		a := b.refundOf(t, "rec-key-a", "ord_9f2", "re_rec_a")
		bb := b.refundOf(t, "rec-key-b", "ord_9f2", "re_rec_b")
		require.Equal(t, stripehook.OutcomeApplied, b.stripeSays(t, "evt_rec_a", "re_rec_a", "ch_9f2", a.OperationID))
		require.Equal(t, stripehook.OutcomeApplied, b.stripeSays(t, "evt_rec_b", "re_rec_b", "ch_9f2", bb.OperationID))
		require.Equal(t, stripehook.OutcomeDuplicate, b.stripeSays(t, "evt_rec_b", "re_rec_b", "ch_9f2", bb.OperationID))

		once := b.refundOf(t, "rec-key-c", "ord_once", "re_rec_c")
		for range 3 { // the client's retries: the same operation
			again := coretest.Claim(ctx, t, b.ops.Gate, &coretest.ClaimOpts{Key: "rec-key-c",
				Args: map[string]any{"order_id": "ord_once", "amount_cents": json.Number("1500")}})
			require.Equal(t, once.OperationID, again.Claim.OperationID)
		}
		b.stripeSays(t, "evt_rec_c", "re_rec_c", "ch_once", once.OperationID)
		b.stripeSays(t, "evt_rec_dash", "re_rec_dashboard", "ch_dash", "") // made in the dashboard

		order := func(id string) map[string]any {
			t.Helper()
			res := idemctl(ctx, t, b.dbURL, "reconcile", "--tenant", "acme", "--order", id)
			require.Equal(t, exitOK, res.code, res.stderr)
			lines := jsonLines(t, res.stdout)
			require.Len(t, lines, 1)
			return lines[0]
		}
		twice := order("ord_9f2")
		require.Equal(t, true, twice["refunded_twice"])
		require.EqualValues(t, 2, twice["refunds"])
		require.Contains(t, twice["summary"], "ord_9f2: 2 refunds succeeded at Stripe for 2 operations under 2 keys (")
		require.Contains(t, twice["summary"], "refunded more than once")
		require.Equal(t, "ch_9f2", twice["charge_id"])
		ops := twice["operations"].([]any)
		require.Len(t, ops, 2)
		for _, o := range ops {
			op := o.(map[string]any)
			require.Equal(t, "succeeded", op["status"])
			require.EqualValues(t, 1500, op["amount_cents"])
			require.Equal(t, []any{op["refund_id"]}, op["stripe_refunds"], "matched by operation id")
		}
		require.Len(t, twice["stripe_refunds"], 2)
		require.Empty(t, twice["drift"])

		one := order("ord_once")
		require.Equal(t, false, one["refunded_twice"], one["summary"])
		require.Len(t, one["operations"], 1, "its retries are that one operation")
		require.EqualValues(t, 1, one["refunds"])
		require.Contains(t, one["summary"], "ord_once: 1 refund succeeded at Stripe for 1 operation under 1 key (re_rec_c")
		require.Contains(t, one["summary"], ": refunded once")
		require.Empty(t, one["drift"])
		// A refund made in Stripe's dashboard: listed for its order, and drift.
		dash := order("ord_dash")
		require.Equal(t, false, dash["refunded_twice"])
		require.Contains(t, dash["summary"], "ord_dash: 1 refund succeeded at Stripe for 0 operations under 0 keys (re_rec_dashboard 1500 USD succeeded by no operation of idemgate's): refunded once; 1 drift record")
		require.Len(t, dash["drift"], 1)

		// The drift list: the dashboard refund alone (idemgate's own
		// refunds are explained), newest first.
		for _, args := range [][]string{{"reconcile"}, {"reconcile", "--tenant", "acme"}} {
			res := idemctl(ctx, t, b.dbURL, args...)
			require.Equal(t, exitOK, res.code, res.stderr)
			lines := jsonLines(t, res.stdout)
			require.Len(t, lines, 1, res.stdout)
			require.Equal(t, "unexplained", lines[0]["kind"])
			require.Equal(t, "re_rec_dashboard", lines[0]["refund_id"])
			require.Equal(t, "ord_dash", lines[0]["order_id"])
			require.NotEmpty(t, lines[0]["detected_at"])
		}
		b.stripeSays(t, "evt_rec_dash2", "re_rec_dashboard_2", "ch_9f2", "")
		res := idemctl(ctx, t, b.dbURL, "reconcile")
		lines := jsonLines(t, res.stdout)
		require.Len(t, lines, 2)
		require.Equal(t, "re_rec_dashboard_2", lines[0]["refund_id"], "newest first")
		require.Equal(t, true, order("ord_9f2")["refunded_twice"])
		require.Contains(t, order("ord_9f2")["summary"], "3 refunds")
	})
}

func TestReconcileFlags(t *testing.T) {
	t.Parallel()
	b := setupOp(t, config.DriverSQLite)
	b.seedOrders(t)
	b.refundOf(t, "rec-flags", "ord_9f2", "re_rec_flags")
	ctx := t.Context()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"OrderWithoutTenant", []string{"--order", "ord_9f2"}, exitUsage, "--tenant is required with --order"},
		{"Limit", []string{"--limit", "0"}, exitUsage, "--limit: must be within 1 and 1000"},
		{"UnknownTenant", []string{"--tenant", "nobody"}, exitFailure, `no tenant "nobody"`},
		{"UnknownTenantOrder", []string{"--tenant", "nobody", "--order", "ord_9f2"}, exitFailure, `no tenant "nobody"`},
		{"UnknownOrder", []string{"--tenant", "acme", "--order", "ord_nope"}, exitFailure, `--order: no order "ord_nope"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := idemctl(ctx, t, b.dbURL, append([]string{"reconcile"}, c.args...)...)
			require.Equal(t, c.code, res.code, res.stderr)
			require.Contains(t, res.stderr, c.want)
			require.Empty(t, strings.TrimSpace(res.stdout))
		})
	}
	// An order with no refund yet: not refunded.
	res := idemctl(ctx, t, b.dbURL, "reconcile", "--tenant", "acme", "--order", "ord_once")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, `"refunded_twice":false`)
	require.Contains(t, res.stdout, "ord_once: 0 refunds succeeded at Stripe for 0 operations under 0 keys: not refunded")
}
