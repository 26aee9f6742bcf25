package tools_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
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
	data := pgengine.New(pool)
	_, err := data.Seed(ctx, &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
	})
	require.NoError(t, err)
	client, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL})
	require.NoError(t, err)

	const opID = "5b0b7c9e-6c41-4c43-9a43-1a3c3f0a0b01"
	claim := &core.Claim{
		OperationID:   opID,
		TenantID:      "acme",
		Tool:          "refund_order",
		DownstreamKey: "idg_" + opID + "_0",
		Args:          json.RawMessage(`{"amount_cents":1500,"order_id":"ord_9f2"}`),
	}
	now := time.Now()
	spec, err := tools.Spec(tools.RefundOrderAt(&tools.Deps{DB: builtins.StoreDB(data), Stripe: client}, func() time.Time { return now }))
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

// auditRows records the audit rows a tool writes.
type auditRows struct {
	mu   sync.Mutex
	rows []*core.AuditInsertParams
}

func (a *auditRows) AuditInsert(_ context.Context, p *core.AuditInsertParams) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rows = append(a.rows, p)
	return nil
}

// TestRefundAdoptsTheRefundOfALostOperation: an intent's claim was lost
// with the last commits (a failover, a restore) after its refund reached
// Stripe, and the agent's retry claimed it again under a new operation id
// with the same intent-derived downstream key. Within Stripe's key window
// Stripe answers the key with the first refund; past it the reconciliation
// finds the refund by the downstream key in its metadata. Either way
// nothing is refunded again and an audit row says which refund was adopted
// from which operation. A refund of the same key older than the intent
// window (an earlier intent that reused the key after its history was
// forgotten) is not adopted.
func TestRefundAdoptsTheRefundOfALostOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, ts := stripetest.Start(t, nil)
	srv.AddCharge("ch_123", 5000, "usd")
	_, pool := pgtest.NewDB(t)
	data := pgengine.New(pool)
	_, err := data.Seed(ctx, &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
	})
	require.NoError(t, err)
	client, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL})
	require.NoError(t, err)
	const (
		lostOp = "5b0b7c9e-6c41-4c43-9a43-1a3c3f0a0b02"
		newOp  = "5b0b7c9e-6c41-4c43-9a43-1a3c3f0a0b03"
		key    = "idg_0123456789abcdef0123456789abcdef_0"
	)
	claim := func(op string) *core.Claim {
		return &core.Claim{OperationID: op, TenantID: "acme", Tool: "refund_order", IdempotencyKey: "refund-lost-0001",
			DownstreamKey: key, Args: json.RawMessage(`{"amount_cents":1500,"order_id":"ord_9f2"}`)}
	}
	now := time.Now()
	audit := &auditRows{}
	spec, err := tools.Spec(tools.RefundOrderAt(&tools.Deps{DB: builtins.StoreDB(data), Stripe: client, Audit: audit},
		func() time.Time { return now }))
	require.NoError(t, err)

	first, err := spec.Effect.Call(ctx, claim(lostOp))
	require.NoError(t, err)
	require.Empty(t, audit.rows, "an operation's own refund is not an adoption")
	require.Equal(t, map[string]int{lostOp: 1}, srv.RefundsByMetadata(refunds.MetadataOperationID))
	require.Equal(t, map[string]int{key: 1}, srv.RefundsByMetadata(refunds.MetadataDownstreamKey))

	// Within Stripe's window: Stripe refuses the key, which the lost
	// operation used with other metadata; the charge's refunds name it.
	again, err := spec.Effect.Call(ctx, claim(newOp))
	require.NoError(t, err)
	require.JSONEq(t, string(first), string(again))
	require.Len(t, srv.Refunds(), 1)
	require.Len(t, audit.rows, 1)
	row := audit.rows[0]
	require.Equal(t, newOp, row.OperationID)
	require.Equal(t, "refund-lost-0001", row.IdempotencyKey)
	require.Contains(t, row.Reason, "made by operation "+lostOp)
	require.Contains(t, row.Reason, "Stripe refused the downstream key "+key+" as used with other parameters")

	// Past Stripe's window: the reconciliation finds it by its metadata.
	require.True(t, srv.ExpireKey(key))
	c := claim(newOp)
	firstCall := now.Add(-tools.ReconcileAfter - time.Hour)
	c.FirstCalledAt = &firstCall
	adopted, err := spec.Effect.Call(ctx, c)
	require.NoError(t, err)
	require.JSONEq(t, string(first), string(adopted))
	require.Len(t, srv.Refunds(), 1, "no second refund at Stripe")
	require.Len(t, audit.rows, 2)
	require.Contains(t, audit.rows[1].Reason, "the reconciliation found it by the downstream key "+key)

	// A refund of the same key made longer than the intent window before
	// this generation's first call belongs to an earlier intent.
	later := now.Add(tools.IntentWindow + 2*time.Hour)
	spec, err = tools.Spec(tools.RefundOrderAt(&tools.Deps{DB: builtins.StoreDB(data), Stripe: client, Audit: audit},
		func() time.Time { return later.Add(tools.ReconcileAfter + time.Hour) }))
	require.NoError(t, err)
	c.FirstCalledAt = &later
	_, err = spec.Effect.Call(ctx, c)
	require.NoError(t, err)
	require.Len(t, srv.Refunds(), 2, "the earlier intent's refund is not adopted")
	require.Len(t, audit.rows, 2)
}
