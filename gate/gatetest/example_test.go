package gatetest_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

type couponArgs struct {
	CustomerID string `json:"customer_id" idem:"id"`
	PercentOff int64  `json:"percent_off" idem:"min=1,max=100"`
}

type coupon struct {
	CouponID string `json:"coupon_id"`
}

var issueCoupon = &gate.Mutation[couponArgs, coupon]{
	Name: "issue_coupon", Title: "Issue a coupon", Description: "One coupon per idempotency_key.", Scope: "coupons:issue",
	InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[couponArgs]) (*coupon, error) {
		// The tool's own table, created by its own migrations
		// (gatetest.Options.Migrations); counted by Effects below.
		_, err := tx.Exec(ctx, `INSERT INTO coupons (tenant_id, operation_id, customer_id, percent_off) VALUES ($1, $2, $3, $4)`,
			op.TenantID, op.OperationID, op.Args.CustomerID, op.Args.PercentOff)
		return &coupon{CouponID: op.OperationID}, err
	},
}

// Check runs the guarantees on a tool in a test of its own: here on the
// embedded engine (gatetest.Postgres on a fresh Postgres database alike),
// a worker killed before the completing commit among them.
// It needs a *testing.T, so this example is compiled, not run; the same
// test runs in examples/coupon on both engines.
func ExampleCheck() {
	_ = func(t *testing.T) { // func TestIssueCoupon(t *testing.T)
		reg := gate.NewRegistry().MustAdd(issueCoupon)
		h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: nil /* your func(engine string) fs.FS */})
		gatetest.Check(t, h, &gatetest.Case{
			Tool:        "issue_coupon",
			Args:        map[string]any{"customer_id": "cus_1", "percent_off": 10},
			Differ:      map[string]any{"customer_id": "cus_1", "percent_off": 20},
			DifferField: "percent_off",
			Effects: func(t testing.TB, h *gatetest.Harness, op *domain.Operation) int {
				return h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID)
			},
		})
	}
}

// A test of its own kills the worker in the middle of an effect, as
// SIGKILL would, and calls the tool as an agent does, over the harness's
// MCP session: the killed transaction rolls back, the harness brings the
// claim back through the reaper, and the coupon is issued once. Read
// calls a read tool through its REST twin. Compiled, not run: it needs a
// *testing.T.
func ExampleHarness_MCP() {
	_ = func(t *testing.T) { // func TestIssueCouponKilled(t *testing.T)
		reg := gate.NewRegistry().MustAdd(issueCoupon)
		h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: nil /* your func(engine string) fs.FS */})

		h.KillNextBeforeCommit("issue_coupon") // KillNextAfterCall for a Call tool
		session := h.MCP(t)
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "issue_coupon",
			Arguments: map[string]any{"customer_id": "cus_1", "percent_off": 10, "idempotency_key": "coupon-0001"}})
		if err != nil || res.IsError {
			t.Fatal(err, res)
		}
		op := h.Await(t, "issue_coupon", "coupon-0001")
		if op.Status != domain.StatusSucceeded {
			t.Fatalf("%+v", op)
		}
		if n := h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID); n != 1 {
			t.Fatalf("%d coupons, want 1", n)
		}

		var got domain.Operation
		if err := h.Read(t, "get_operation", map[string]any{"tool": "issue_coupon", "idempotency_key": "coupon-0001"}, &got); err != nil {
			t.Fatal(err) // an *domain.Error with its code
		}
	}
}
