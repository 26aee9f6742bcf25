package tools_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain/refunds"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/pgstore"
	"github.com/idemgate/idemgate/tools"
)

// TestRefundReconcilesAfterStripesKeyWindow: more than 23 hours after the
// first call, Stripe may have forgotten our Idempotency-Key; the refund
// effect lists the charge's refunds and adopts the one whose metadata names
// the operation instead of refunding again.
func TestRefundReconcilesAfterStripesKeyWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, ts := stripetest.Start(t, nil)
	srv.AddCharge("ch_123", 5000, "usd")
	_, pool := pgtest.NewDB(t)
	data := pgstore.New(pool)
	_, err := data.Seed(ctx, &store.SeedFile{Orders: []store.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}})
	require.NoError(t, err)
	client, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL})
	require.NoError(t, err)

	const opID = "5b0b7c9e-6c41-4c43-9a43-1a3c3f0a0b01"
	claim := &gate.Claim{
		OperationID:   opID,
		TenantID:      "acme",
		Tool:          "refund_order",
		DownstreamKey: "idg_" + opID + "_0",
		Args:          json.RawMessage(`{"amount_cents":1500,"order_id":"ord_9f2"}`),
	}
	now := time.Now()
	spec, err := tools.RefundOrderAt(&tools.Deps{Data: data, Orders: data, Stripe: client}, func() time.Time { return now }).Spec()
	require.NoError(t, err)
	effect := spec.Effect

	// The first call refunded; then Stripe's key window passed.
	first, err := effect.Call(ctx, claim)
	require.NoError(t, err)
	require.True(t, srv.ExpireKey(claim.DownstreamKey))
	firstCall := now.Add(-tools.ReconcileAfter - time.Hour)
	claim.FirstCalledAt = &firstCall

	again, err := effect.Call(ctx, claim)
	require.NoError(t, err)
	require.JSONEq(t, string(first), string(again), "the existing refund is adopted")
	require.Len(t, srv.Refunds(), 1, "no second refund at Stripe")

	// Inside the window the key is trusted: with the key expired, Stripe
	// would refund again, which is what the reconciliation prevents.
	recent := now.Add(-time.Hour)
	claim.FirstCalledAt = &recent
	_, err = effect.Call(ctx, claim)
	require.NoError(t, err)
	require.Len(t, srv.Refunds(), 2, "the test Stripe forgot the key: this is the risk reconciliation covers")
}
