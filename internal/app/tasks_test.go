package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// rpcAnswer is a JSON-RPC response as the MCP endpoint sends it.
type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Error struct {
				Code  vocab.Code `json:"code"`
				Field string     `json:"field"`
			} `json:"error"`
			Operation *vocab.Operation `json:"operation"`
		} `json:"data"`
	} `json:"error"`
}

var rpcID atomic.Int64

// rpc sends one JSON-RPC request to /mcp, as a stateless client does after
// initialize, and returns the answer.
func rpc(t *testing.T, url, token, method string, params any) *rpcAnswer {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": method, "params": params})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url+"/mcp", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var out rpcAnswer
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return &out
}

// task is an MCP task as answered.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
}

func taskCall(t *testing.T, url, token, name string, args map[string]any) *rpcAnswer {
	t.Helper()
	return rpc(t, url, token, "tools/call", map[string]any{"name": name, "arguments": args, "task": map[string]any{}})
}

func createdTask(t *testing.T, a *rpcAnswer) *task {
	t.Helper()
	require.Nil(t, a.Error, "%+v", a.Error)
	var out struct {
		Task *task `json:"task"`
	}
	require.NoError(t, json.Unmarshal(a.Result, &out))
	require.NotNil(t, out.Task, "%s", a.Result)
	return out.Task
}

func getTask(t *testing.T, url, token, id string) *task {
	t.Helper()
	a := rpc(t, url, token, "tasks/get", map[string]any{"taskId": id})
	require.Nil(t, a.Error, "%+v", a.Error)
	var out task
	require.NoError(t, json.Unmarshal(a.Result, &out))
	return &out
}

