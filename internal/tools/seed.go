package tools

import (
	"context"
	"fmt"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
)

// SeedRows loads a seed file's orders, customers, seats and users (the
// rows the built-in tools act on) in the seeding transaction gtx, in file
// order, counting each in res: one affected row is created, none means
// the row existed. It never changes an existing row: an order may already
// have refunds, a seat resets, a user reset mails, and rewriting them under
// running operations would be unsafe. It is store.SeedFile.LoadRows for
// files that have such rows.
func SeedRows(ctx context.Context, gtx gate.Tx, f *store.SeedFile, res *store.SeedResult) error {
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
	return nil
}
