package api_test

// Capabilities and tool metadata per negotiated revision: each client sees
// exactly the members its revision defines.

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// resultOf decodes a JSON-RPC result answer.
func resultOf(tb testing.TB, a mcpAnswer) map[string]any {
	tb.Helper()
	var msg struct {
		Result map[string]any  `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	require.NoError(tb, json.Unmarshal([]byte(a.body), &msg), "%s", a)
	require.Nil(tb, msg.Error, "%s", a)
	require.NotNil(tb, msg.Result, "%s", a)
	return msg.Result
}

const sessionlessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

func TestMembersPerRevision(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	mutations := map[string]bool{"refund_order": true, "apply_credit": true, "reset_seat": true, "send_password_reset": true}
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		// initialize: the tasks capability only on 2025-11-25.
		for version, tasks := range map[string]bool{"2025-11-25": true, "2025-06-18": false, "2025-03-26": false} {
			init := resultOf(t, p.send(t, srv, mcpRequest{header: map[string]string{"Mcp-Protocol-Version": ""},
				body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`}))
			require.Equal(t, version, init["protocolVersion"])
			caps := init["capabilities"].(map[string]any)
			_, has := caps["tasks"]
			require.Equal(t, tasks, has, "%s: %v", version, caps)
			require.NotContains(t, caps, "extensions", version)
		}
		// tools/list before 2026-07-28: no cache hints; execution only on
		// 2025-11-25, on the mutations.
		for version, execution := range map[string]bool{"2025-11-25": true, "2025-06-18": false, "": false} {
			list := resultOf(t, p.send(t, srv, mcpRequest{header: map[string]string{"Mcp-Protocol-Version": version},
				body: `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`}))
			require.NotContains(t, list, "cacheScope", version)
			require.NotContains(t, list, "ttlMs", version)
			require.NotContains(t, list, "resultType", version)
			for _, tl := range list["tools"].([]any) {
				tm := tl.(map[string]any)
				name := tm["name"].(string)
				if execution && mutations[name] {
					require.Equal(t, map[string]any{"taskSupport": "optional"}, tm["execution"], "%s %s", version, name)
				} else {
					require.NotContains(t, tm, "execution", "%s %s", version, name)
				}
			}
		}
		// 2026-07-28: the extension in server/discover, no tasks capability
		// and no execution; the cache hints are this revision's.
		h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
		disc := resultOf(t, p.send(t, srv, mcpRequest{header: h, body: `{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{` + sessionlessMeta + `}}`}))
		caps := disc["capabilities"].(map[string]any)
		require.NotContains(t, caps, "tasks")
		require.Equal(t, map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}, caps["extensions"])
		h["Mcp-Method"] = "tools/list"
		list := resultOf(t, p.send(t, srv, mcpRequest{header: h, body: `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{` + sessionlessMeta + `}}`}))
		require.Equal(t, "public", list["cacheScope"])
		require.Equal(t, "complete", list["resultType"])
		for _, tl := range list["tools"].([]any) {
			require.NotContains(t, tl.(map[string]any), "execution")
		}
	}
}

// A queued task's pollInterval is the same in CreateTaskResult and in
// tasks/get: the in-flight retry advice while it waits for a worker.
func TestPollIntervalIsOneValue(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	credit := `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"poll-key-00001"}`
	created := resultOf(t, p.send(t, p.fast, mcpRequest{header: legacy,
		body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":` + credit + `,"task":{}}}`}))
	task := created["task"].(map[string]any)
	require.Equal(t, "working", task["status"])
	require.EqualValues(t, 1000, task["pollInterval"])
	got := resultOf(t, p.send(t, p.fast, mcpRequest{header: legacy,
		body: `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"` + task["taskId"].(string) + `"}}`}))
	require.Equal(t, task["pollInterval"], got["pollInterval"])
	list := resultOf(t, p.send(t, p.fast, mcpRequest{header: legacy, body: `{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`}))
	require.Equal(t, task["pollInterval"], list["tasks"].([]any)[0].(map[string]any)["pollInterval"])
}

// The server declares what it serves: prompts/list and resources/list
// answer (empty lists), so server/discover and initialize declare prompts
// and resources, without listChanged; nothing is subscribable.
func TestCapabilitiesDeclareWhatIsServed(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
		disc := resultOf(t, p.send(t, srv, mcpRequest{header: h, body: `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + sessionlessMeta + `}}`}))
		init := resultOf(t, p.send(t, srv, mcpRequest{header: map[string]string{"Mcp-Protocol-Version": ""},
			body: `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`}))
		for _, caps := range []map[string]any{disc["capabilities"].(map[string]any), init["capabilities"].(map[string]any)} {
			require.Equal(t, map[string]any{}, caps["prompts"], "%v", caps)
			require.Equal(t, map[string]any{}, caps["resources"], "%v", caps)
			require.Equal(t, map[string]any{}, caps["tools"], "%v", caps)
		}
		for _, m := range []struct{ method, member string }{{"prompts/list", "prompts"}, {"resources/list", "resources"}} {
			h["Mcp-Method"] = m.method
			list := resultOf(t, p.send(t, srv, mcpRequest{header: h, body: `{"jsonrpc":"2.0","id":3,"method":"` + m.method + `","params":{` + sessionlessMeta + `}}`}))
			require.Equal(t, []any{}, list[m.member], "%s: %v", m.method, list)
		}
	}
}
