package api_test

// Tasks for 2026-07-28 clients (SEP-2663, api/taskext.go), and the one
// meaning they share with 2025-11-25's: the task id is the operation id.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// extMeta is a 2026-07-28 _meta declaring the tasks extension.
const extMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

func extHeaders(method, name string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

func extCall(id, tool, args, meta string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + meta + `,"name":"` + tool + `","arguments":` + args + `}}`
}

func extTaskRequest(id, method, taskID, meta string) mcpRequest {
	return mcpRequest{header: extHeaders(method, taskID),
		body: `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{` + meta + `,"taskId":"` + taskID + `"}}`}
}

func TestTasksExtension(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	args := `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"ext-key-000001"}`
	// Not terminal within the wait (0 here, no worker): a task.
	created := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "apply_credit"), body: extCall("1", "apply_credit", args, extMeta)}))
	require.Equal(t, "task", created["resultType"], "%v", created)
	require.Equal(t, "working", created["status"])
	require.EqualValues(t, 3600*24, created["ttlSeconds"])
	require.EqualValues(t, 1000, created["pollIntervalMilliseconds"])
	// The names of the extension's specification and its official client
	// (@modelcontextprotocol/ext-tasks requires ttlMs), beside the SEP's.
	require.EqualValues(t, 3600*24*1000, created["ttlMs"])
	require.EqualValues(t, 1000, created["pollIntervalMs"])
	for _, m := range []string{"task", "ttl", "pollInterval", "result", "error", "inputRequests", "content"} {
		require.NotContains(t, created, m)
	}
	taskID := created["taskId"].(string)
	var opID string
	require.NoError(t, p.pool.QueryRow(t.Context(), `SELECT operation_id::text FROM idempotency_claims WHERE idempotency_key = 'ext-key-000001'`).Scan(&opID))
	require.Equal(t, opID, taskID, "task id = operation id")

	// The same key is the same task: retried on this revision, on either
	// server, and as a 2025-11-25 task.
	for _, srv := range []string{"fast", "sdk"} {
		s := p.fast
		if srv == "sdk" {
			s = p.sdk
		}
		again := resultOf(t, p.send(t, s, mcpRequest{header: extHeaders("tools/call", "apply_credit"), body: extCall("2", "apply_credit", args, extMeta)}))
		require.Equal(t, taskID, again["taskId"], srv)
	}
	legacyTask := resultOf(t, p.send(t, p.fast, mcpRequest{header: legacy,
		body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"apply_credit","arguments":` + args + `,"task":{}}}`}))
	require.Equal(t, taskID, legacyTask["task"].(map[string]any)["taskId"])
	require.Equal(t, 1, p.rows(t).claims)
	require.Equal(t, 1, p.rows(t).jobs)

	// A 2026-07-28 request without the extension never gets a task: plain,
	// with params.task, or with the extension under another name.
	for _, meta := range []string{sessionlessMeta,
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/other":{}}}}`,
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"experimental":{"io.modelcontextprotocol/tasks":{}}}}`,
	} {
		for _, body := range []string{extCall("4", "apply_credit", args, meta),
			strings.Replace(extCall("4", "apply_credit", args, meta), `"arguments":`, `"task":{},"arguments":`, 1)} {
			for _, s := range []*struct{ name string }{{"fast"}, {"sdk"}} {
				srv := p.fast
				if s.name == "sdk" {
					srv = p.sdk
				}
				a := p.send(t, srv, mcpRequest{header: extHeaders("tools/call", "apply_credit"), body: body})
				res := resultOf(t, a)
				require.Equal(t, "complete", res["resultType"], "%s", a)
				require.NotContains(t, res, "taskId", "%s", a)
				require.NotContains(t, res, "task", "%s", a)
				require.Contains(t, a.body, `"outcome":"in_flight"`, "%s", a)
			}
		}
	}
	// A read is answered plainly even with the extension declared.
	read := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "get_operation"),
		body: extCall("5", "get_operation", `{"tool":"apply_credit","idempotency_key":"ext-key-000001"}`, extMeta)}))
	require.Equal(t, "complete", read["resultType"])
	require.NotContains(t, read, "taskId")

	// tasks/get: the task, resultType complete; the routing header is the
	// task id.
	got := resultOf(t, p.send(t, p.fast, extTaskRequest("6", "tasks/get", taskID, extMeta)))
	require.Equal(t, "complete", got["resultType"])
	require.Equal(t, "working", got["status"])
	require.Equal(t, created["pollIntervalMilliseconds"], got["pollIntervalMilliseconds"])
	require.NotContains(t, got, "result")
	bad := extTaskRequest("7", "tasks/get", taskID, extMeta)
	bad.header["Mcp-Name"] = "another"
	a := p.send(t, p.fast, bad)
	require.Equal(t, http.StatusBadRequest, a.status)
	code, _ := rpcErrorOf(t, a)
	require.EqualValues(t, -32020, code)

	// Terminal: the result inlined, what a plain call with the key answers;
	// a call with the key now answers the plain result, not a task.
	p.finish(t, "apply_credit", "ext-key-000001", false)
	got = resultOf(t, p.send(t, p.sdk, extTaskRequest("8", "tasks/get", taskID, extMeta)))
	require.Equal(t, "completed", got["status"], "%v", got)
	result := got["result"].(map[string]any)
	require.Equal(t, "replayed", result["structuredContent"].(map[string]any)["outcome"])
	require.Equal(t, "complete", result["resultType"], "a 2026-07-28 CallToolResult names its resultType")
	require.NotContains(t, got, "pollIntervalMilliseconds")
	require.NotContains(t, got, "pollIntervalMs")
	require.EqualValues(t, 3600*24*1000, got["ttlMs"])
	plain := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "apply_credit"), body: extCall("9", "apply_credit", args, extMeta)}))
	require.Equal(t, "complete", plain["resultType"])
	require.Equal(t, "replayed", plain["structuredContent"].(map[string]any)["outcome"])

	// A failed operation is a completed task whose result is the tool error.
	failArgs := `{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"ext-fail-00001"}`
	failed := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "refund_order"), body: extCall("10", "refund_order", failArgs, extMeta)}))
	p.finish(t, "refund_order", "ext-fail-00001", true)
	got = resultOf(t, p.send(t, p.fast, extTaskRequest("11", "tasks/get", failed["taskId"].(string), extMeta)))
	require.Equal(t, "completed", got["status"])
	require.Equal(t, true, got["result"].(map[string]any)["isError"])

	// tasks/cancel: an acknowledgement; a queued task is cancelled through
	// the gate; an unknown id is acknowledged too.
	queued := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "apply_credit"),
		body: extCall("12", "apply_credit", `{"customer_id":"cus_1","amount_cents":5,"currency":"usd","idempotency_key":"ext-cancel-0001"}`, extMeta)}))
	qid := queued["taskId"].(string)
	ack := resultOf(t, p.send(t, p.fast, extTaskRequest("13", "tasks/cancel", qid, extMeta)))
	require.Equal(t, map[string]any{"resultType": "complete", "_meta": ack["_meta"]}, ack)
	got = resultOf(t, p.send(t, p.fast, extTaskRequest("14", "tasks/get", qid, extMeta)))
	require.Equal(t, "cancelled", got["status"])
	require.NotContains(t, got, "result")
	for _, id := range []string{"0190f0f0-0000-7000-8000-000000000000", "not-a-task"} {
		ack = resultOf(t, p.send(t, p.fast, extTaskRequest("15", "tasks/cancel", id, extMeta)))
		require.Equal(t, "complete", ack["resultType"])
	}
	// tasks/update: acknowledged (no task asks for input).
	upd := extTaskRequest("16", "tasks/update", qid, extMeta)
	upd.body = strings.Replace(upd.body, `"taskId"`, `"inputResponses":{"x":{"action":"accept"}},"taskId"`, 1)
	ack = resultOf(t, p.send(t, p.fast, upd))
	require.Equal(t, "complete", ack["resultType"])

	// Each revision's own methods: no tasks/result or tasks/list on
	// 2026-07-28, no tasks/update on 2025-11-25.
	for _, m := range []string{"tasks/result", "tasks/list"} {
		a := p.send(t, p.fast, extTaskRequest("17", m, qid, extMeta))
		require.Equal(t, http.StatusNotFound, a.status, "%s", a)
		code, _ := rpcErrorOf(t, a)
		require.EqualValues(t, -32601, code)
	}
	a = p.send(t, p.fast, mcpRequest{header: legacy, body: `{"jsonrpc":"2.0","id":18,"method":"tasks/update","params":{"taskId":"` + qid + `"}}`})
	code, _ = rpcErrorOf(t, a)
	require.EqualValues(t, -32601, code)
}

// tasks/get, tasks/update and tasks/cancel on 2026-07-28 need the
// extension declared on that request: without it, -32021 with the
// capability needed, HTTP 400, and nothing done (the refused cancel leaves
// the task working).
func TestTasksMethodsNeedTheExtension(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	created := resultOf(t, p.send(t, p.fast, mcpRequest{header: extHeaders("tools/call", "apply_credit"),
		body: extCall("1", "apply_credit", `{"customer_id":"cus_1","amount_cents":5,"currency":"usd","idempotency_key":"ext-undeclared-1"}`, extMeta)}))
	require.Equal(t, "task", created["resultType"], "%v", created)
	taskID := created["taskId"].(string)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":`
	undeclared := map[string]string{
		"NoExtensions":   meta + `{}}`,
		"OtherExtension": meta + `{"extensions":{"io.example/other":{}}}}`,
		"NotAnObject":    meta + `{"extensions":{"io.modelcontextprotocol/tasks":true}}}`,
	}
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		for name, m := range undeclared {
			for _, method := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
				r := extTaskRequest("2", method, taskID, m)
				if method == "tasks/update" {
					r.body = strings.Replace(r.body, `"taskId"`, `"inputResponses":{},"taskId"`, 1)
				}
				a := p.send(t, srv, r)
				require.Equal(t, http.StatusBadRequest, a.status, "%s %s: %s", name, method, a)
				var msg struct {
					Error struct {
						Code int64           `json:"code"`
						Data json.RawMessage `json:"data"`
					} `json:"error"`
				}
				require.NoError(t, json.Unmarshal([]byte(a.body), &msg), "%s", a)
				require.EqualValues(t, -32021, msg.Error.Code, "%s %s: %s", name, method, a)
				require.JSONEq(t, `{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`, string(msg.Error.Data))
			}
		}
	}
	got := resultOf(t, p.send(t, p.sdk, extTaskRequest("3", "tasks/get", taskID, extMeta)))
	require.Equal(t, "working", got["status"], "%v", got)
}