func TestMCPTasksAreAdvertised(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	init := rpc(t, b.url, tokenAcme, "initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1"},
	})
	require.Nil(t, init.Error)
	var ir struct {
		Capabilities struct {
			Tasks struct {
				List     map[string]any `json:"list"`
				Cancel   map[string]any `json:"cancel"`
				Requests struct {
					Tools struct {
						Call map[string]any `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
			Tools struct {
				ListChanged bool `json:"listChanged"`
			} `json:"tools"`
		} `json:"capabilities"`
	}
	require.NoError(t, json.Unmarshal(init.Result, &ir))
	require.NotNil(t, ir.Capabilities.Tasks.Requests.Tools.Call, "%s", init.Result)
	require.NotNil(t, ir.Capabilities.Tasks.List)
	require.NotNil(t, ir.Capabilities.Tasks.Cancel)
	require.False(t, ir.Capabilities.Tools.ListChanged)

	list := rpc(t, b.url, tokenAcme, "tools/list", map[string]any{})
	require.Nil(t, list.Error)
	var lr struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(list.Result, &lr))
	support := map[string]string{}
	for _, tl := range lr.Tools {
		if tl.Execution != nil {
			support[tl.Name] = tl.Execution.TaskSupport
		}
	}
	require.Equal(t, map[string]string{"refund_order": "optional", "apply_credit": "optional", "reset_seat": "optional", "send_password_reset": "optional"}, support)
}

func TestMCPTaskIsTheOperation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	args := refund("task-refund-0001", 700)
	first := createdTask(t, taskCall(t, b.url, tokenAcme, "refund_order", args))
	require.Equal(t, "working", first.Status)
	require.Equal(t, (24 * time.Hour).Milliseconds(), *first.TTL)
	require.Positive(t, first.PollInterval)
	var opID string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT operation_id::text FROM idempotency_claims WHERE idempotency_key = $1`, "task-refund-0001").Scan(&opID))
	require.Equal(t, opID, first.TaskID, "task id = operation id")

	// The same key retried as a task is the same task; nothing new starts.
	again := createdTask(t, taskCall(t, b.url, tokenAcme, "refund_order", args))
	require.Equal(t, first.TaskID, again.TaskID)
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM river_job`))
	// Other arguments with the key: the usual conflict, as a JSON-RPC error
	// carrying our code.
	conflict := taskCall(t, b.url, tokenAcme, "refund_order", refund("task-refund-0001", 900))
	require.NotNil(t, conflict.Error)
	require.EqualValues(t, -32602, conflict.Error.Code)
	require.Equal(t, vocab.CodeKeyReuseDifferentArgs, conflict.Error.Data.Error.Code)
	// Bad arguments: invalid_argument naming the field, one denied row.
	bad := taskCall(t, b.url, tokenAcme, "refund_order", refund("task-refund-0002", -5))
	require.NotNil(t, bad.Error)
	require.Equal(t, vocab.CodeInvalidArgument, bad.Error.Data.Error.Code)
	require.Equal(t, "amount_cents", bad.Error.Data.Error.Field)
	// A read is no task.
	read := taskCall(t, b.url, tokenAcme, "get_order", map[string]any{"order_id": "ord_9f2"})
	require.NotNil(t, read.Error)
	require.EqualValues(t, -32601, read.Error.Code)
	require.Equal(t, []string{"accepted:", "in_flight:", "conflict:differs in amount_cents", "denied:invalid_argument (amount_cents): must be at least 1, got -5"},
		auditDecisions(t, b.pool, "acme", "refund_order"))

	got := getTask(t, b.url, tokenAcme, first.TaskID)
	require.Equal(t, "working", got.Status)
	require.Contains(t, got.StatusMessage, "queued")
	// Another tenant does not see it; a malformed id is refused.
	for _, id := range []string{first.TaskID, "not-a-task"} {
		a := rpc(t, b.url, tokenGlobex, "tasks/get", map[string]any{"taskId": id})
		require.NotNil(t, a.Error, id)
		require.EqualValues(t, -32602, a.Error.Code)
	}

	complete(t, b, &vocab.Operation{Tool: "refund_order", IdempotencyKey: "task-refund-0001"})
	require.Equal(t, "completed", getTask(t, b.url, tokenAcmeRead, first.TaskID).Status)
	res := rpc(t, b.url, tokenAcme, "tasks/result", map[string]any{"taskId": first.TaskID})
	require.Nil(t, res.Error)
	var payload struct {
		Meta              map[string]map[string]string `json:"_meta"`
		IsError           bool                         `json:"isError"`
		StructuredContent result                       `json:"structuredContent"`
	}
	require.NoError(t, json.Unmarshal(res.Result, &payload))
	require.False(t, payload.IsError)
	require.Equal(t, first.TaskID, payload.Meta["io.modelcontextprotocol/related-task"]["taskId"])
	require.Equal(t, vocab.OutcomeReplayed, payload.StructuredContent.Outcome)
	require.Equal(t, vocab.StatusSucceeded, payload.StructuredContent.Operation.Status)
	// A completed task retried with its key is still that task.
	require.Equal(t, "completed", createdTask(t, taskCall(t, b.url, tokenAcme, "refund_order", args)).Status)

	list := rpc(t, b.url, tokenAcmeRead, "tasks/list", map[string]any{})
	require.Nil(t, list.Error)
	var lr struct {
		Tasks []task `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(list.Result, &lr))
	require.Len(t, lr.Tasks, 1)
	require.Equal(t, first.TaskID, lr.Tasks[0].TaskID)
	require.Equal(t, "completed", lr.Tasks[0].Status)
	// Without params: the first page, and an id-less get refused.
	noParams := rpc(t, b.url, tokenAcmeRead, "tasks/list", nil)
	require.Nil(t, noParams.Error)
	require.Contains(t, string(noParams.Result), first.TaskID)
	noID := rpc(t, b.url, tokenAcmeRead, "tasks/get", nil)
	require.NotNil(t, noID.Error)
	require.EqualValues(t, -32602, noID.Error.Code)
	other := rpc(t, b.url, tokenGlobex, "tasks/list", map[string]any{})
	require.Nil(t, other.Error)
	require.JSONEq(t, `{"tasks":[]}`, string(other.Result))
}

func TestMCPTaskCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	queued := createdTask(t, taskCall(t, b.url, tokenAcme, "refund_order", refund("task-cancel-0001", 300)))

	// The read-only token may look but not cancel.
	denied := rpc(t, b.url, tokenAcmeRead, "tasks/cancel", map[string]any{"taskId": queued.TaskID})
	require.NotNil(t, denied.Error)
	require.Equal(t, vocab.CodeForbidden, denied.Error.Data.Error.Code)

	a := rpc(t, b.url, tokenAcme, "tasks/cancel", map[string]any{"taskId": queued.TaskID})
	require.Nil(t, a.Error, "%+v", a.Error)
	var cancelled task
	require.NoError(t, json.Unmarshal(a.Result, &cancelled))
	require.Equal(t, "cancelled", cancelled.Status)
	require.Equal(t, "cancelled", getTask(t, b.url, tokenAcme, queued.TaskID).Status)
	var status, code, jobState string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT c.status, c.error->>'code', j.state FROM idempotency_claims c JOIN river_job j ON j.id = c.job_id
		WHERE c.operation_id = $1`, queued.TaskID).Scan(&status, &code, &jobState))
	require.Equal(t, []string{"failed", "cancelled", "cancelled"}, []string{status, code, jobState})
	require.Equal(t, []string{"accepted:", "denied:forbidden: the token lacks scope billing:refund for this task", "failed:cancel: cancelled by support-bot before it ran"},
		auditDecisions(t, b.pool, "acme", "refund_order")[0:3])

	again := rpc(t, b.url, tokenAcme, "tasks/cancel", map[string]any{"taskId": queued.TaskID})
	require.NotNil(t, again.Error)
	require.EqualValues(t, -32602, again.Error.Code)
	require.Contains(t, again.Error.Message, "terminal")
	// The plain call with the key replays the cancellation.
	s := connect(t, b.url, tokenAcme)
	replay, isErr := callTool(t, s, "refund_order", refund("task-cancel-0001", 300))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeCancelled, replay.Error.Code)

	// Running: its effect may be under way, so it is refused.
	running := createdTask(t, taskCall(t, b.url, tokenAcme, "refund_order", refund("task-cancel-0002", 300)))
	st := b.api.Gate.Store()
	c, err := st.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: running.TaskID})
	require.NoError(t, err)
	_, err = st.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	refused := rpc(t, b.url, tokenAcme, "tasks/cancel", map[string]any{"taskId": running.TaskID})
	require.NotNil(t, refused.Error)
	require.EqualValues(t, -32602, refused.Error.Code)
	require.Contains(t, refused.Error.Message, "started")
	require.Equal(t, vocab.StatusRunning, refused.Error.Data.Operation.Status)
}

func TestListOperations(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)
	for i := range 5 {
		_, isErr := callTool(t, s, "refund_order", refund(fmt.Sprintf("list-ops-%04d", i), 100+i))
		require.False(t, isErr)
	}
	_, isErr := callTool(t, connect(t, b.url, tokenGlobex), "refund_order", refund("list-ops-globex", 100))
	require.False(t, isErr)

	type page struct {
		Operations []*vocab.Operation `json:"operations"`
		NextCursor string             `json:"next_cursor"`
	}
	var keys []string
	cursor := ""
	for {
		args := map[string]any{"limit": 2}
		if cursor != "" {
			args["cursor"] = cursor
		}
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_operations", Arguments: args})
		require.NoError(t, err)
		require.False(t, res.IsError)
		var p page
		raw, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &p))
		for _, op := range p.Operations {
			keys = append(keys, op.IdempotencyKey)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	require.Equal(t, []string{"list-ops-0004", "list-ops-0003", "list-ops-0002", "list-ops-0001", "list-ops-0000"}, keys)

	// The REST twin, with filters; a bad cursor or limit names its field.
	r := doHTTP(t, http.MethodGet, b.url+"/v1/operations?tool=refund_order&status=queued&limit=3", tokenAcmeRead, nil, false)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	var p page
	require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
	require.Len(t, p.Operations, 3)
	require.NotEmpty(t, p.NextCursor)
	require.Equal(t, "list-ops-0004", p.Operations[0].IdempotencyKey)
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations?status=succeeded", tokenAcmeRead, nil, false)
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"operations":[]}`, r.raw)
	// By an argument's value: every refund of the order (the tenant's only),
	// or the one of an amount.
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations?arg="+url.QueryEscape("order_id=ord_9f2"), tokenAcmeRead, nil, false)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	p = page{}
	require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
	require.Len(t, p.Operations, 5, "acme's five refunds of ord_9f2, not globex's")
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations?tool=refund_order&arg="+url.QueryEscape("amount_cents=102"), tokenAcmeRead, nil, false)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	p = page{}
	require.NoError(t, json.Unmarshal([]byte(r.raw), &p))
	require.Len(t, p.Operations, 1)
	require.Equal(t, "list-ops-0002", p.Operations[0].IdempotencyKey)
	for query, field := range map[string]string{"cursor=bm9wZQ": "cursor", "limit=abc": "limit", "limit=101": "limit", "status=done": "status", "tool=get_order": "tool",
		"arg=order_id": "arg", "arg=" + url.QueryEscape("Order ID=ord_9f2"): "arg"} {
		r := doHTTP(t, http.MethodGet, b.url+"/v1/operations?"+query, tokenAcmeRead, nil, false)
		require.Equal(t, http.StatusBadRequest, r.status, query)
		require.Equal(t, "invalid_argument", r.json["error"].(map[string]any)["code"], query)
		require.Equal(t, field, r.json["error"].(map[string]any)["field"], query)
	}
	require.Equal(t, 7, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE tool = 'list_operations' AND decision = 'denied'`))
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations", "idg_test_nobody", nil, false)
	require.Equal(t, http.StatusUnauthorized, r.status)
}

func TestGetOperationSaysWhenTheNextAttemptRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s := connect(t, b.url, tokenAcme)
	first, isErr := callTool(t, s, "refund_order", refund("next-attempt-0001", 400))
	require.False(t, isErr)
	st := b.api.Gate.Store()
	c, err := st.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "next-attempt-0001"})
	require.NoError(t, err)
	leased, err := st.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)

	// Running: the lease end, no next attempt.
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "get_operation", Arguments: map[string]any{"tool": "refund_order", "idempotency_key": "next-attempt-0001"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	var op vocab.Operation
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &op))
	require.Equal(t, vocab.StatusRunning, op.Status)
	require.NotNil(t, op.LeaseExpiresAt)
	require.Nil(t, op.NextAttemptAt)

	// A transient failure: River retries the job later, as it would after
	// a Stripe outage; the operation says why and when.
	_, err = st.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: c.ID, Epoch: leased.Epoch, LastError: vocab.ErrorInfo{Code: "stripe_unavailable", Message: "Stripe answered 503"}})
	require.NoError(t, err)
	retryAt := time.Now().Add(90 * time.Second).UTC().Truncate(time.Second)
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'retryable', scheduled_at = $2 WHERE id = $1`, first.Operation.JobID, retryAt)
	require.NoError(t, err)
	r := doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/next-attempt-0001", tokenAcmeRead, nil, false)
	require.Equal(t, http.StatusOK, r.status)
	var got vocab.Operation
	require.NoError(t, json.Unmarshal([]byte(r.raw), &got))
	require.Equal(t, vocab.StatusQueued, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, vocab.Code("stripe_unavailable"), got.LastError.Code)
	require.Equal(t, "Stripe answered 503", got.LastError.Message)
	require.NotNil(t, got.NextAttemptAt)
	require.True(t, got.NextAttemptAt.Equal(retryAt), "%s != %s", got.NextAttemptAt, retryAt)
	require.Nil(t, got.LeaseExpiresAt)

	tk := getTask(t, b.url, tokenAcme, first.Operation.OperationID)
	require.Equal(t, "working", tk.Status)
	require.Contains(t, tk.StatusMessage, "stripe_unavailable: Stripe answered 503")
	require.Contains(t, tk.StatusMessage, "attempt 2 next")
	require.Equal(t, time.Minute.Milliseconds(), tk.PollInterval, "polls no faster than the next attempt, at most a minute apart")
}
