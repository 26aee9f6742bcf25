package idemgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
			// Malformed input is named, and changes nothing: an id that is
			// no operation id, a NUL or a line break in the reason, a
			// reason past its bound.
			for _, path := range []string{"/v1/approvals/not-a-uuid", "/v1/approvals/" + id + "x", "/v1/approvals/%00"} {
				code, body := do(http.MethodGet, path, boss, "", "")
				require.Equal(t, http.StatusNotFound, code, "%s: %v", path, body)
				code, body = do(http.MethodPost, path, boss, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
				require.Equal(t, http.StatusNotFound, code, "%s: %v", path, body)
				require.Equal(t, "not_found", body["error"].(map[string]any)["code"])
			}
			for _, reason := range []string{`a\u0000b`, `line\nbreak`, strings.Repeat("x", 501)} {
				code, body := do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"deny","args_hash":"`+hash+`","reason":"`+reason+`"}`)
				require.Equal(t, http.StatusBadRequest, code, "%v", body)
				require.Equal(t, "reason", body["error"].(map[string]any)["field"], "%v", body)
			}
			require.Equal(t, "awaiting_approval", status("approve-key-0001"))

			// Approved: the job runs, once; a second approval changes nothing.
			code, decided := do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
			require.Equal(t, http.StatusOK, code, "%v", decided)
			deadline := time.Now().Add(30 * time.Second)
			for status("approve-key-0001") != "succeeded" {
				require.True(t, time.Now().Before(deadline), "the approved operation never ran")
				time.Sleep(20 * time.Millisecond)
			}
			code, again2 := do(http.MethodPost, "/v1/approvals/"+id, boss, "", `{"decision":"approve","args_hash":"`+hash+`"}`)
			require.Equal(t, http.StatusUnprocessableEntity, code)
			require.Equal(t, "approval_already_decided", again2["error"].(map[string]any)["code"], "%v", again2)

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
			// approvals:decide reads operations that asked for approval,
			// decided ones included, and no other.
			code, body := do(http.MethodGet, "/v1/approvals/"+small["operation"].(map[string]any)["operation_id"].(string), boss, "", "")
			require.Equal(t, http.StatusNotFound, code, "%v", body)
			code, body = do(http.MethodGet, "/v1/approvals/"+id, boss, "", "")
			require.Equal(t, http.StatusOK, code, "%v", body)
			require.Equal(t, "succeeded", body["status"])
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

// Concurrent decisions on one waiting operation: one wins, and every other
// is told the operation was decided already (approval_already_decided),
// never that its window ended; the job runs once.
func TestConcurrentDecisionsOneWins(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dbURL := "sqlite:" + filepath.Join(t.TempDir(), "decide.db")
			if engine == gate.Postgres {
				dbURL, _ = postgresDB(t, 8)
			}
			srv := httptest.NewUnstartedServer(nil)
			svc := runService(t, dbURL, gate.NewRegistry().MustAdd(pay), nil, "--public-url=http://"+srv.Listener.Addr().String())
			srv.Config.Handler = svc
			srv.Start()
			t.Cleanup(srv.Close)
			ctx := t.Context()
			agent, err := svc.CreateToken(ctx, "acme", "agent", "payments:create")
			require.NoError(t, err)
			const deciders = 8
			tokens := make([]string, deciders)
			for i := range tokens {
				tokens[i], err = svc.CreateToken(ctx, "acme", "approver-"+strconv.Itoa(i), "approvals:decide")
				require.NoError(t, err)
			}
			_, first := callJSON(t, http.MethodPost, srv.URL+"/v1/tools/pay", agent, "race-key-0001", `{"amount_cents":5000}`)
			id := first["operation"].(map[string]any)["operation_id"].(string)
			_, shown := callJSON(t, http.MethodGet, srv.URL+"/v1/approvals/"+id, tokens[0], "", "")
			body := `{"decision":"approve","args_hash":"` + shown["args_hash"].(string) + `"}`

			codes := make([]int, deciders)
			answers := make([]map[string]any, deciders)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range deciders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes[i], answers[i] = callJSON(t, http.MethodPost, srv.URL+"/v1/approvals/"+id, tokens[i], "", body)
				}()
			}
			close(start)
			wg.Wait()
			won := 0
			for i, code := range codes {
				if code == http.StatusOK {
					won++
					continue
				}
				require.Equal(t, http.StatusUnprocessableEntity, code, "%v", answers[i])
				require.Equal(t, "approval_already_decided", answers[i]["error"].(map[string]any)["code"], "%v", answers[i])
			}
			require.Equal(t, 1, won, "one decision wins: %v", codes)
		})
	}
}
