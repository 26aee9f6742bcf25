package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestReMintedKeyMakesNoSecondRefund replays the agent that re-mints its
// key: the same refund under a new key, over MCP and REST, while the first
// is queued and after it succeeded, makes no second refund at the test
// Stripe and names the first operation; confirmed, it runs once; another
// refund with a fresh key runs normally. Both engines.
func TestReMintedKeyMakesNoSecondRefund(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupEdges(t, engine)
		args := func(key string, confirm string) map[string]any {
			a := refund(key, 150)
			a["reason"] = "customer asked on chat"
			if confirm != "" {
				a["confirm_duplicate_of"] = confirm
			}
			return a
		}
		// rest sends a over REST: the key, and a confirmation, as headers.
		rest := func(a map[string]any) *httpResult {
			headers := []string{"Idempotency-Key", a["idempotency_key"].(string)}
			delete(a, "idempotency_key")
			if c, ok := a["confirm_duplicate_of"]; ok {
				headers = append(headers, "Idempotency-Confirm-Duplicate-Of", c.(string))
				delete(a, "confirm_duplicate_of")
			}
			body, err := json.Marshal(a)
			require.NoError(t, err)
			return doHTTP(t, http.MethodPost, s.url+"/v1/tools/refund_order", tokenAcme, body, false, headers...)
		}
		// held checks a possible_duplicate answer naming first.
		held := func(out *result, isErr bool, first *vocab.Operation, status vocab.Status) {
			t.Helper()
			require.True(t, isErr)
			require.Equal(t, vocab.CodePossibleDuplicate, out.Error.Code)
			require.NotNil(t, out.Operation)
			require.Equal(t, first.OperationID, out.Operation.OperationID)
			require.Equal(t, first.IdempotencyKey, out.Operation.IdempotencyKey)
			require.Equal(t, status, out.Operation.Status)
			require.Contains(t, out.Error.Message, first.OperationID)
		}

		// In flight: the first refund is queued (no worker yet).
		out, isErr := callTool(t, s.session, "refund_order", args("remint-mcp-0001", ""))
		require.False(t, isErr)
		first := out.Operation
		require.Equal(t, vocab.StatusQueued, first.Status)
		out, isErr = callTool(t, s.session, "refund_order", args("remint-mcp-0002", ""))
		held(out, isErr, first, vocab.StatusQueued)
		r := rest(args("remint-rest-0003", ""))
		require.Equal(t, http.StatusConflict, r.status, r.raw)
		require.Equal(t, string(vocab.CodePossibleDuplicate), r.code())
		require.Contains(t, r.raw, first.OperationID)

		// Finished: still held within the window.
		s.startWorker()
		awaitPatiently(t, s.session, "remint-mcp-0001", vocab.StatusSucceeded)
		out, isErr = callTool(t, s.session, "refund_order", args("remint-mcp-0004", ""))
		held(out, isErr, first, vocab.StatusSucceeded)
		r = rest(args("remint-rest-0005", ""))
		require.Equal(t, http.StatusConflict, r.status, r.raw)
		require.Equal(t, 1, len(s.stripe.Refunds()), "one refund at the provider")

		// A confirmation must name the earlier operation exactly.
		out, isErr = callTool(t, s.session, "refund_order", args("remint-mcp-0006", "not-an-operation"))
		require.True(t, isErr)
		require.Equal(t, vocab.CodeInvalidArgument, out.Error.Code)
		require.Equal(t, "confirm_duplicate_of", out.Error.Field)

		// Confirmed over REST: a second, separate refund, once.
		r = rest(args("remint-rest-0007", first.OperationID))
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		second := awaitPatiently(t, s.session, "remint-rest-0007", vocab.StatusSucceeded)
		require.NotEqual(t, first.OperationID, second.OperationID)
		again := rest(args("remint-rest-0007", first.OperationID))
		require.Equal(t, http.StatusOK, again.status, again.raw)
		require.Equal(t, true, again.json["replayed"])
		require.Equal(t, 2, len(s.stripe.Refunds()), "the confirmed refund, once")

		// Another refund with a fresh key is not held.
		out, isErr = callTool(t, s.session, "refund_order", refund("remint-mcp-0008", 175))
		require.False(t, isErr, "%+v", out)
		awaitPatiently(t, s.session, "remint-mcp-0008", vocab.StatusSucceeded)
		require.Equal(t, 3, len(s.stripe.Refunds()))
		byKey := s.stripe.RefundsByKey()
		for k, n := range byKey {
			require.Equal(t, 1, n, fmt.Sprintf("downstream key %s", k))
		}

		// The MCP calls' duration, after OpenTelemetry's MCP conventions,
		// on the api's /metrics: the held ones as tool errors.
		metrics := doHTTP(t, http.MethodGet, s.url+"/metrics", "", nil, false)
		require.Equal(t, http.StatusOK, metrics.status)
		var heldSeries, runSeries bool
		for _, line := range strings.Split(metrics.raw, "\n") {
			if !strings.HasPrefix(line, "mcp_server_operation_duration_seconds_count{") ||
				!strings.Contains(line, `gen_ai_tool_name="refund_order"`) || !strings.Contains(line, `mcp_method_name="tools/call"`) {
				continue
			}
			if strings.Contains(line, `error_type="tool_error"`) {
				heldSeries = true
			} else {
				runSeries = true
			}
		}
		require.True(t, heldSeries && runSeries, "no mcp_server_operation_duration_seconds series for refund_order's calls, held and run:\n%s", metrics.raw)
	})
}
