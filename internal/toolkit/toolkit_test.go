package toolkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/toolkit"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The tools of these tests: grant_credit writes a row in its own table
// (in-transaction); charge calls a provider that deduplicates by the
// downstream key and records its charge (external). The broken ones break
// the guarantees a kill checks: charge_nodedupe's provider charges every
// call, and grant_credit_leaky also counts each run outside its
// transaction.

type creditArgs struct {
	CustomerID  string `json:"customer_id" idem:"id"`
	AmountCents int64  `json:"amount_cents" idem:"min=1"`
}

type credit struct {
	CreditID string `json:"credit_id"`
}

type chargeResult struct {
	ChargeID string `json:"charge_id"`
}

// migrations create the tools' own tables, the same on both engines.
func migrations(string) fs.FS {
	return fstest.MapFS{"00001_kit.sql": {Data: []byte(`-- +goose Up
CREATE TABLE kit_credits (operation_id TEXT NOT NULL, amount_cents BIGINT NOT NULL);
CREATE TABLE kit_charges (operation_id TEXT NOT NULL, charge_id TEXT NOT NULL);
`)}}
}

// provider is a test payment provider: it keeps every charge that lands,
// with the operation its caller named, and with dedupe answers a key it
// saw with the charge it made then.
type provider struct {
	dedupe bool
	mu     sync.Mutex
	keys   []string // the downstream key of each charge landed
	ops    []string // the operation of each charge landed
}

func (p *provider) charge(key, operationID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dedupe {
		for i, k := range p.keys {
			if k == key {
				return fmt.Sprintf("ch_%d", i)
			}
		}
	}
	p.keys = append(p.keys, key)
	p.ops = append(p.ops, operationID)
	return fmt.Sprintf("ch_%d", len(p.keys)-1)
}

// landed counts the charges of an operation.
func (p *provider) landed(operationID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, op := range p.ops {
		if op == operationID {
			n++
		}
	}
	return n
}

func chargeTool(name string, p *provider) *gate.Mutation[creditArgs, chargeResult] {
	return &gate.Mutation[creditArgs, chargeResult]{
		Name: name, Title: "Charge", Description: "One charge per idempotency_key.", Scope: "charges:create",
		Call: func(_ context.Context, op *gate.Op[creditArgs]) (*chargeResult, error) {
			return &chargeResult{ChargeID: p.charge(op.DownstreamKey, op.OperationID)}, nil
		},
		Record: func(ctx context.Context, tx gate.Tx, op *gate.Op[creditArgs], res *chargeResult) error {
			_, err := tx.Exec(ctx, `INSERT INTO kit_charges (operation_id, charge_id) VALUES ($1, $2)`, op.OperationID, res.ChargeID)
			return err
		},
	}
}

// leaks counts grant_credit_leaky's runs outside the transaction.
type leaks struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *leaks) count(operationID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[operationID]
}

func creditTool(name string, leak *leaks) *gate.Mutation[creditArgs, credit] {
	return &gate.Mutation[creditArgs, credit]{
		Name: name, Title: "Grant a credit", Description: "One credit per idempotency_key.", Scope: "credits:grant",
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[creditArgs]) (*credit, error) {
			if leak != nil {
				leak.mu.Lock()
				leak.runs[op.OperationID]++
				leak.mu.Unlock()
			}
			_, err := tx.Exec(ctx, `INSERT INTO kit_credits (operation_id, amount_cents) VALUES ($1, $2)`, op.OperationID, op.Args.AmountCents)
			return &credit{CreditID: op.OperationID}, err
		},
	}
}

type testBundle struct {
	good, broken *provider
	leak         *leaks
	reg          *toolspec.Registry
}

func setup() *testBundle {
	b := &testBundle{good: &provider{dedupe: true}, broken: &provider{}, leak: &leaks{runs: map[string]int{}}}
	reg := gate.NewRegistry().MustAdd(creditTool("grant_credit", nil), chargeTool("charge", b.good),
		chargeTool("charge_nodedupe", b.broken), creditTool("grant_credit_leaky", b.leak))
	b.reg = toolspec.Of(reg)
	return b
}

