package app_test

// The go-sdk v1.8.0 client speaks MCP 2026-07-28: plain calls through its
// session, and tasks of the extension io.modelcontextprotocol/tasks
// (SEP-2663), which the SDK has no API for, through a small raw client of
// this test's own that sends what the extension says (the extension
// declared in each request's _meta, the Mcp-* headers).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// extClient sends 2026-07-28 requests that declare the tasks extension.
type extClient struct {
	t      *testing.T
	url    string
	token  string
	origin string
	id     int
}

type extAnswer struct {
	status      int
	contentType string
	body        []byte
	Result      map[string]any `json:"result"`
	Error       *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *extClient) send(method, name string, params map[string]any) *extAnswer {
	c.t.Helper()
	c.id++
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "ext-test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}},
		},
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	require.NoError(c.t, err)
	req, err := http.NewRequest(http.MethodPost, c.url+"/mcp", bytes.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	a := &extAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	a.body, err = io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.NoError(c.t, json.Unmarshal(a.body, a), "%d %s", a.status, a.body)
	return a
}

func (c *extClient) call(tool string, args map[string]any) *extAnswer {
	return c.send("tools/call", tool, map[string]any{"name": tool, "arguments": args})
}

func (c *extClient) task(method, id string) *extAnswer {
	return c.send(method, id, map[string]any{"taskId": id})
}

// operationID is the operation a plain refund result names.
func operationID(t *testing.T, res map[string]any) string {
	t.Helper()
	sc, _ := res["structuredContent"].(map[string]any)
	op, _ := sc["operation"].(map[string]any)
	id, _ := op["operation_id"].(string)
	require.NotEmpty(t, id, "%v", res)
	return id
}

func TestGoSDKClientTasksExtension(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 0) // every mutation answers before its outcome
	c := &extClient{t: t, url: b.url, token: tokenAcme}
	args := refund("gosdk-task-0001", 1200)

	// Task created: the outcome is not terminal when the (zero) wait ends.
	created := c.call("refund_order", args)
	require.Nil(t, created.Error, "%s", created.body)
	require.Equal(t, "task", created.Result["resultType"], "%s", created.body)
	taskID := created.Result["taskId"].(string)
	var opID string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT operation_id::text FROM idempotency_claims WHERE idempotency_key = 'gosdk-task-0001'`).Scan(&opID))
	require.Equal(t, opID, taskID)

	// The same key: the same task (or, once terminal, the plain result of
	// the same operation).
	again := c.call("refund_order", args)
	require.Nil(t, again.Error, "%s", again.body)
	if again.Result["resultType"] == "task" {
		require.Equal(t, taskID, again.Result["taskId"])
	} else {
		require.Equal(t, taskID, operationID(t, again.Result))
	}

	// Poll tasks/get to the end: completed, the refund's result inlined.
	var got *extAnswer
	for deadline := time.Now().Add(60 * time.Second); ; {
		got = c.task("tasks/get", taskID)
		require.Nil(t, got.Error, "%s", got.body)
		require.Equal(t, "complete", got.Result["resultType"])
		if got.Result["status"] != "working" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Duration(got.Result["pollIntervalMilliseconds"].(float64)) * time.Millisecond)
	}
	require.Equal(t, "completed", got.Result["status"], "%s", got.body)
	result := got.Result["result"].(map[string]any)
	require.Equal(t, "succeeded", result["structuredContent"].(map[string]any)["operation"].(map[string]any)["status"])
	// Retried once more: the plain replay, and one refund at Stripe.
	replay := c.call("refund_order", args)
	require.Equal(t, "complete", replay.Result["resultType"], "%s", replay.body)
	require.Equal(t, taskID, operationID(t, replay.Result))
	require.Len(t, b.stripe.Refunds(), 1)
	require.Equal(t, int64(1200), b.stripe.RefundedAmount("ch_123"))

	// The go-sdk session's plain calls (it declares no extension): never
	// a task, the same operation by key.
	res, err := b.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: args})
	require.NoError(t, err)
	raw, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"operation_id":"`+taskID+`"`)
	require.Contains(t, string(raw), `"replayed":true`)
	require.Len(t, b.stripe.Refunds(), 1)

	// Unknown method: -32601 in a JSON body.
	unknown := c.send("no/such/method", "", nil)
	require.Equal(t, http.StatusNotFound, unknown.status)
	require.Equal(t, "application/json", unknown.contentType)
	require.EqualValues(t, -32601, unknown.Error.Code)

	// A foreign Origin: 403, through the go-sdk client's transport too.
	evil := &extClient{t: t, url: b.url, token: tokenAcme, origin: "http://evil.example.com"}
	refused := evil.call("refund_order", refund("gosdk-origin-001", 100))
	require.Equal(t, http.StatusForbidden, refused.status)
	require.Equal(t, "application/json", refused.contentType)
	client := mcp.NewClient(&mcp.Implementation{Name: "evil", Version: "1"}, nil)
	_, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   b.url + "/mcp",
		HTTPClient: &http.Client{Transport: originTransport{bearerTransport{token: tokenAcme}, "http://evil.example.com"}},
	}, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Forbidden")
	require.Equal(t, 0, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims WHERE idempotency_key = 'gosdk-origin-001'`))
}

// A queued refund cancelled through the extension's tasks/cancel: the
// acknowledgement, then the task is cancelled and Stripe never sees it.
func TestGoSDKClientCancelsAQueuedRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // no worker: the refund stays queued
	c := &extClient{t: t, url: b.url, token: tokenAcme}
	created := c.call("refund_order", refund("gosdk-cancel-001", 300))
	require.Equal(t, "task", created.Result["resultType"], "%s", created.body)
	id := created.Result["taskId"].(string)
	ack := c.task("tasks/cancel", id)
	require.Nil(t, ack.Error, "%s", ack.body)
	require.Equal(t, "complete", ack.Result["resultType"])
	got := c.task("tasks/get", id)
	require.Equal(t, "cancelled", got.Result["status"], "%s", got.body)
	// The same key after the cancellation: the same, cancelled operation.
	again := c.call("refund_order", refund("gosdk-cancel-001", 300))
	require.Equal(t, id, operationID(t, again.Result))
	require.Equal(t, true, again.Result["isError"])
	require.Equal(t, 0, countRows(t, b.pool, `SELECT count(*) FROM river_job WHERE state <> 'cancelled'`))
}

// originTransport adds an Origin header, as a browser page's request has.
type originTransport struct {
	next   http.RoundTripper
	origin string
}

func (o originTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Origin", o.origin)
	return o.next.RoundTrip(r)
}
