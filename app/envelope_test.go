package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The red-team sent one HTTP request carrying 300 tool calls (a JSON-RPC
// batch, protocol 2025-03-26): 300 denied rows from one request, around any
// per-request limit. Batches are refused whole now, as are envelopes with a
// member twice ("arguments" twice: last one wins in a decoder, another may
// be logged or checked by a proxy). Neither writes anything.
func TestSecurityBatchesAndDuplicateEnvelopeMembersAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	mcpHeaders := []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"MCP-Protocol-Version", "2025-03-26"}

	calls := make([]string, 300)
	for i := range calls {
		calls[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"ord 9f2"}}}`, i)
	}
	batch := "[" + strings.Join(calls, ",") + "]"
	r := doHTTP(t, http.MethodPost, b.url+"/mcp", tokenAcme, []byte(batch), false, mcpHeaders...)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Contains(t, r.raw, "batches are not accepted")

	dup := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order",` +
		`"arguments":{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"dup-envelope-01"},` +
		`"arguments":{"order_id":"ord_9f2","amount_cents":4000,"idempotency_key":"dup-envelope-01"}}}`
	r = doHTTP(t, http.MethodPost, b.url+"/mcp", tokenAcme, []byte(dup), false, mcpHeaders...)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Contains(t, r.raw, "appears twice")

	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM audit_events`), "nothing written")
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims`))
}