func creditCase(name string, effects func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int) *toolkit.Case {
	return &toolkit.Case{
		Tool:        name,
		Args:        map[string]any{"customer_id": "cus_1", "amount_cents": 250},
		Differ:      map[string]any{"customer_id": "cus_1", "amount_cents": 300},
		DifferField: "amount_cents",
		Effects:     effects,
	}
}

func rows(t testing.TB, h *toolkit.Harness, table, operationID string) int {
	return h.Count(t, `SELECT count(*) FROM `+table+` WHERE operation_id = $1`, operationID)
}

// cases are the good tools' cases, effects counted where they land.
func (b *testBundle) cases() []*toolkit.Case {
	return []*toolkit.Case{
		creditCase("grant_credit", func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int {
			return rows(t, h, "kit_credits", op.OperationID)
		}),
		creditCase("charge", func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int {
			n := b.good.landed(op.OperationID)
			require.Equal(t, n, rows(t, h, "kit_charges", op.OperationID), "charges at the provider and charge rows agree")
			return n
		}),
	}
}

func TestCheckOnSQLite(t *testing.T) {
	t.Parallel()
	b := setup()
	h := toolkit.SQLite(t, b.reg, &toolkit.Options{Migrations: migrations})
	for _, c := range b.cases() {
		t.Run(c.Tool, func(t *testing.T) { toolkit.Check(t, h, c) })
	}
}

func TestCheckOnPostgres(t *testing.T) {
	t.Parallel()
	b := setup()
	h := toolkit.Postgres(t, b.reg, &toolkit.Options{Migrations: migrations})
	for _, c := range b.cases() {
		t.Run(c.Tool, func(t *testing.T) { toolkit.Check(t, h, c) })
	}
}

// fakeT records failures instead of failing the test; FailNow ends the
// goroutine, as testing's does. The rest is the real test's.
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fail() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
}

func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func (f *fakeT) FailNow() {
	f.Fail()
	runtime.Goexit()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	f.Fail()
}

func (f *fakeT) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// runFake runs check with a fakeT in a goroutine of its own and returns
// what it recorded.
func runFake(t *testing.T, check func(t testing.TB)) *fakeT {
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(ft)
	}()
	<-done
	return ft
}

// TestKilledMidEffectFailsABrokenTool: the check fails a tool whose
// effect a kill runs twice, at each point, and says why: a provider that
// does not deduplicate by the downstream key (killed after the call, and
// before the commit of its Record), and an in-transaction effect that
// also acts outside its transaction. The kill happened: the failure is
// the count of effects, after the recovery.
func TestKilledMidEffectFailsABrokenTool(t *testing.T) {
	t.Parallel()
	b := setup()
	h := toolkit.SQLite(t, b.reg, &toolkit.Options{Migrations: migrations})
	nodedupe := creditCase("charge_nodedupe", func(_ testing.TB, _ *toolkit.Harness, op *vocab.Operation) int {
		return b.broken.landed(op.OperationID)
	})
	leaky := creditCase("grant_credit_leaky", func(_ testing.TB, _ *toolkit.Harness, op *vocab.Operation) int {
		return b.leak.count(op.OperationID)
	})
	for _, tc := range []struct {
		c  *toolkit.Case
		at toolkit.KillPoint
	}{
		{nodedupe, toolkit.AfterCall},
		{nodedupe, toolkit.BeforeCommit},
		{leaky, toolkit.BeforeCommit},
	} {
		t.Run(tc.c.Tool+"/"+tc.at.String(), func(t *testing.T) {
			ft := runFake(t, func(ft testing.TB) { toolkit.CheckKilledMidEffect(ft, h, tc.c, "broken-"+tc.c.Tool, tc.at) })
			require.True(t, ft.Failed(), "the check passed a tool whose effect ran twice")
			require.Len(t, ft.msgs, 1, "%q", ft.msgs)
			require.Contains(t, ft.msgs[0], "one effect in all")
			require.Contains(t, ft.msgs[0], "expected: 1\n")
			require.Contains(t, ft.msgs[0], "actual  : 2\n")
		})
	}
	// The good tools pass the same check on the same harness.
	for _, c := range b.cases() {
		ft := runFake(t, func(ft testing.TB) { toolkit.CheckKilledMidEffect(ft, h, c, "good-"+c.Tool, toolkit.BeforeCommit) })
		require.False(t, ft.Failed(), "%s: %s", c.Tool, strings.Join(ft.msgs, "\n"))
	}
}

