package gatetest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

type stackArgs struct {
	CustomerID string `json:"customer_id" idem:"id"`
	PercentOff int64  `json:"percent_off" idem:"min=1,max=100"`
}

type stacked struct {
	Before []int64 `json:"before"`
}

// stackCoupon reads the customer's coupons with Tx.Query and writes its
// own through the engine's transaction (gate.EngineTx), as a team's pgx,
// database/sql or sqlc code would.
var stackCoupon = &gate.Mutation[stackArgs, stacked]{
	Name: "stack_coupon", Title: "Stack a coupon", Description: "One coupon per idempotency_key.", Scope: "coupons:issue",
	InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[stackArgs]) (*stacked, error) {
		rows, err := tx.Query(ctx, `SELECT percent_off FROM coupons WHERE tenant_id = $1 AND customer_id = $2 ORDER BY percent_off`,
			op.TenantID, op.Args.CustomerID)
		if err != nil {
			return nil, err
		}
		out := &stacked{Before: []int64{}}
		for rows.Next() {
			var p int64
			if err := rows.Scan(&p); err != nil {
				return nil, err
			}
			out.Before = append(out.Before, p)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		const insert = `INSERT INTO coupons (tenant_id, operation_id, customer_id, percent_off) VALUES ($1, $2, $3, $4)`
		args := []any{op.TenantID, op.OperationID, op.Args.CustomerID, op.Args.PercentOff}
		if ptx, ok := gate.EngineTx[pgx.Tx](tx); ok {
			_, err = ptx.Exec(ctx, insert, args...)
		} else if stx, ok := gate.EngineTx[*sql.Tx](tx); ok {
			_, err = stx.ExecContext(ctx, insert, args...)
		} else {
			err = errors.New("no engine transaction")
		}
		return out, err
	},
}

// TestEngineTxInAnEffect: on both engines an effect reads many rows with
// Tx.Query and writes through gate.EngineTx's transaction, and that write
// is the claim's: a worker killed before the commit leaves no coupon, the
// retried job one.
func TestEngineTxInAnEffect(t *testing.T) {
	t.Parallel()
	for _, start := range []func(testing.TB, *gate.Registry, *gatetest.Options) *gatetest.Harness{gatetest.SQLite, gatetest.Postgres} {
		h := start(t, gate.NewRegistry().MustAdd(stackCoupon), &gatetest.Options{Migrations: couponMigrations})
		t.Run(h.Engine(), func(t *testing.T) {
			t.Parallel()
			for i, p := range []int64{30, 10} {
				key := []string{"stack-0001", "stack-0002"}[i]
				h.Call(t, "stack_coupon", key, map[string]any{"customer_id": "cus_1", "percent_off": p})
				op := h.Await(t, "stack_coupon", key)
				require.Equal(t, domain.StatusSucceeded, op.Status, "%+v", op.Error)
				want := map[int]string{0: `{"before":[]}`, 1: `{"before":[30]}`}[i]
				require.JSONEq(t, want, string(op.Result))
			}

			h.KillNextBeforeCommit("stack_coupon")
			h.Call(t, "stack_coupon", "stack-0003", map[string]any{"customer_id": "cus_1", "percent_off": 20})
			op := h.Await(t, "stack_coupon", "stack-0003")
			require.Equal(t, domain.StatusSucceeded, op.Status, "%+v", op.Error)
			require.JSONEq(t, `{"before":[10,30]}`, string(op.Result))
			require.Equal(t, 1, h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID),
				"the killed transaction's write rolled back with its claim")
			require.Equal(t, 3, h.Count(t, `SELECT count(*) FROM coupons`))
		})
	}
}
