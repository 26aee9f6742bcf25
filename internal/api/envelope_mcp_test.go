package api_test

// The one reading of a JSON-RPC envelope (api/envelope.go), end to end: on
// the server with the fast path and on the SDK-only one, plain and
// task-augmented calls, with the rows each answer writes.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rows counts what the answers wrote so far.
func (p *mcpPair) rows(tb testing.TB) fuzzRows {
	tb.Helper()
	var r fuzzRows
	require.NoError(tb, p.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM idempotency_claims),
		(SELECT count(*) FROM river_job),
		(SELECT count(*) FROM audit_events),
		(SELECT count(*) FROM audit_events WHERE decision = 'denied')`).Scan(&r.claims, &r.jobs, &r.audit, &r.denied))
	return r
}

// rpcErrorOf decodes a JSON-RPC error answer.
func rpcErrorOf(tb testing.TB, a mcpAnswer) (code int64, message string) {
	tb.Helper()
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	require.NoError(tb, json.Unmarshal([]byte(a.body), &msg), "%s", a)
	require.Equal(tb, "2.0", msg.JSONRPC, "%s", a)
	require.NotNil(tb, msg.Error, "not an error: %s", a)
	require.Nil(tb, msg.Result, "%s", a)
	return msg.Error.Code, msg.Error.Message
}

// Issue 25, finding 4: the task layer decoded the envelope with
// encoding/json (names matched without regard to case, the last one wins)
// and checked neither jsonrpc nor the id, so these bodies, sent as
// task-augmented calls, credited 77,777 cents where a proxy saw 1, refunded
// where an allowlist saw a read, and ran tools/call where a log saw ping.
// Now every path reads one way and refuses them with the JSON-RPC error,
// and nothing is written.
func TestMCPSmuggledEnvelopesWriteNothing(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	credit := func(cents string) string {
		return `{"customer_id":"cus_1","amount_cents":` + cents + `,"currency":"usd","idempotency_key":"smuggle-key-0001"}`
	}
	refund := `{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"smuggle-key-0002"}`
	// Each body holds TASK where params.task goes, after the name.
	for _, c := range []struct {
		name, body string
		code       int64
	}{
		{"ArgumentsInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit"TASK,"arguments":` + credit("1") + `,"Arguments":` + credit("77777") + `}}`, -32602},
		{"ArgumentsTwice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit"TASK,"arguments":` + credit("1") + `,"arguments":` + credit("77777") + `}}`, -32602},
		{"NameInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order"TASK,"NAME":"refund_order","arguments":` + refund + `}}`, -32602},
		{"NameEscapedTwice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order"TASK,"n\u0061me":"refund_order","arguments":` + refund + `}}`, -32602},
		{"MethodInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"MethodOnlyInOtherCase", `{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"TaskInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"Task":{},"arguments":` + refund + `}}`, -32602},
		{"MetaInOtherCase", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"_meta":{"progressToken":1,"ProgressToken":2},"arguments":` + refund + `}}`, -32602},
		{"JSONRPC1", `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"JSONRPCMissing", `{"id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDNull", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDBool", `{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDObject", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDArray", `{"jsonrpc":"2.0","id":[1],"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDFraction", `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"IDTwice", `{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}`, -32600},
		{"Batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund + `}}]`, -32600},
		{"Malformed", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order"TASK,"arguments":` + refund, -32700},
	} {
		for _, task := range []bool{true, false} {
			body := strings.Replace(c.body, "TASK", map[bool]string{true: `,"task":{"ttl":60000}`, false: ""}[task], 1)
			name := c.name + map[bool]string{true: "/Task", false: "/Plain"}[task]
			t.Run(name, func(t *testing.T) {
				if !task && strings.HasPrefix(c.name, "Task") {
					t.Skip("no task member to repeat")
				}
				before := p.rows(t)
				ans, fast := p.compare(t, mcpRequest{header: legacy, body: body})
				require.False(t, fast)
				require.Equal(t, http.StatusBadRequest, ans.status, "%s", ans)
				require.Equal(t, "application/json", ans.header.Get("Content-Type"))
				code, _ := rpcErrorOf(t, ans)
				require.Equal(t, c.code, code, "%s", ans)
				require.Equal(t, before, p.rows(t), "rows written: %s", ans)
			})
		}
	}
	require.Equal(t, fuzzRows{}, p.rows(t), "nothing at all was written")
}