func TestKillNextRefusesAPointTheToolLacks(t *testing.T) {
	t.Parallel()
	h := toolkit.SQLite(t, setup().reg, &toolkit.Options{Migrations: migrations})
	require.PanicsWithValue(t, `gatetest: KillNext: grant_credit is in-transaction: AfterCall applies to external (Call) tools`,
		func() { h.KillNext("grant_credit", toolkit.AfterCall) })
	require.PanicsWithValue(t, `gatetest: KillNext: "get_operation" is not a mutation of the harness`,
		func() { h.KillNext("get_operation", toolkit.BeforeCommit) })
}

// TestClients: the harness's URL, tokens, MCP session and reads reach the
// real api: a mutation called over MCP, its operation read through the
// get_operation read tool's REST twin, and tokens with and without the
// scope it needs.
func TestClients(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := toolkit.SQLite(t, setup().reg, &toolkit.Options{Migrations: migrations})
	require.True(t, strings.HasPrefix(h.URL(), "http://"), h.URL())

	session := h.MCP(t)
	list, err := session.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	require.Subset(t, names, []string{"grant_credit", "charge", "get_operation"})

	var ans toolkit.Answer
	for { // an unavailable answer (SQLite's writer busy under load) asks for a retry with the same key
		ans = toolkit.Answer{}
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "grant_credit",
			Arguments: map[string]any{"customer_id": "cus_1", "amount_cents": 250, "idempotency_key": "mcp-0001"}})
		require.NoError(t, err)
		raw, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &ans), string(raw))
		if ans.Error == nil || ans.Error.Code != vocab.CodeUnavailable {
			require.False(t, res.IsError, "%s", raw)
			break
		}
	}
	require.Nil(t, ans.Error)
	require.Contains(t, []string{string(vocab.OutcomeAccepted), string(vocab.OutcomeReplayed)}, ans.Outcome, "replayed after a retry of an unavailable answer")
	require.Equal(t, "grant_credit", ans.Operation.Tool)
	op := h.Await(t, "grant_credit", "mcp-0001")
	require.Equal(t, ans.Operation.OperationID, op.OperationID)
	require.Equal(t, 1, rows(t, h, "kit_credits", op.OperationID))

	var got vocab.Operation
	require.NoError(t, h.Read(t, "get_operation", map[string]any{"tool": "grant_credit", "idempotency_key": "mcp-0001"}, &got))
	require.Equal(t, op.OperationID, got.OperationID)
	require.Equal(t, vocab.StatusSucceeded, got.Status)
	err = h.Read(t, "get_operation", map[string]any{"tool": "grant_credit", "idempotency_key": "mcp-none"}, &got)
	var derr *vocab.Error
	require.ErrorAs(t, err, &derr)
	require.Equal(t, vocab.CodeNotFound, derr.Code)

	read := func(token string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL()+"/v1/tools/get_operation",
			strings.NewReader(`{"tool":"grant_credit","idempotency_key":"mcp-0001"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, read(h.Token(t, domain.ScopeOperationsRead)))
	require.Equal(t, http.StatusForbidden, read(h.Token(t)), "a token without the scope")
	require.Equal(t, http.StatusOK, read(h.Token(t, "credits:grant")), "the polled mutation's own scope reads it")
	require.Equal(t, http.StatusForbidden, read(h.Token(t, "charges:create")), "a token with another tool's scope")
}
