package idemgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

type payArgs struct {
	AmountCents int64 `json:"amount_cents" idem:"min=1"`
}

type payResult struct {
	AmountCents int64 `json:"amount_cents"`
}

// pay asks for approval above 1000 cents.
var pay = &gate.Mutation[payArgs, payResult]{
	Name: "pay", Title: "Pay", Description: "Pays once per key.", Scope: "payments:create",
	Approval: func(_ context.Context, _ gate.Tx, _ domain.Caller, a *payArgs) (bool, error) {
		return a.AmountCents > 1000, nil
	},
	InTx: func(_ context.Context, _ gate.Tx, op *gate.Op[payArgs]) (*payResult, error) {
		return &payResult{AmountCents: op.Args.AmountCents}, nil
	},
}

// A call over its tool's approval predicate waits, with no job, until a
// person of the tenant other than the requester approves its exact
// fingerprint; its retries get the same waiting operation; a decision by
// the requester, for other arguments, or a second one is refused; a denial
// ends it approval_denied, replayed as such; a call under the predicate
// runs at once.
func TestApprovalOverREST(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dbURL := "sqlite:" + filepath.Join(t.TempDir(), "approval.db")
			if engine == gate.Postgres {
				dbURL, _ = postgresDB(t, 4)
			}
			// The page links name the test server: its listener first.
			srv := httptest.NewUnstartedServer(nil)
			svc := runService(t, dbURL, gate.NewRegistry().MustAdd(pay), nil, "--public-url=http://"+srv.Listener.Addr().String())
			srv.Config.Handler = svc
			srv.Start()
			t.Cleanup(srv.Close)
			ctx := t.Context()
			agent, err := svc.CreateToken(ctx, "acme", "agent", "payments:create", "approvals:decide")
			require.NoError(t, err)
			boss, err := svc.CreateToken(ctx, "acme", "boss", "approvals:decide")
			require.NoError(t, err)
			do := func(method, path, token, key, body string) (int, map[string]any) {
				return callJSON(t, method, srv.URL+path, token, key, body)
			}
			status := func(key string) string {
				_, op := do(http.MethodGet, "/v1/operations/pay/"+key, agent, "", "")
				return op["status"].(string)
			}

			// Over the predicate: waiting, the same operation on a retry.
			_, first := do(http.MethodPost, "/v1/tools/pay", agent, "approve-key-0001", `{"amount_cents":5000}`)
			op := first["operation"].(map[string]any)
			require.Equal(t, "awaiting_approval", op["status"], "%v", first)
			id := op["operation_id"].(string)
			_, again := do(http.MethodPost, "/v1/tools/pay", agent, "approve-key-0001", `{"amount_cents":5000}`)
			require.Equal(t, id, again["operation"].(map[string]any)["operation_id"])
			require.Equal(t, "awaiting_approval", status("approve-key-0001"))
			require.Equal(t, srv.URL+"/approvals/"+id, op["approval"].(map[string]any)["url"], "the page, on IDEMGATE_PUBLIC_URL")
			code, listed := do(http.MethodGet, "/v1/approvals", boss, "", "")
			require.Equal(t, http.StatusOK, code, "%v", listed)
			require.Len(t, listed["approvals"], 1)
			require.Equal(t, id, listed["approvals"].([]any)[0].(map[string]any)["operation_id"])

			// What the approver sees, and the refusals.
			code, shown := do(http.MethodGet, "/v1/approvals/"+id, boss, "", "")
			require.Equal(t, http.StatusOK, code, "%v", shown)
			require.Equal(t, "agent", shown["requested_by"])
			require.JSONEq(t, `{"amount_cents":5000}`, mustMarshal(t, shown["args"]))
			hash := shown["args_hash"].(string)
			code, _ = do(http.MethodPost, "/v1/approvals/"+id, agent, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
			require.Equal(t, http.StatusForbidden, code, "the requester may not approve")
			code, _ = do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"approve","args_hash":"`+strings.Repeat("0", len(hash))+`"}`)
			require.Equal(t, http.StatusUnprocessableEntity, code, "other arguments' fingerprint")
			require.Equal(t, "awaiting_approval", status("approve-key-0001"))

			// Approved: the job runs, once; a second approval changes nothing.
			code, decided := do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
			require.Equal(t, http.StatusOK, code, "%v", decided)
			deadline := time.Now().Add(30 * time.Second)
			for status("approve-key-0001") != "succeeded" {
				require.True(t, time.Now().Before(deadline), "the approved operation never ran")
				time.Sleep(20 * time.Millisecond)
			}
			code, _ = do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
			require.Equal(t, http.StatusConflict, code)

			// Denied: approval_denied, replayed as such.
			_, second := do(http.MethodPost, "/v1/tools/pay", agent, "approve-key-0002", `{"amount_cents":7000}`)
			id2 := second["operation"].(map[string]any)["operation_id"].(string)
			_, shown2 := do(http.MethodGet, "/v1/approvals/"+id2, boss, "", "")
			code, _ = do(http.MethodPost, "/v1/approvals/"+id2, boss, "", `{"decision":"deny","args_hash":"`+shown2["args_hash"].(string)+`","reason":"too much"}`)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "failed", status("approve-key-0002"))
			_, replay := do(http.MethodPost, "/v1/tools/pay", agent, "approve-key-0002", `{"amount_cents":7000}`)
			require.Equal(t, "approval_denied", replay["error"].(map[string]any)["code"], "%v", replay)

			// Under the predicate: no approval asked.
			_, small := do(http.MethodPost, "/v1/tools/pay", agent, "approve-key-0003", `{"amount_cents":500}`)
			require.NotEqual(t, "awaiting_approval", small["operation"].(map[string]any)["status"])
			_, listed = do(http.MethodGet, "/v1/approvals", boss, "", "")
			require.Empty(t, listed["approvals"])

			// Counted: two requests, one approval, one denial.
			resp, err := http.Get(srv.URL + "/metrics")
			require.NoError(t, err)
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			for _, want := range []string{`idemgate_approvals_total{event="requested"} 2`, `idemgate_approvals_total{event="approved"} 1`,
				`idemgate_approvals_total{event="denied"} 1`} {
				require.Contains(t, string(metrics), want)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
