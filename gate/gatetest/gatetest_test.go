package gatetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

// couponMigrations create the example's coupons table, the same on both
// engines.
func couponMigrations(string) fs.FS {
	return fstest.MapFS{"00001_coupons.sql": {Data: []byte(`-- +goose Up
CREATE TABLE coupons (tenant_id TEXT NOT NULL, operation_id TEXT NOT NULL, customer_id TEXT NOT NULL, percent_off BIGINT NOT NULL);
`)}}
}

// mailer is a test provider that deduplicates by the downstream key and
// counts the mails that land, by operation.
type mailer struct {
	mu   sync.Mutex
	seen map[string]bool
	sent map[string]int
}

func (m *mailer) send(key, operationID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.seen[key] {
		m.seen[key] = true
		m.sent[operationID]++
	}
}

func (m *mailer) count(operationID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent[operationID]
}

type mailArgs struct {
	CustomerID string `json:"customer_id" idem:"id"`
}

type mailSent struct {
	Sent bool `json:"sent"`
}

func mailTool(m *mailer) *gate.Mutation[mailArgs, mailSent] {
	return &gate.Mutation[mailArgs, mailSent]{
		Name: "send_welcome", Title: "Send a welcome mail", Description: "One mail per idempotency_key.", Scope: "mail:send",
		Call: func(_ context.Context, op *gate.Op[mailArgs]) (*mailSent, error) {
			m.send(op.DownstreamKey, op.OperationID)
			return &mailSent{Sent: true}, nil
		},
	}
}

type testBundle struct {
	h    *gatetest.Harness
	mail *mailer
}

func setup(t *testing.T, start func(testing.TB, *gate.Registry, *gatetest.Options) *gatetest.Harness) *testBundle {
	t.Helper()
	b := &testBundle{mail: &mailer{seen: map[string]bool{}, sent: map[string]int{}}}
	reg := gate.NewRegistry().MustAdd(issueCoupon, mailTool(b.mail))
	b.h = start(t, reg, &gatetest.Options{Migrations: couponMigrations})
	return b
}

// TestKillNext kills a worker after an external effect's provider
// answered and before an in-transaction effect's commit, on each engine:
// each operation succeeds on the reaper's fresh job, with one effect.
func TestKillNext(t *testing.T) {
	t.Parallel()
	for _, start := range []func(testing.TB, *gate.Registry, *gatetest.Options) *gatetest.Harness{gatetest.SQLite, gatetest.Postgres} {
		b := setup(t, start)
		t.Run(b.h.Engine(), func(t *testing.T) {
			t.Parallel()
			b.h.KillNextAfterCall("send_welcome")
			b.h.Call(t, "send_welcome", "welcome-0001", map[string]any{"customer_id": "cus_1"})
			op := b.h.Await(t, "send_welcome", "welcome-0001")
			require.Equal(t, domain.StatusSucceeded, op.Status, "%+v", op.Error)
			require.Equal(t, 2, op.Attempts, "the killed lease and the reaper's")
			require.Equal(t, 1, b.mail.count(op.OperationID), "one mail: the provider saw the same key twice")

			b.h.KillNextBeforeCommit("issue_coupon")
			b.h.Call(t, "issue_coupon", "coupon-0001", map[string]any{"customer_id": "cus_1", "percent_off": 10})
			op = b.h.Await(t, "issue_coupon", "coupon-0001")
			require.Equal(t, domain.StatusSucceeded, op.Status, "%+v", op.Error)
			require.Equal(t, 1, b.h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID),
				"the killed transaction rolled back; the reaper's job issued one coupon")
		})
	}
}

func TestKillNextAfterCallRefusesAnInTxTool(t *testing.T) {
	t.Parallel()
	b := setup(t, gatetest.SQLite)
	require.Panics(t, func() { b.h.KillNextAfterCall("issue_coupon") })
}

// TestCheckKillsMidEffect: Check's guarantees, the kills included, on an
// external tool whose provider deduplicates.
func TestCheckKillsMidEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, gatetest.SQLite)
	gatetest.Check(t, b.h, &gatetest.Case{
		Tool:        "send_welcome",
		Args:        map[string]any{"customer_id": "cus_1"},
		Differ:      map[string]any{"customer_id": "cus_2"},
		DifferField: "customer_id",
		Effects: func(_ testing.TB, _ *gatetest.Harness, op *domain.Operation) int {
			return b.mail.count(op.OperationID)
		},
	})
}

// TestMCPAndRead calls a mutation over the harness's MCP session, reads
// its operation back through get_operation's REST twin, and uses minted
// tokens against the harness's URL.
func TestMCPAndRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, gatetest.SQLite)
	session := b.h.MCP(t)
	list, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	require.Subset(t, names, []string{"issue_coupon", "send_welcome", "get_operation"})

	type answer struct {
		Outcome   string            `json:"outcome"`
		Operation *domain.Operation `json:"operation"`
		Error     *domain.Error     `json:"error"`
	}
	var ans answer
	for { // an unavailable answer (SQLite's writer busy under load) asks for a retry with the same key
		ans = answer{}
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "issue_coupon",
			Arguments: map[string]any{"customer_id": "cus_1", "percent_off": 10, "idempotency_key": "mcp-coupon-1"}})
		require.NoError(t, err)
		raw, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &ans), string(raw))
		if ans.Error == nil || ans.Error.Code != "unavailable" {
			require.False(t, res.IsError, "%s", raw)
			break
		}
	}
	require.Contains(t, []string{"accepted", "replayed"}, ans.Outcome, "replayed after a retry of an unavailable answer")
	op := b.h.Await(t, "issue_coupon", "mcp-coupon-1")
	require.Equal(t, ans.Operation.OperationID, op.OperationID)

	var got domain.Operation
	require.NoError(t, b.h.Read(t, "get_operation", map[string]any{"tool": "issue_coupon", "idempotency_key": "mcp-coupon-1"}, &got))
	require.Equal(t, op.OperationID, got.OperationID)
	require.Equal(t, domain.StatusSucceeded, got.Status)
	err = b.h.Read(t, "get_operation", map[string]any{"tool": "issue_coupon", "idempotency_key": "mcp-coupon-none"}, nil)
	var ierr *domain.Error
	require.True(t, errors.As(err, &ierr), "%v", err)
	require.Equal(t, domain.CodeNotFound, ierr.Code)

	status := func(token string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.h.URL()+"/v1/tools/get_operation",
			strings.NewReader(`{"tool":"issue_coupon","idempotency_key":"mcp-coupon-1"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status(b.h.Token(t, domain.ScopeOperationsRead)))
	require.Equal(t, http.StatusForbidden, status(b.h.Token(t)))
}
