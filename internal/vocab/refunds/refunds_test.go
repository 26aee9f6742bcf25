package refunds_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

func request(key string) *refunds.Request {
	return &refunds.Request{ChargeID: "ch_123", AmountCents: 500, DownstreamKey: key, OperationID: "op_" + key, TenantID: "acme", OrderID: "ord_9f2", Reason: "customer asked"}
}

// TestAgainstStripeMock checks our requests' shape and parameters against
// Stripe's own API description, as served by stripe-mock.
func TestAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base := os.Getenv("STRIPE_MOCK_URL")
	if base == "" {
		t.Fatal("STRIPE_MOCK_URL is unset: run scripts/test.sh, or `source scripts/services.sh && services_start`")
	}
	ctx := context.Background()
	c, err := refunds.NewClient(&refunds.Config{APIKey: "sk_test_123", BaseURL: base})
	require.NoError(t, err)
	re, err := c.Create(ctx, request("idg_00000000-0000-4000-8000-000000000001_0"))
	require.NoError(t, err)
	require.NotEmpty(t, re.ID)
	// stripe-mock answers fixtures, so no refund names our operation; the
	// list request itself must be accepted.
	_, err = c.FindByOperation(ctx, "ch_123", "op_x")
	require.ErrorIs(t, err, vocab.ErrNotFound)
}

func newClient(t *testing.T, opts *stripetest.Options) (*refunds.Client, *stripetest.Server) {
	t.Helper()
	srv, ts := stripetest.Start(t, opts)
	srv.AddCharge("ch_123", 5000, "usd")
	c, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL})
	require.NoError(t, err)
	return c, srv
}

func TestCreateIsIdempotentAndAlwaysKeyed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, srv := newClient(t, nil)
	first, err := c.Create(ctx, request("idg_a_0"))
	require.NoError(t, err)
	again, err := c.Create(ctx, request("idg_a_0"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.Replayed)
	require.Equal(t, map[string]int{"idg_a_0": 1}, srv.RefundsByKey())
	require.Zero(t, srv.MissingKey())
	require.Empty(t, srv.ForeignKeys())

	found, err := c.FindByOperation(ctx, "ch_123", "op_idg_a_0")
	require.NoError(t, err)
	require.Equal(t, first.ID, found.ID)

	_, err = c.Create(ctx, &refunds.Request{ChargeID: "ch_123", AmountCents: 1})
	require.Error(t, err, "a refund without our key is refused before Stripe")
	require.Zero(t, srv.MissingKey())
}

func TestTransientErrorsRetryWithinTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, srv := newClient(t, nil)
	srv.FailNext(2, http.StatusInternalServerError)
	re, err := c.Create(ctx, request("idg_b_0"))
	require.NoError(t, err)
	require.NotEmpty(t, re.ID)
	require.Equal(t, 3, srv.Requests(), "two 500s and one success: our retries, not stripe-go's")

	srv.DropNext(1)
	re2, err := c.Create(ctx, request("idg_c_0"))
	require.NoError(t, err, "the dropped response is retried with the same key")
	require.Equal(t, 1, srv.RefundsByKey()["idg_c_0"])
	require.NotEmpty(t, re2.ID)

	// The retries stop at the deadline.
	srv.FailNext(100, http.StatusServiceUnavailable)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Create(dctx, request("idg_d_0"))
	require.Error(t, err)
	info, permanent := refunds.Classify(err)
	require.False(t, permanent, "%v", info)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, srv := newClient(t, nil)
	srv.AddCharge("ch_declined", 5000, "usd")
	srv.SetChargeError("ch_declined", http.StatusPaymentRequired, "card_error", "card_declined")

	cases := []struct {
		name      string
		req       *refunds.Request
		code      vocab.Code
		permanent bool
	}{
		{"CardDeclined", &refunds.Request{ChargeID: "ch_declined", AmountCents: 100, DownstreamKey: "idg_e_0", OperationID: "op_e"}, vocab.CodeCardDeclined, true},
		{"UnknownCharge", &refunds.Request{ChargeID: "ch_nope", AmountCents: 100, DownstreamKey: "idg_f_0", OperationID: "op_f"}, vocab.CodeDownstreamRejected, true},
		{"TooMuch", &refunds.Request{ChargeID: "ch_123", AmountCents: 999999, DownstreamKey: "idg_g_0", OperationID: "op_g"}, vocab.CodeAmountExceedsRefundable, true},
	}
	for _, tc := range cases {
		_, err := c.Create(ctx, tc.req)
		require.Error(t, err, tc.name)
		info, permanent := refunds.Classify(err)
		require.Equal(t, tc.code, info.Code, tc.name)
		require.Equal(t, tc.permanent, permanent, tc.name)
	}

	// Same key, other parameters: Stripe's idempotency_error is definitive.
	_, err := c.Create(ctx, &refunds.Request{ChargeID: "ch_123", AmountCents: 100, DownstreamKey: "idg_h_0", OperationID: "op_h"})
	require.NoError(t, err)
	_, err = c.Create(ctx, &refunds.Request{ChargeID: "ch_123", AmountCents: 200, DownstreamKey: "idg_h_0", OperationID: "op_h"})
	info, permanent := refunds.Classify(err)
	require.Equal(t, vocab.CodeDownstreamIdempotencyMismatch, info.Code)
	require.True(t, permanent)

	// A network error is transient.
	info, permanent = refunds.Classify(errors.New("dial tcp: connection refused"))
	require.False(t, permanent, "%v", info)
}
