package gate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// An external effect: Call runs outside any transaction under a deadline
// inside the lease and gives the provider the downstream key; Record
// writes its rows in the completing transaction.
func ExampleMutation_external() {
	type ProvisionArgs struct {
		Workspace string `json:"workspace" jsonschema:"The workspace's name." idem:"pattern=^[a-z0-9-]+$"`
	}
	type Workspace struct {
		WorkspaceID string `json:"workspace_id"`
	}
	provision := &gate.Mutation[ProvisionArgs, Workspace]{
		Name:        "provision_workspace",
		Title:       "Provision a workspace",
		Description: "Create a workspace at the provider, once per idempotency_key.",
		Scope:       "workspaces:provision",
		Provider:    "workspaces-api",
		Call: func(ctx context.Context, op *gate.Op[ProvisionArgs]) (*Workspace, error) {
			// POST to the provider with Idempotency-Key: op.DownstreamKey.
			return &Workspace{WorkspaceID: "ws_" + op.Args.Workspace}, nil
		},
		Record: func(ctx context.Context, tx gate.Tx, op *gate.Op[ProvisionArgs], ws *Workspace) error {
			_, err := tx.Exec(ctx, `INSERT INTO workspaces (tenant_id, operation_id, workspace_id) VALUES ($1, $2, $3)`,
				op.TenantID, op.OperationID, ws.WorkspaceID)
			return err
		},
	}
	reg := gate.NewRegistry()
	fmt.Println(reg.Add(provision))
	// Output: <nil>
}

// A read tool: a scope, arguments and a result, no key; ErrNotFound (or
// NotFound) answers not_found.
func ExampleRead() {
	type GetArgs struct {
		CouponID string `json:"coupon_id" idem:"id"`
	}
	type Coupon struct {
		CouponID string `json:"coupon_id"`
		Code     string `json:"code"`
	}
	get := &gate.Read[GetArgs, Coupon]{
		Name:        "get_coupon",
		Title:       "Get a coupon",
		Description: "A coupon of the caller's tenant.",
		Scope:       "coupons:read",
		Handle: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *GetArgs) (*Coupon, error) {
			c := &Coupon{CouponID: a.CouponID}
			err := tx.QueryRow(ctx, `SELECT code FROM coupons WHERE tenant_id = $1 AND coupon_id = $2`,
				caller.TenantID, a.CouponID).Scan(&c.Code)
			if errors.Is(err, gate.ErrNotFound) {
				return nil, gate.NotFound("coupon_id", "no coupon %s", a.CouponID)
			}
			return c, err
		},
	}
	fmt.Println(gate.NewRegistry().Add(get))
	// Output: <nil>
}

// A declaration's mistakes are found at Add, naming the field.
func ExampleRegistry_Add() {
	type Args struct {
		Amount int64 `json:"amount" idem:"cents"`
	}
	type Result struct{}
	bad := &gate.Mutation[Args, Result]{
		Name: "Refund-Order", Title: "Refund", Description: "Refund an order.", Scope: "billing:refund",
		Call: func(context.Context, *gate.Op[Args]) (*Result, error) { return &Result{}, nil },
	}
	fmt.Println(gate.NewRegistry().Add(bad))
	// Output: tool: Name "Refund-Order" must match ^[a-z][a-z0-9_]{0,63}$
}

// ToolScopes are what an agent's token needs for a registry's tools:
// their scopes and operations:read to poll, never an operator's scope. Pass
// them to Service.CreateToken.
func ExampleRegistry_ToolScopes() {
	type Args struct {
		CustomerID string `json:"customer_id" idem:"id"`
	}
	type Result struct{}
	effect := func(context.Context, gate.Tx, *gate.Op[Args]) (*Result, error) { return &Result{}, nil }
	reg := gate.NewRegistry().MustAdd(
		&gate.Mutation[Args, Result]{Name: "issue_coupon", Title: "Issue a coupon", Description: "Once per key.", Scope: "coupons:issue", InTx: effect},
		&gate.Mutation[Args, Result]{Name: "revoke_coupon", Title: "Revoke a coupon", Description: "Once per key.", Scope: "coupons:revoke", InTx: effect},
	)
	fmt.Println(reg.ToolScopes())
	// Output: [coupons:issue coupons:revoke operations:read]
}

// An in-transaction effect in the team's own pgx code: EngineTx gives the
// pgx.Tx the effect runs in (a *sql.Tx on SQLite), so sqlc's generated
// queries (queries.New(ptx), whose DBTX is Exec, Query and QueryRow) write
// in the claim's transaction and commit or roll back with it. Query reads
// many rows through the Tx itself, on either engine.
func ExampleEngineTx() {
	type Args struct {
		CustomerID string `json:"customer_id" idem:"id"`
	}
	type Result struct {
		Coupons int `json:"coupons"`
	}
	issue := &gate.Mutation[Args, Result]{
		Name: "issue_coupon", Title: "Issue a coupon", Description: "Once per key.", Scope: "coupons:issue",
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[Args]) (*Result, error) {
			ptx, ok := gate.EngineTx[pgx.Tx](tx)
			if !ok {
				return nil, errors.New("this tool runs on Postgres")
			}
			// With sqlc: q := queries.New(ptx); q.InsertCoupon(ctx, …)
			if _, err := ptx.Exec(ctx, `INSERT INTO coupons (tenant_id, operation_id, customer_id) VALUES ($1, $2, $3)`,
				op.TenantID, op.OperationID, op.Args.CustomerID); err != nil {
				return nil, err
			}
			rows, err := tx.Query(ctx, `SELECT operation_id FROM coupons WHERE tenant_id = $1 AND customer_id = $2`,
				op.TenantID, op.Args.CustomerID)
			if err != nil {
				return nil, err
			}
			res := &Result{}
			for rows.Next() {
				res.Coupons++
			}
			return res, rows.Close()
		},
	}
	fmt.Println(gate.NewRegistry().Add(issue))
	// Output: <nil>
}
