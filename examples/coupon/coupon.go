package main

import (
	"context"
	"embed"
	"io/fs"

	"github.com/idemgate/idemgate/gate"
)

// IssueCouponArgs are issue_coupon's arguments; idemgate adds
// idempotency_key.
type IssueCouponArgs struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer who gets the coupon." idem:"id"`
	PercentOff int64  `json:"percent_off" jsonschema:"Discount in percent, 1 to 100." idem:"min=1,max=100"`
}

// Coupon is issue_coupon's result.
type Coupon struct {
	CouponID   string `json:"coupon_id"`
	CustomerID string `json:"customer_id"`
	PercentOff int64  `json:"percent_off"`
}

// IssueCoupon issues one coupon per intent. Its effect is in-transaction:
// the row is inserted in the transaction that completes the operation, so
// a retry, a duplicate job or a killed worker can never insert a second.
var IssueCoupon = &gate.Mutation[IssueCouponArgs, Coupon]{
	Name:        "issue_coupon",
	Title:       "Issue a coupon",
	Description: "Issue a discount coupon to a customer, exactly once per idempotency_key.",
	Scope:       "coupons:issue",
	Policy:      gate.Policy{AuditFields: []string{"customer_id", "percent_off"}},
	InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[IssueCouponArgs]) (*Coupon, error) {
		c := &Coupon{CouponID: "cpn_" + op.OperationID, CustomerID: op.Args.CustomerID, PercentOff: op.Args.PercentOff}
		_, err := tx.Exec(ctx, `INSERT INTO coupons (coupon_id, tenant_id, operation_id, customer_id, percent_off)
			VALUES ($1, $2, $3, $4, $5)`, c.CouponID, op.TenantID, op.OperationID, c.CustomerID, c.PercentOff)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
}

//go:embed migrations
var migrationFiles embed.FS

// Migrations returns the example's own migrations for one engine.
func Migrations(engine string) fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations/"+engine)
	if err != nil {
		panic(err) // the directories are embedded
	}
	return sub
}
