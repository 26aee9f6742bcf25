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

// A mutation that waits for approval reviews each call first, on a read
// transaction: a summary for the approver with the facts it read, or the
// effect's own refusal for a call that cannot succeed, so that nobody is
// asked to approve it. The check is one function, shared with the effect.
func ExampleMutation_review() {
	type PayoutArgs struct {
		AmountCents int64  `json:"amount_cents" idem:"cents"`
		Note        string `json:"note,omitempty" idem:"text"`
	}
	type Payout struct {
		AmountCents int64 `json:"amount_cents"`
	}
	// payable reads the tenant's balance and refuses more than it.
	payable := func(ctx context.Context, tx gate.Tx, tenantID string, a *PayoutArgs) (int64, error) {
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT balance_cents FROM wallets WHERE tenant_id = $1`, tenantID).Scan(&balance); err != nil {
			return 0, err
		}
		if a.AmountCents > balance {
			return 0, gate.NothingHappened("insufficient_balance", "amount_cents %d exceeds the balance %d", a.AmountCents, balance)
		}
		return balance, nil
	}
	payout := &gate.Mutation[PayoutArgs, Payout]{
		Name:        "pay_out",
		Title:       "Pay out",
		Description: "Pay the tenant's balance out, once per idempotency_key.",
		Scope:       "payouts:create",
		Policy:      gate.Policy{VolatileFields: []string{"note"}},
		Approval: func(_ context.Context, _ gate.Tx, _ domain.Caller, a *PayoutArgs) (bool, error) {
			return a.AmountCents > 100_00, nil
		},
		Review: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *PayoutArgs) (string, error) {
			balance, err := payable(ctx, tx, caller.TenantID, a)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Pay out %d.%02d EUR of the %d.%02d EUR balance",
				a.AmountCents/100, a.AmountCents%100, balance/100, balance%100), nil
		},
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[PayoutArgs]) (*Payout, error) {
			if _, err := payable(ctx, tx, op.TenantID, &op.Args); err != nil {
				return nil, err
			}
			_, err := tx.Exec(ctx, `UPDATE wallets SET balance_cents = balance_cents - $2 WHERE tenant_id = $1`,
				op.TenantID, op.Args.AmountCents)
			return &Payout{AmountCents: op.Args.AmountCents}, err
		},
	}
	fmt.Println(gate.NewRegistry().Add(payout))

	// What the gate does when a call is to wait, on a tenant with 500.00.
	ctx, caller, tx := context.Background(), domain.Caller{TenantID: "acme"}, walletTx{balance: 500_00}
	summary, err := payout.Review(ctx, tx, caller, &PayoutArgs{AmountCents: 200_00, Note: "monthly"})
	fmt.Printf("%q %v\n", summary, err)
	_, err = payout.Review(ctx, tx, caller, &PayoutArgs{AmountCents: 900_00})
	fmt.Println(err)
	// Output:
	// <nil>
	// "Pay out 200.00 EUR of the 500.00 EUR balance" <nil>
	// insufficient_balance: amount_cents 90000 exceeds the balance 50000
}

// walletTx stands in for the read transaction: every row is a balance.
type walletTx struct {
	gate.Tx
	balance int64
}

func (t walletTx) QueryRow(context.Context, string, ...any) gate.Row { return walletRow(t.balance) }

type walletRow int64

func (r walletRow) Scan(dest ...any) error {
	*dest[0].(*int64) = int64(r)
	return nil
}
