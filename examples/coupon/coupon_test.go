package main

import (
	"testing"

	"github.com/idemgate/idemgate/idemtype"
	"github.com/idemgate/idemgate/tool"
	"github.com/idemgate/idemgate/tool/tooltest"
)

func couponCase() *tooltest.Case {
	return &tooltest.Case{
		Tool:        "issue_coupon",
		Args:        map[string]any{"customer_id": "cus_1", "percent_off": 10},
		Differ:      map[string]any{"customer_id": "cus_1", "percent_off": 20},
		DifferField: "percent_off",
		Effects: func(t testing.TB, h *tooltest.Harness, op *idemtype.Operation) int {
			return h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID)
		},
	}
}

func TestIssueCouponOnPostgres(t *testing.T) {
	t.Parallel()
	reg := tool.NewRegistry().MustAdd(IssueCoupon)
	h := tooltest.Postgres(t, reg, &tooltest.Options{Migrations: Migrations})
	tooltest.Check(t, h, couponCase())
}

func TestIssueCouponOnSQLite(t *testing.T) {
	t.Parallel()
	reg := tool.NewRegistry().MustAdd(IssueCoupon)
	h := tooltest.SQLite(t, reg, &tooltest.Options{Migrations: Migrations})
	tooltest.Check(t, h, couponCase())
}
