package idemgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// rpc posts one JSON-RPC message as a 2025-11-25 client does and decodes
// the answer.
func rpc(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return resp.StatusCode, m
}

// A team's own go-sdk server with the gated tools added (AddTo) keeps what
// idemgate's own /mcp gives: the tasks capability and task-augmented calls
// (the same key is the same task), tasks/get, the envelope checks, the
// scopes, and the audit, beside the team's own tool.
func TestAddToKeepsTasksEnvelopeScopesAndAudit(t *testing.T) {
	t.Parallel()
	dbURL, pool := postgresDB(t, 4)
	svc := runService(t, dbURL, gate.NewRegistry().MustAdd(addNote), nil)
	ctx := t.Context()
	writer, err := svc.CreateToken(ctx, "acme", "bot", "notes:write")
	require.NoError(t, err)
	reader, err := svc.CreateToken(ctx, "acme", "viewer", domain.ScopeOperationsRead)
	require.NoError(t, err)

	server := mcp.NewServer(&mcp.Implementation{Name: "team", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Echoes."}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, struct {
		Text string `json:"text"`
	}, error) {
		return nil, struct {
			Text string `json:"text"`
		}{in.Text}, nil
	})
	h, err := svc.AddTo(server)
	require.NoError(t, err)
	r := chi.NewRouter()
	r.Handle("/mcp", h)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	url := srv.URL + "/mcp"

	// The tasks capability, and taskSupport on the mutation only.
	status, init := rpc(t, url, writer, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	require.Equal(t, http.StatusOK, status)
	caps := init["result"].(map[string]any)["capabilities"].(map[string]any)
	require.Contains(t, caps, "tasks")
	require.Equal(t, "team", init["result"].(map[string]any)["serverInfo"].(map[string]any)["name"])
	_, list := rpc(t, url, writer, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`)
	support := map[string]any{}
	for _, tl := range list["result"].(map[string]any)["tools"].([]any) {
		m := tl.(map[string]any)
		var ts any
		if ex, ok := m["execution"].(map[string]any); ok {
			ts = ex["taskSupport"]
		}
		support[m["name"].(string)] = ts
	}
	require.Equal(t, map[string]any{"echo": nil, "add_note": "optional", "get_operation": nil, "list_operations": nil}, support)

	// A task-augmented call, retried: one task, whose id is the operation's.
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add_note","arguments":{"idempotency_key":"addto-task-0001","text":"hi"},"task":{}}}`
	_, first := rpc(t, url, writer, call)
	task := first["result"].(map[string]any)["task"].(map[string]any)
	taskID := task["taskId"].(string)
	_, again := rpc(t, url, writer, call)
	require.Equal(t, taskID, again["result"].(map[string]any)["task"].(map[string]any)["taskId"])
	_, got := rpc(t, url, writer, `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"`+taskID+`"}}`)
	require.Equal(t, taskID, got["result"].(map[string]any)["taskId"], "%v", got)

	// The envelope is read once, exactly: a member twice is refused and
	// writes nothing.
	_, dup := rpc(t, url, writer, `{"jsonrpc":"2.0","id":5,"id":6,"method":"tools/call","params":{"name":"add_note","arguments":{"idempotency_key":"addto-dup-0001","text":"x"}}}`)
	require.Contains(t, dup, "error", "%v", dup)

	// Scopes: a reader may not call the mutation (a tool error, audited as
	// denied); the team's own tool answers either.
	_, denied := rpc(t, url, reader, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add_note","arguments":{"idempotency_key":"addto-denied-01","text":"x"}}}`)
	require.Equal(t, true, denied["result"].(map[string]any)["isError"], "%v", denied)
	_, echo := rpc(t, url, reader, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	require.Equal(t, map[string]any{"text": "hi"}, echo["result"].(map[string]any)["structuredContent"])

	// The audit: one accepted claim, one denied call, nothing for the
	// duplicate member.
	var accepted, deniedRows, dupRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE decision = 'accepted' AND idempotency_key = 'addto-task-0001'),
		count(*) FILTER (WHERE decision = 'denied' AND user_id = 'viewer'),
		count(*) FILTER (WHERE idempotency_key = 'addto-dup-0001')
		FROM audit_events`).Scan(&accepted, &deniedRows, &dupRows))
	require.Equal(t, [3]int{1, 1, 0}, [3]int{accepted, deniedRows, dupRows})
}
