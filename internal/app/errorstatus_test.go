package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/vocab"
)

// A stored failure answers its code's 4xx on the REST twin, for the call
// that saw it happen and for every replay, never 200 with a problem body
// (docs/errors.md).
func TestRESTStoredFailuresAnswerTheirStatus(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	u := b.url + "/v1/tools/refund_order"

	for _, tc := range []struct {
		name, key string
		body      map[string]any
		code      vocab.Code
		status    int
	}{
		{"CardDeclined", "rest-declined-0001", map[string]any{"order_id": "ord_declined", "amount_cents": 1000}, vocab.CodeCardDeclined, http.StatusPaymentRequired},
		{"AmountExceedsRefundable", "rest-too-much-0001", map[string]any{"order_id": "ord_9f2", "amount_cents": 6000}, vocab.CodeAmountExceedsRefundable, http.StatusUnprocessableEntity},
		{"NotFound", "rest-no-order-0001", map[string]any{"order_id": "ord_missing", "amount_cents": 100}, vocab.CodeNotFound, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := rest(t, http.MethodPost, u, tokenAcme, tc.key, tc.body)
			if resp.StatusCode == http.StatusAccepted {
				// The worker took longer than the api waits: the outcome is
				// stored later, and the replays below still see it.
				awaitStatus(t, b.session, "refund_order", tc.key, vocab.StatusFailed)
			} else {
				requireStoredFailure(t, resp, out, tc.code, tc.status, false)
			}
			for range 2 {
				resp, out = rest(t, http.MethodPost, u, tokenAcme, tc.key, tc.body)
				requireStoredFailure(t, resp, out, tc.code, tc.status, true)
			}

			// Reading the operation is a successful read of a failed one.
			resp, out = rest(t, http.MethodGet, b.url+"/v1/operations/refund_order/"+tc.key, tokenAcme, "", nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, out)
			require.Equal(t, "failed", out["status"])
			require.Equal(t, string(tc.code), out["error"].(map[string]any)["code"])
		})
	}
	require.Empty(t, b.stripe.Refunds(), "no refund for any of them")
}

func requireStoredFailure(t *testing.T, resp *http.Response, out map[string]any, code vocab.Code, status int, replayed bool) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, out)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Equal(t, float64(status), out["status"], "the problem's status is the answer's")
	require.Equal(t, "https://idemgate.dev/errors/"+string(code), out["type"])
	require.Equal(t, string(code), out["error"].(map[string]any)["code"])
	op, ok := out["operation"].(map[string]any)
	require.True(t, ok, "the answer carries the operation: %v", out)
	require.Equal(t, "failed", op["status"])
	require.Equal(t, string(code), op["error"].(map[string]any)["code"])
	if replayed {
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
		require.Equal(t, true, out["replayed"])
	} else {
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		require.Nil(t, out["replayed"], "replayed is omitted on the call that saw the failure")
	}
}
