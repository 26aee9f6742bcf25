package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"regexp"
	"strings"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// MaxSeedAmountCents bounds amount_cents in a seed file: 100 million in
// major units.
const MaxSeedAmountCents int64 = 100_000_000_00

// SeedFile is the seed format of docs/design.md ("Operators and the edge").
// Every list is optional.
type SeedFile struct {
	Orders    []SeedOrder    `json:"orders,omitempty"`
	Customers []SeedCustomer `json:"customers,omitempty"`
	Seats     []SeedSeat     `json:"seats,omitempty"`
	Users     []SeedUser     `json:"users,omitempty"`
	Tokens    []SeedToken    `json:"tokens,omitempty"`
	Tenants   []SeedTenant   `json:"tenants,omitempty"`
	// KnownScopes, set by the caller (not the file), are the scopes its
	// tokens may grant: the tool registry's Scopes. Nil checks only that
	// each scope looks like resource:action.
	KnownScopes []string `json:"-"`
	// LoadRows, set by the caller (not the file), loads the orders,
	// customers, seats and users (the built-in tools' rows, in their own
	// tables: tools.SeedRows) in Seed's transaction, counting them in res.
	// Nil refuses a file that has such rows.
	LoadRows func(ctx context.Context, tx core.Tx, f *SeedFile, res *SeedResult) error `json:"-"`
}

