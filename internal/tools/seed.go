package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
)

// MaxSeedAmountCents bounds amount_cents in a seed file: 100 million in
// major units.
const MaxSeedAmountCents int64 = 100_000_000_00

// Seed is the built-in tools' part of a seed file (store.SeedRows): the
// orders, customers, seats and users they act on, and the tenants'
// approval thresholds. Parse a file with store.ParseSeed(r, &tools.Seed{}),
// or set store.SeedFile.Rows to one.
type Seed struct {
	Orders    []SeedOrder    `json:"orders,omitempty"`
	Customers []SeedCustomer `json:"customers,omitempty"`
	Seats     []SeedSeat     `json:"seats,omitempty"`
	Users     []SeedUser     `json:"users,omitempty"`
}

// SeedOrder is an entry of "orders".
type SeedOrder struct {
	Tenant      string `json:"tenant"`
	OrderID     string `json:"order_id"`
	ChargeID    string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// SeedCustomer is an entry of "customers".
type SeedCustomer struct {
	Tenant     string `json:"tenant"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
}

// SeedSeat is an entry of "seats".
type SeedSeat struct {
	Tenant string `json:"tenant"`
	SeatID string `json:"seat_id"`
	// UserID is optional: a seat may be unassigned.
	UserID string `json:"user_id,omitempty"`
}

// SeedUser is an entry of "users".
type SeedUser struct {
	Tenant string `json:"tenant"`
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

// seedSections are Seed's members, in the order they load.
var seedSections = []string{"orders", "customers", "seats", "users"}

// Sections implements store.SeedRows.
func (s *Seed) Sections() []string { return slices.Clone(seedSections) }

// Empty implements store.SeedRows.
func (s *Seed) Empty() bool {
	return len(s.Orders)+len(s.Customers)+len(s.Seats)+len(s.Users) == 0
}

// Decode implements store.SeedRows.
func (s *Seed) Decode(sections map[string]json.RawMessage) error {
	for _, name := range seedSections {
		raw, ok := sections[name]
		if !ok {
			continue
		}
		var v any
		switch name {
		case "orders":
			v = &s.Orders
		case "customers":
			v = &s.Customers
		case "seats":
			v = &s.Seats
		default:
			v = &s.Users
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return err
		}
	}
	return nil
}

// Validate implements store.SeedRows: every entry checked, and entries
// with the same row refused (the second would be silently ignored).
func (s *Seed) Validate() error {
	seen := map[[3]string]string{}
	dup := func(name string, k [3]string) error {
		if prev, ok := seen[k]; ok {
			return fmt.Errorf("%s: duplicates %s", name, prev)
		}
		seen[k] = name
		return nil
	}
	for i, o := range s.Orders {
		name := fmt.Sprintf("orders[%d]", i)
		if err := firstErr(
			store.CheckSeedIdentity(name, "tenant", o.Tenant),
			checkSeedID(name, "order_id", o.OrderID),
			checkSeedID(name, "charge_id", o.ChargeID),
			checkSeedAmount(name, "amount_cents", o.AmountCents),
			checkSeedCurrency(name, "currency", o.Currency),
			dup(name, [3]string{"orders", o.Tenant, o.OrderID}),
		); err != nil {
			return err
		}
	}
	for i, c := range s.Customers {
		name := fmt.Sprintf("customers[%d]", i)
		if err := firstErr(
			store.CheckSeedIdentity(name, "tenant", c.Tenant),
			checkSeedID(name, "customer_id", c.CustomerID),
			checkSeedCurrency(name, "currency", c.Currency),
			dup(name, [3]string{"customers", c.Tenant, c.CustomerID}),
		); err != nil {
			return err
		}
	}
	for i, st := range s.Seats {
		name := fmt.Sprintf("seats[%d]", i)
		var userErr error
		if st.UserID != "" {
			userErr = checkSeedID(name, "user_id", st.UserID)
		}
		if err := firstErr(
			store.CheckSeedIdentity(name, "tenant", st.Tenant),
			checkSeedID(name, "seat_id", st.SeatID),
			userErr,
			dup(name, [3]string{"seats", st.Tenant, st.SeatID}),
		); err != nil {
			return err
		}
	}
	for i, u := range s.Users {
		name := fmt.Sprintf("users[%d]", i)
		if err := firstErr(
			store.CheckSeedIdentity(name, "tenant", u.Tenant),
			checkSeedID(name, "user_id", u.UserID),
			store.CheckSeedEmail(name, "email", u.Email),
			dup(name, [3]string{"users", u.Tenant, u.UserID}),
		); err != nil {
			return err
		}
	}
	return nil
}

// firstErr returns the first non-nil error. Its arguments are all
// evaluated, so the duplicate check (which records the entry) goes last.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkSeedID(entry, field, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s.%s: required", entry, field)
	case !vocab.ValidID(v):
		return fmt.Errorf("%s.%s: %q must be %s", entry, field, v, vocab.IDRule)
	}
	return nil
}

func checkSeedAmount(entry, field string, v int64) error {
	switch {
	case v <= 0:
		return fmt.Errorf("%s.%s: must be positive", entry, field)
	case v > MaxSeedAmountCents:
		return fmt.Errorf("%s.%s: must be at most %d", entry, field, MaxSeedAmountCents)
	}
	return nil
}

var seedCurrency = regexp.MustCompile(`^[a-z]{3}$`)

func checkSeedCurrency(entry, field, v string) error {
	if !seedCurrency.MatchString(v) {
		return fmt.Errorf("%s.%s: %q must be 3 lowercase letters (ISO 4217, as Stripe writes it)", entry, field, v)
	}
	return nil
}

// Load implements store.SeedRows: the rows in the seeding transaction gtx,
// in file order, each counted in res: one affected row is created, none
// means the row existed. It never changes an existing row: an order may
// already have refunds, a seat resets, a user reset mails, and rewriting
// them under running operations would be unsafe. The tenants' approval
// thresholds are settings: the file's value wins over the stored one.
func (s *Seed) Load(ctx context.Context, gtx core.Tx, tenants []store.SeedTenant, res *store.SeedResult) error {
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
	for _, name := range seedSections {
		res.Count(name)
	}
	for i, o := range s.Orders {
		if err := insert(fmt.Sprintf("orders[%d]", i), res.Count("orders"), `INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, order_id) DO NOTHING`,
			o.Tenant, o.OrderID, o.ChargeID, o.AmountCents, o.Currency); err != nil {
			return err
		}
	}
	for i, c := range s.Customers {
		if err := insert(fmt.Sprintf("customers[%d]", i), res.Count("customers"), `INSERT INTO customers (tenant_id, customer_id, currency)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, customer_id) DO NOTHING`,
			c.Tenant, c.CustomerID, c.Currency); err != nil {
			return err
		}
	}
	for i, st := range s.Seats {
		var userID any // NULL: a free seat
		if st.UserID != "" {
			userID = st.UserID
		}
		if err := insert(fmt.Sprintf("seats[%d]", i), res.Count("seats"), `INSERT INTO seats (tenant_id, seat_id, user_id)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, seat_id) DO NOTHING`,
			st.Tenant, st.SeatID, userID); err != nil {
			return err
		}
	}
	for i, u := range s.Users {
		if err := insert(fmt.Sprintf("users[%d]", i), res.Count("users"), `INSERT INTO users (tenant_id, user_id, email)
			VALUES ($1, $2, $3) ON CONFLICT (tenant_id, user_id) DO NOTHING`,
			u.Tenant, u.UserID, u.Email); err != nil {
			return err
		}
	}
	for i, tn := range tenants {
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
