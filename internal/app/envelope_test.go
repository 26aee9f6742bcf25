package app_test

import (
	"context"
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

// The caller's X-Request-Id was stored as our request id. Now idemgate
// always mints its own (the answer's X-Request-Id, the audit row's
// request_id) and keeps a well-formed caller id apart; a malformed one
// (too long, other characters) is dropped.
func TestSecurityClientRequestIDIsKeptApart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body := []byte(`{"order_id":"ord_9f2","amount_cents":100}`)
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, body, false,
		"Idempotency-Key", "client-reqid-0001", "X-Request-Id", "req_0123456789abcdef")
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	ours := r.header.Get("X-Request-Id")
	require.Regexp(t, `^req_[0-9a-f]{16}$`, ours)
	require.NotEqual(t, "req_0123456789abcdef", ours, "a caller cannot choose our id, even one shaped like it")
	var reqID, clientID string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT request_id, client_request_id FROM audit_events
		WHERE idempotency_key = 'client-reqid-0001'`).Scan(&reqID, &clientID))
	require.Equal(t, ours, reqID)
	require.Equal(t, "req_0123456789abcdef", clientID)

	for i, bad := range []string{strings.Repeat("x", 65), "id with spaces", "id\u00e9"} {
		key := fmt.Sprintf("client-reqid-bad%d", i)
		r = doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, body, false,
			"Idempotency-Key", key, "X-Request-Id", bad)
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT client_request_id FROM audit_events
			WHERE idempotency_key = $1`, key).Scan(&clientID))
		require.Empty(t, clientID, "malformed caller id %q is dropped", bad)
	}
}
