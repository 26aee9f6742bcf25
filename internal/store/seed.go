package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// SeedFile is the seed format of docs/design.md ("Operators and the edge").
// Every list is optional. The gate's own sections are the tokens and the
// tenants; the rows the tools act on (the built-ins' orders, customers,
// seats and users) are Rows, which the tools parse, check and load.
type SeedFile struct {
	Tokens  []SeedToken  `json:"tokens,omitempty"`
	Tenants []SeedTenant `json:"tenants,omitempty"`
	// Rows are the tools' sections (ParseSeed's rows); nil refuses a file
	// with rows (HasRows).
	Rows SeedRows `json:"-"`
	// KnownScopes, set by the caller (not the file), are the scopes its
	// tokens may grant: the tool registry's Scopes. Nil checks only that
	// each scope looks like resource:action.
	KnownScopes []string `json:"-"`
}

// MarshalJSON writes f as a seed file, its Rows' members beside the
// tokens and tenants.
func (f SeedFile) MarshalJSON() ([]byte, error) {
	type plain SeedFile // without this method
	b, err := json.Marshal(plain(f))
	if err != nil || f.Rows == nil {
		return b, err
	}
	members := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &members); err != nil {
		return nil, err
	}
	rows, err := json.Marshal(f.Rows)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rows, &members); err != nil {
		return nil, fmt.Errorf("seed rows: %w", err)
	}
	return json.Marshal(members)
}

// SeedRows are a seed file's sections that belong to the tools, not the
// gate: for the built-ins, tools.Seed (orders, customers, seats, users and
// the tenants' approval thresholds).
type SeedRows interface {
	// Sections names the file's top-level members the rows own.
	Sections() []string
	// Decode decodes the owned members present in the file, each by
	// name, refusing unknown fields.
	Decode(sections map[string]json.RawMessage) error
	// Validate checks every entry and reports the first problem, naming
	// the entry and field, as in "orders[0].amount_cents: must be
	// positive".
	Validate() error
	// Empty reports whether there is nothing to load.
	Empty() bool
	// Load loads the rows in the seed's transaction tx, in file order,
	// counting them in res (SeedResult.Count), with the file's tenants.
	// It never changes an existing row.
	Load(ctx context.Context, tx core.Tx, tenants []SeedTenant, res *SeedResult) error
}

// HasRows reports whether f has rows for Rows to load: entries in Rows,
// or approval thresholds on a tenant.
func (f *SeedFile) HasRows() bool {
	if f.Rows != nil && !f.Rows.Empty() {
		return true
	}
	for _, t := range f.Tenants {
		if len(t.ApprovalThresholds) > 0 {
			return true
		}
	}
	return false
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
	// person's approval. Loaded by the tools' rows (SeedFile.Rows).
	ApprovalThresholds map[string]int64 `json:"approval_thresholds,omitempty"`
	// ApprovalMailTo is optional: the bare addresses that a call of the
	// tenant waiting for approval is mailed to, one message to all of
	// them; empty mails nobody.
	ApprovalMailTo []string `json:"approval_mail_to,omitempty"`
}

// ParseSeed decodes and validates a seed file whose tools' sections rows
// own (nil: a file with any other member than tokens and tenants is
// refused). Unknown fields, trailing data and invalid entries are errors;
// validation errors name the entry and field, as in
// "orders[0].amount_cents: must be positive".
func ParseSeed(r io.Reader, rows SeedRows) (*SeedFile, error) {
	dec := json.NewDecoder(r)
	var members map[string]json.RawMessage
	if err := dec.Decode(&members); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("seed file: empty; want a JSON object")
		}
		return nil, fmt.Errorf("seed file: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("seed file: unexpected data after the JSON object")
	}
	var owned []string
	if rows != nil {
		owned = rows.Sections()
	}
	var f SeedFile
	toolSections := map[string]json.RawMessage{}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		var err error
		switch raw := members[name]; {
		case name == "tokens":
			err = decodeStrict(raw, &f.Tokens)
		case name == "tenants":
			err = decodeStrict(raw, &f.Tenants)
		case slices.Contains(owned, name):
			toolSections[name] = raw
		default:
			err = fmt.Errorf("json: unknown field %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("seed file: %w", err)
		}
	}
	if len(toolSections) > 0 {
		if err := rows.Decode(toolSections); err != nil {
			return nil, fmt.Errorf("seed file: %w", err)
		}
	}
	f.Rows = rows
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// decodeStrict decodes raw into v, refusing unknown fields.
func decodeStrict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// Validate checks every entry and reports the first problem, naming the
// entry and field. Entries with the same identity (the same row, or the
// same fixed token value) are rejected: the second would be silently
// ignored. A file with rows (HasRows) needs Rows to check and load them.
func (f *SeedFile) Validate() error {
	seen := map[seedKey]string{}
	dup := func(name string, k seedKey) error {
		if prev, ok := seen[k]; ok {
			return fmt.Errorf("%s: duplicates %s", name, prev)
		}
		seen[k] = name
		return nil
	}
	for _, validate := range []func(dupFunc) error{f.validateTokens, f.validateTenants} {
		if err := validate(dup); err != nil {
			return err
		}
	}
	if f.Rows != nil {
		return f.Rows.Validate()
	}
	return nil
}

// dupFunc records an entry's identity, or says which entry had it before.
type dupFunc = func(name string, k seedKey) error

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
			CheckSeedIdentity(name, "tenant", t.Tenant),
			CheckSeedIdentity(name, "user", t.User),
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
			CheckSeedIdentity(name, "tenant", tn.Tenant),
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
		if err := CheckSeedEmail(entry, field, a); err != nil {
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

// CheckSeedIdentity checks a tenant or user id of entry (domain.CheckID):
// required, naming entry and field when it is refused.
func CheckSeedIdentity(entry, field, v string) error {
	if v == "" {
		return fmt.Errorf("%s.%s: required", entry, field)
	}
	if err := domain.CheckID(v); err != nil {
		return fmt.Errorf("%s.%s: %q %v (must be %s)", entry, field, v, err, vocab.IdentityRule)
	}
	return nil
}

// CheckSeedEmail checks a bare email address of entry (no display name,
// no angle brackets), naming entry and field when it is refused.
func CheckSeedEmail(entry, field, v string) error {
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
