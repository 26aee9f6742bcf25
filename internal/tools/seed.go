package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
)

// SeedRows loads a seed file's orders, customers, seats and users (the
// rows the built-in tools act on) in the seeding transaction gtx, in file
// order, counting each in res: one affected row is created, none means
// the row existed. It never changes an existing row: an order may already
// have refunds, a seat resets, a user reset mails, and rewriting them under
// running operations would be unsafe. It is store.SeedFile.LoadRows for
// files that have such rows.
func SeedRows(ctx context.Context, gtx core.Tx, f *store.SeedFile, res *store.SeedResult) error {
	tx, err := toolspec.WrapTx(gtx)
	if err != nil {
		return err
	}
	insert := func(entry string, count *store.SeedCount, query string, args ...any) error {
		n, err := tx.Exec(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", entry, err)
		}
		if n == 1 {
			count.Created++
		} else {
			count.Existing++
		}
		return nil
	}
	for i, o := range f.Orders {
		if err := insert(fmt.Sprintf("orders[%d]", i), &res.Orders, `INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, order_id) DO NOTHING`,
			o.Tenant, o.OrderID, o.ChargeID, o.AmountCents, o.Currency); err != nil {
			return err
		}
	}
	for i, c := range f.Customers {
		if err := insert(fmt.Sprintf("customers[%d]", i), &res.Customers, `INSERT INTO customers (tenant_id, customer_id, currency)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, customer_id) DO NOTHING`,
			c.Tenant, c.CustomerID, c.Currency); err != nil {
			return err
		}
	}
	for i, st := range f.Seats {
		var userID any // NULL: a free seat
		if st.UserID != "" {
			userID = st.UserID
		}
		if err := insert(fmt.Sprintf("seats[%d]", i), &res.Seats, `INSERT INTO seats (tenant_id, seat_id, user_id)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, seat_id) DO NOTHING`,
			st.Tenant, st.SeatID, userID); err != nil {
			return err
		}
	}
	for i, u := range f.Users {
		if err := insert(fmt.Sprintf("users[%d]", i), &res.Users, `INSERT INTO users (tenant_id, user_id, email)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, user_id) DO NOTHING`,
			u.Tenant, u.UserID, u.Email); err != nil {
			return err
		}
	}
	// Thresholds are settings: the file's value wins over the stored one.
	for i, tn := range f.Tenants {
		for tool, cents := range tn.ApprovalThresholds {
			if _, err := tx.Exec(ctx, `INSERT INTO approval_thresholds (tenant_id, tool, amount_cents) VALUES ($1, $2, $3)
				ON CONFLICT (tenant_id, tool) DO UPDATE SET amount_cents = excluded.amount_cents`, tn.Tenant, tool, cents); err != nil {
				return fmt.Errorf("tenants[%d].approval_thresholds: %w", i, err)
			}
		}
	}
	return nil
}

// ApprovalThreshold is the tenant's threshold for tool in tx, and false
// when it has none (no approval asked).
func ApprovalThreshold(ctx context.Context, tx gate.Tx, tenantID, toolName string) (int64, bool, error) {
	var cents int64
	err := tx.QueryRow(ctx, `SELECT amount_cents FROM approval_thresholds WHERE tenant_id = $1 AND tool = $2`, tenantID, toolName).Scan(&cents)
	switch {
	case errors.Is(err, gate.ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return cents, true, nil
}

// overThreshold reports whether amountCents is above the tenant's
// threshold for toolName: the Approval of refund_order and apply_credit.
func overThreshold(ctx context.Context, tx gate.Tx, tenantID, toolName string, amountCents int64) (bool, error) {
	cents, ok, err := ApprovalThreshold(ctx, tx, tenantID, toolName)
	if err != nil || !ok {
		return false, err
	}
	return amountCents > cents, nil
}