// HasRows reports whether f has orders, customers, seats or users: rows
// that LoadRows loads.
func (f *SeedFile) HasRows() bool {
	if len(f.Orders)+len(f.Customers)+len(f.Seats)+len(f.Users) > 0 {
		return true
	}
	for _, t := range f.Tenants {
		if len(t.ApprovalThresholds) > 0 {
			return true
		}
	}
	return false
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

// SeedToken is an entry of "tokens".
type SeedToken struct {
	Tenant string   `json:"tenant"`
	User   string   `json:"user"`
	Scopes []string `json:"scopes"`
	// Token optionally fixes the secret, for tests and demos. Without it,
	// Seed mints a fresh token on every run and reports its value.
	Token string `json:"token,omitempty"`
	// ExpiresAt is optional (RFC 3339); nil means the token does not
	// expire. A time in the past seeds an already expired token.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// SeedTenant is an entry of "tenants": a tenant's own settings.
type SeedTenant struct {
	Tenant string `json:"tenant"`
	// ResetLinkBase is optional: the page the tenant's password-reset mails
	// link to (vocab.CheckLinkBase); empty leaves the deployment's
	// IDEMGATE_RESET_LINK_BASE.
	ResetLinkBase string `json:"reset_link_base,omitempty"`
	// ApprovalThresholds are optional: per tool (refund_order,
	// apply_credit), the amount in cents above which a call waits for a
	// person's approval. Loaded with the built-in tools' rows (LoadRows).
	ApprovalThresholds map[string]int64 `json:"approval_thresholds,omitempty"`
	// ApprovalMailTo is optional: the bare addresses that a call of the
	// tenant waiting for approval is mailed to, one message to all of
	// them; empty mails nobody.
	ApprovalMailTo []string `json:"approval_mail_to,omitempty"`
}

// ParseSeed decodes and validates a seed file. Unknown fields, trailing
// data and invalid entries are errors; validation errors name the entry and
// field, as in "orders[0].amount_cents: must be positive".
func ParseSeed(r io.Reader) (*SeedFile, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var f SeedFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("seed file: empty; want a JSON object")
		}
		return nil, fmt.Errorf("seed file: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("seed file: unexpected data after the JSON object")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

// Validate checks every entry and reports the first problem, naming the
// entry and field. Entries with the same identity (the same row, or the
// same fixed token value) are rejected: the second would be silently
// ignored.
func (f *SeedFile) Validate() error {
	seen := map[seedKey]string{}
	dup := func(name string, k seedKey) error {
		if prev, ok := seen[k]; ok {
			return fmt.Errorf("%s: duplicates %s", name, prev)
		}
		seen[k] = name
		return nil
	}
	for _, validate := range []func(dupFunc) error{f.validateOrders, f.validateSeatsAndUsers, f.validateTokens, f.validateTenants} {
		if err := validate(dup); err != nil {
			return err
		}
	}
	return nil
}

// dupFunc records an entry's identity, or says which entry had it before.
type dupFunc = func(name string, k seedKey) error

// validateOrders checks "orders" and "customers".
func (f *SeedFile) validateOrders(dup dupFunc) error {
	for i, o := range f.Orders {
		name := fmt.Sprintf("orders[%d]", i)
		if err := firstErr(
			checkIdentity(name, "tenant", o.Tenant),
			checkID(name, "order_id", o.OrderID),
			checkID(name, "charge_id", o.ChargeID),
			checkAmount(name, "amount_cents", o.AmountCents),
			checkCurrency(name, "currency", o.Currency),
			dup(name, seedKey{"orders", o.Tenant, o.OrderID}),
		); err != nil {
			return err
		}
	}
	for i, c := range f.Customers {
		name := fmt.Sprintf("customers[%d]", i)
		if err := firstErr(
			checkIdentity(name, "tenant", c.Tenant),
			checkID(name, "customer_id", c.CustomerID),
			checkCurrency(name, "currency", c.Currency),
			dup(name, seedKey{"customers", c.Tenant, c.CustomerID}),
		); err != nil {
			return err
		}
	}
	return nil
}

// validateSeatsAndUsers checks "seats" and "users".
func (f *SeedFile) validateSeatsAndUsers(dup dupFunc) error {
	for i, s := range f.Seats {
		name := fmt.Sprintf("seats[%d]", i)
		var userErr error
		if s.UserID != "" {
			userErr = checkID(name, "user_id", s.UserID)
		}
		if err := firstErr(
			checkIdentity(name, "tenant", s.Tenant),
			checkID(name, "seat_id", s.SeatID),
			userErr,
			dup(name, seedKey{"seats", s.Tenant, s.SeatID}),
		); err != nil {
			return err
		}
	}
	for i, u := range f.Users {
		name := fmt.Sprintf("users[%d]", i)
		if err := firstErr(
			checkIdentity(name, "tenant", u.Tenant),
			checkID(name, "user_id", u.UserID),
			checkEmail(name, "email", u.Email),
			dup(name, seedKey{"users", u.Tenant, u.UserID}),
		); err != nil {
			return err
		}
	}
	return nil
}

// validateTokens checks "tokens".
func (f *SeedFile) validateTokens(dup dupFunc) error {
	for i, t := range f.Tokens {
		name := fmt.Sprintf("tokens[%d]", i)
		var scopesErr, tokenErr error
		if err := tokenspec.ValidateScopes(t.Scopes, f.KnownScopes); err != nil {
			scopesErr = fmt.Errorf("%s.scopes: %w", name, err)
		}
		if t.Token != "" {
			if !tokenspec.WellFormed(t.Token) {
				tokenErr = fmt.Errorf("%s.token: must be %q followed by %d to %d characters of [A-Za-z0-9_-]",
					name, tokenspec.Prefix, tokenspec.MinLen-len(tokenspec.Prefix), tokenspec.MaxLen-len(tokenspec.Prefix))
			} else {
				tokenErr = dup(name, seedKey{"tokens", t.Token})
			}
		}
		if err := firstErr(
			checkIdentity(name, "tenant", t.Tenant),
			checkIdentity(name, "user", t.User),
			scopesErr,
			tokenErr,
		); err != nil {
			return err
		}
	}
	return nil
}

// seedKey is an entry's identity: its list, then its key columns.
type seedKey [3]string

// seedToolName is what a tool name in approval_thresholds looks like.
var seedToolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// validateTenants checks "tenants".
func (f *SeedFile) validateTenants(dup dupFunc) error {
	for i, tn := range f.Tenants {
		name := fmt.Sprintf("tenants[%d]", i)
		var baseErr error
		if tn.ResetLinkBase != "" {
			if err := vocab.CheckLinkBase(tn.ResetLinkBase); err != nil {
				baseErr = fmt.Errorf("%s.reset_link_base: %q %w", name, tn.ResetLinkBase, err)
			}
		}
		for tool, cents := range tn.ApprovalThresholds {
			if !seedToolName.MatchString(tool) || cents <= 0 {
				baseErr = cmp.Or(baseErr, fmt.Errorf("%s.approval_thresholds: %q: %d must be a tool name with a positive amount in cents", name, tool, cents))
			}
		}
		if err := firstErr(
			checkIdentity(name, "tenant", tn.Tenant),
			baseErr,
			checkMailTo(name, tn.ApprovalMailTo),
			dup(name, seedKey{"tenants", tn.Tenant}),
		); err != nil {
			return err
		}
	}
	return nil
}

// checkMailTo checks approval_mail_to: bare addresses, each once.
func checkMailTo(entry string, addrs []string) error {
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		field := fmt.Sprintf("approval_mail_to[%d]", i)
		if err := checkEmail(entry, field, a); err != nil {
			return err
		}
		if seen[strings.ToLower(a)] {
			return fmt.Errorf("%s.%s: %q is listed twice", entry, field, a)
		}
		seen[strings.ToLower(a)] = true
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

// checkIdentity checks a tenant or user id (domain.CheckID).
func checkIdentity(entry, field, v string) error {
	if v == "" {
		return fmt.Errorf("%s.%s: required", entry, field)
	}
	if err := domain.CheckID(v); err != nil {
		return fmt.Errorf("%s.%s: %q %v (must be %s)", entry, field, v, err, vocab.IdentityRule)
	}
	return nil
}

func checkID(entry, field, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s.%s: required", entry, field)
	case !vocab.ValidID(v):
		return fmt.Errorf("%s.%s: %q must be %s", entry, field, v, vocab.IDRule)
	}
	return nil
}

func checkAmount(entry, field string, v int64) error {
	switch {
	case v <= 0:
		return fmt.Errorf("%s.%s: must be positive", entry, field)
	case v > MaxSeedAmountCents:
		return fmt.Errorf("%s.%s: must be at most %d", entry, field, MaxSeedAmountCents)
	}
	return nil
}

func checkCurrency(entry, field, v string) error {
	if !currencyPattern.MatchString(v) {
		return fmt.Errorf("%s.%s: %q must be 3 lowercase letters (ISO 4217, as Stripe writes it)", entry, field, v)
	}
	return nil
}

func checkEmail(entry, field, v string) error {
	if v == "" {
		return fmt.Errorf("%s.%s: required", entry, field)
	}
	// A bare address only: no display name, no angle brackets.
	addr, err := mail.ParseAddress(v)
	if err != nil || addr.Name != "" || addr.Address != v || !strings.Contains(v, "@") {
		return fmt.Errorf("%s.%s: %q is not an email address like ana@example.com", entry, field, v)
	}
	return nil
}
