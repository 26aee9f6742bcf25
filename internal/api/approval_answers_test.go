package api_test

// How a call awaiting a person's approval is answered, in every shape: a
// plain MCP call and its REST twin (the operation with its approval page
// and retry_after_ms; REST 202 with a Link), a 2025-11-25 task
// (input_required, the page in the status message) and a 2026-07-28 task
// (input_required with a URL-mode elicitation; tasks/update only
// acknowledges).

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApprovalAnswers(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	_, err := p.pool.Exec(t.Context(), `INSERT INTO approval_thresholds (tenant_id, tool, amount_cents) VALUES ('acme', 'apply_credit', 1000)`)
	require.NoError(t, err)
	// apply_credit's Review refuses a credit to an unknown customer before
	// it waits: the customer exists.
	_, err = p.pool.Exec(t.Context(), `INSERT INTO customers (tenant_id, customer_id, currency) VALUES ('acme', 'cus_1', 'usd') ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	args := func(key string) string {
		return `{"customer_id":"cus_1","amount_cents":5000,"currency":"usd","idempotency_key":"` + key + `"}`
	}
	page := func(id string) string { return "/approvals/" + id }

	for _, srv := range []struct {
		name string
		s    *httptest.Server
	}{{"fast", p.fast}, {"sdk", p.sdk}} {
		t.Run(srv.name, func(t *testing.T) {
			key := "approve-plain-" + srv.name
			// A plain call, twice: the same waiting operation, its page, who
			// may decide, and when to look again.
			var opID string
			for i := range 2 {
				res := resultOf(t, p.send(t, srv.s, mcpRequest{header: legacy,
					body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":` + args(key) + `}}`}))
				require.NotEqual(t, true, res["isError"], "%v", res)
				ans := res["structuredContent"].(map[string]any)
				op := ans["operation"].(map[string]any)
				require.Equal(t, "awaiting_approval", op["status"], "%v", ans)
				require.EqualValues(t, 5000, ans["retry_after_ms"])
				approval := op["approval"].(map[string]any)
				require.Equal(t, page(op["operation_id"].(string)), approval["url"])
				require.Equal(t, "fuzz", approval["requested_by"])
				require.Equal(t, "a person of tenant acme with scope approvals:decide who is not fuzz", approval["may_decide"])
				require.NotEmpty(t, approval["expires_at"])
				require.Equal(t, "Credit 50.00 USD to customer cus_1", approval["summary"], "apply_credit's Review")
				if i == 0 {
					opID = op["operation_id"].(string)
				}
				require.Equal(t, opID, op["operation_id"], "a retry gets the same waiting operation")
			}

			// A credit in another currency than the customer's can never
			// succeed: refused at once with the effect's own code; nothing
			// waits.
			wrong := resultOf(t, p.send(t, srv.s, mcpRequest{header: legacy,
				body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"apply_credit","arguments":{"customer_id":"cus_1","amount_cents":5000,"currency":"eur","idempotency_key":"approve-eur-` + srv.name + `"}}}`}))
			require.Equal(t, true, wrong["isError"], "%v", wrong)
			wrongErr := wrong["structuredContent"].(map[string]any)["error"].(map[string]any)
			require.Equal(t, "invalid_argument", wrongErr["code"], "%v", wrong)
			require.Contains(t, wrongErr["message"], `is not customer cus_1's currency "usd"`)
			var waiting int
			require.NoError(t, p.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_claims WHERE idempotency_key = $1`, "approve-eur-"+srv.name).Scan(&waiting))
			require.Zero(t, waiting, "no claim of the refused call")

			// get_operation shows it the same way.
			got := resultOf(t, p.send(t, srv.s, mcpRequest{header: legacy,
				body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_operation","arguments":{"tool":"apply_credit","idempotency_key":"` + key + `"}}}`}))
			gotOp := got["structuredContent"].(map[string]any)
			require.Equal(t, page(opID), gotOp["approval"].(map[string]any)["url"], "%v", gotOp)

			// A 2025-11-25 task: input_required, the page in its message.
			taskKey := "approve-task25-" + srv.name
			created := resultOf(t, p.send(t, srv.s, mcpRequest{header: legacy,
				body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"apply_credit","arguments":` + args(taskKey) + `,"task":{}}}`}))
			task := created["task"].(map[string]any)
			require.Equal(t, "input_required", task["status"], "%v", created)
			require.Contains(t, task["statusMessage"], page(task["taskId"].(string)))
			require.Contains(t, task["statusMessage"], "who is not fuzz")
			require.EqualValues(t, 5000, task["pollInterval"])
			polled := resultOf(t, p.send(t, srv.s, mcpRequest{header: legacy,
				body: `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"` + task["taskId"].(string) + `"}}`}))
			require.Equal(t, "input_required", polled["status"], "%v", polled)

			// A 2026-07-28 task: input_required with a URL-mode elicitation
			// of the page; tasks/update acknowledges and decides nothing.
			extKey := "approve-task26-" + srv.name
			ext := resultOf(t, p.send(t, srv.s, mcpRequest{header: extHeaders("tools/call", "apply_credit"), body: extCall("5", "apply_credit", args(extKey), extMeta)}))
			require.Equal(t, "task", ext["resultType"], "%v", ext)
			require.Equal(t, "input_required", ext["status"])
			extID := ext["taskId"].(string)
			detailed := resultOf(t, p.send(t, srv.s, extTaskRequest("6", "tasks/get", extID, extMeta)))
			require.Equal(t, "input_required", detailed["status"], "%v", detailed)
			req := detailed["inputRequests"].(map[string]any)["approval"].(map[string]any)
			require.Equal(t, "elicitation/create", req["method"])
			params := req["params"].(map[string]any)
			require.Equal(t, "url", params["mode"])
			require.Equal(t, page(extID), params["url"])
			require.Equal(t, extID, params["elicitationId"])
			require.Contains(t, params["message"], "must approve it at "+page(extID))

			update := extTaskRequest("7", "tasks/update", extID, extMeta)
			update.body = strings.Replace(update.body, `"taskId":`, `"inputResponses":{"approval":{"action":"accept"}},"taskId":`, 1)
			ack := resultOf(t, p.send(t, srv.s, update))
			require.Equal(t, "complete", ack["resultType"], "%v", ack)
			again := resultOf(t, p.send(t, srv.s, extTaskRequest("8", "tasks/get", extID, extMeta)))
			require.Equal(t, "input_required", again["status"], "the client's answer is not the decision")

			// tasks/update of a task that is not the caller's is refused.
			unknown := p.send(t, srv.s, extTaskRequest("9", "tasks/update", "00000000-0000-4000-8000-000000000000", extMeta))
			var msg struct {
				Error *struct{ Code int } `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(unknown.body), &msg), unknown.body)
			require.NotNil(t, msg.Error, unknown.body)
		})
	}

	// The REST twin: 202 with the page as a Link, for the first call and
	// its retry alike.
	for i := range 2 {
		req, err := http.NewRequest(http.MethodPost, p.fast.URL+"/v1/tools/apply_credit",
			strings.NewReader(`{"customer_id":"cus_1","amount_cents":5000,"currency":"usd"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "approve-rest-key")
		resp, err := p.fast.Client().Do(req)
		require.NoError(t, err)
		var ans struct {
			RetryAfterMS int64 `json:"retry_after_ms"`
			Operation    struct {
				OperationID string `json:"operation_id"`
				Status      string `json:"status"`
				Approval    struct {
					URL string `json:"url"`
				} `json:"approval"`
			} `json:"operation"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&ans))
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "call %d", i)
		require.Equal(t, "awaiting_approval", ans.Operation.Status)
		require.Equal(t, page(ans.Operation.OperationID), ans.Operation.Approval.URL)
		require.Equal(t, `<`+page(ans.Operation.OperationID)+`>; rel="approval"`, resp.Header.Get("Link"))
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		require.Equal(t, "/v1/operations/apply_credit/approve-rest-key", resp.Header.Get("Location"))
	}

	// Nothing ran: no claim job for any waiting operation, and one notice
	// to the approvers for each of the seven, however often retried.
	var jobs, notices int
	require.NoError(t, p.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE kind <> 'idemgate.approval_notice'),
		count(*) FILTER (WHERE kind = 'idemgate.approval_notice') FROM river_job`).Scan(&jobs, &notices))
	require.Zero(t, jobs)
	require.Equal(t, 7, notices)
}