// A task-augmented call went around the SDK's transport and so around its
// checks. Now it is answered behind them, as a plain call is: each header
// a plain call is refused for refuses the task call the same way, and
// writes nothing.
func TestMCPTaskCallsPassTheTransportChecks(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	args := `{"customer_id":"cus_1","amount_cents":5,"currency":"usd","idempotency_key":"transport-key-01"}`
	plain := call("1", "apply_credit", args, false)
	task := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":` + args + `,"task":{}}}`
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"HostNotLoopback", with(legacy, "Host", "example.com"), http.StatusForbidden},
		{"ContentTypeText", with(legacy, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType},
		{"ContentTypeMissing", with(legacy, "Content-Type", ""), http.StatusUnsupportedMediaType},
		{"AcceptJSONOnly", with(legacy, "Accept", "application/json"), http.StatusBadRequest},
		{"AcceptMissing", with(legacy, "Accept", ""), http.StatusBadRequest},
		{"ProtocolVersionUnknown", with(legacy, "Mcp-Protocol-Version", "2020-01-01"), http.StatusBadRequest},
		{"LastEventID", with(legacy, "Last-Event-ID", "x_1"), http.StatusBadRequest},
		{"StatelessWithoutMeta", stateless("apply_credit"), http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := p.rows(t)
			asTask, _ := p.compare(t, mcpRequest{header: c.header, body: task})
			asPlain := p.send(t, p.sdk, mcpRequest{header: c.header, body: plain})
			require.Equal(t, c.status, asTask.status, "%s", asTask)
			require.Equal(t, asPlain.String(), asTask.String())
			require.Equal(t, before, p.rows(t))
		})
	}
	// With the headers a client sends, the same body is a task: the checks
	// above refused it for its headers alone.
	ans := p.send(t, p.fast, mcpRequest{header: legacy, body: task})
	require.Equal(t, http.StatusOK, ans.status, "%s", ans)
	var created struct {
		Result struct {
			Task struct {
				TaskID string `json:"taskId"`
				Status string `json:"status"`
			} `json:"task"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(ans.body), &created), ans.body)
	require.Equal(t, "working", created.Result.Task.Status, ans.body)
	require.Equal(t, fuzzRows{claims: 1, jobs: 1, audit: 1}, p.rows(t))

	// On the sessionless protocol, params.task is no member (the SDK drops
	// it): without the tasks extension declared the call is a plain one,
	// the same operation's in_flight answer; with it (taskext_test.go)
	// the same task.
	statelessTask := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{` + statelessMeta + `,"name":"apply_credit","arguments":` + args + `,"task":{}}}`
	again, _ := p.compare(t, mcpRequest{header: stateless("apply_credit"), body: statelessTask})
	require.Equal(t, http.StatusOK, again.status, "%s", again)
	require.NotContains(t, again.body, `"taskId"`)
	require.Contains(t, again.body, `"operation_id":"`+created.Result.Task.TaskID+`"`)
	require.Contains(t, again.body, `"resultType":"complete"`)
	require.Contains(t, again.body, `"io.modelcontextprotocol/serverInfo"`)
	require.Equal(t, 1, p.rows(t).claims)
}

// An idempotency key "resultType" is valid, and its operation readable:
// the fast path found the bytes "resultType" in the tool's answer and
// answered an error instead.
func TestMCPKeyNamedLikeAProtocolMember(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	args := `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"resultType"}`
	for i, h := range []struct {
		header map[string]string
		meta   bool
	}{{stateless("apply_credit"), true}, {legacy, false}} {
		// The first request (to the SDK server) is accepted, the ones
		// compared are in flight.
		ans, fast := p.compare(t, mcpRequest{header: h.header, body: call("1", "apply_credit", args, h.meta)})
		require.True(t, fast)
		require.Equal(t, http.StatusOK, ans.status, "%s", ans)
		require.Contains(t, ans.body, `"outcome":"in_flight"`)
		require.Contains(t, ans.body, `"idempotency_key":"resultType"`)
		if i == 0 {
			require.True(t, strings.HasSuffix(ans.body, `,"resultType":"complete"}}`), ans.body)
		}
		for _, read := range []struct{ tool, args string }{
			{"get_operation", `{"tool":"apply_credit","idempotency_key":"resultType"}`},
			{"list_operations", `{"tool":"apply_credit"}`},
		} {
			header := h.header
			if h.meta {
				header = stateless(read.tool)
			}
			ans, fast := p.compare(t, mcpRequest{header: header, body: call("2", read.tool, read.args, h.meta)})
			require.True(t, fast, read.tool)
			require.Equal(t, http.StatusOK, ans.status, "%s", ans)
			require.NotContains(t, ans.body, `"isError"`)
			require.Contains(t, ans.body, `"idempotency_key":"resultType"`)
		}
	}
	require.Equal(t, 1, p.rows(t).claims)

	// And over REST.
	rest := func(method, path, body string, header ...string) (int, string) {
		req := httptest.NewRequest(method, p.sdk.URL+path, strings.NewReader(body))
		req.RequestURI = ""
		req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := p.sdk.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := rest(http.MethodPost, "/v1/tools/refund_order", `{"order_id":"ord_9f2","amount_cents":100}`, "Idempotency-Key", "resultType")
	require.Equal(t, http.StatusAccepted, status, body)
	require.Contains(t, body, `"outcome":"accepted"`)
	status, body = rest(http.MethodPost, "/v1/tools/apply_credit", `{"customer_id":"cus_1","amount_cents":250,"currency":"usd"}`, "Idempotency-Key", "resultType")
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, `"outcome":"in_flight"`)
	status, body = rest(http.MethodGet, "/v1/operations/apply_credit/resultType", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"idempotency_key":"resultType"`)
	status, body = rest(http.MethodGet, "/v1/operations?tool=apply_credit", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"idempotency_key":"resultType"`)
}

// A number beyond float64 in the arguments: the SDK, on the sessionless
// protocol, fails to decode the call (its check of the Mcp-Name header)
// and answers HTTP 400 before any handler runs; on the older versions the
// tool's decoder refuses it with invalid_argument and a denied row. The
// fast path answered the tool error on both. Now both servers answer the
// same, with the same rows.
func TestMCPNumberBeyondFloat64AnswersAsTheSDK(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	for _, n := range []string{"1e400", "-1e400", "1.8e308", "1" + strings.Repeat("0", 400)} {
		args := `{"customer_id":"cus_1","amount_cents":` + n + `,"currency":"usd","idempotency_key":"overflow-key-01"}`
		t.Run("Stateless"+n[:min(len(n), 8)], func(t *testing.T) {
			before := p.rows(t)
			ans, fast := p.compare(t, mcpRequest{header: stateless("apply_credit"), body: call("1", "apply_credit", args, true)})
			require.False(t, fast)
			require.Equal(t, http.StatusBadRequest, ans.status, "%s", ans)
			code, _ := rpcErrorOf(t, ans)
			require.EqualValues(t, -32020, code)
			require.Equal(t, before, p.rows(t), "the SDK refuses it before the tool: no row")
		})
		t.Run("Legacy"+n[:min(len(n), 8)], func(t *testing.T) {
			before := p.rows(t)
			ans, fast := p.compare(t, mcpRequest{header: legacy, body: call("1", "apply_credit", args, false)})
			require.True(t, fast)
			require.Equal(t, http.StatusOK, ans.status, "%s", ans)
			require.Contains(t, ans.body, `"isError":true`)
			require.Contains(t, ans.body, `"code":"invalid_argument"`)
			after := p.rows(t)
			require.Equal(t, fuzzRows{audit: 3, denied: 3}, fuzzRows{audit: after.audit - before.audit, denied: after.denied - before.denied},
				"one denied row for each of the three requests compare sends")
		})
	}
	// Numbers any decoder reads stay on the fast path.
	args := `{"customer_id":"cus_1","amount_cents":-1.5,"currency":"usd","idempotency_key":"overflow-key-02"}`
	_, fast := p.compare(t, mcpRequest{header: stateless("apply_credit"), body: call("1", "apply_credit", args, true)})
	require.True(t, fast)
}
