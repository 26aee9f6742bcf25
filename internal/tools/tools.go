// Package tools holds idemgate's built-in tools, each declared in one file
// with the public tool API: refund_order (Stripe), apply_credit (ledger),
// reset_seat (seats), send_password_reset (SMTP) and get_order. Each file
// holds its tool's SQL, run through gate.Tx as a team's own tool runs its
// own; their tables are created by the built-ins' own migrations
// (migrations.Builtins, recorded in migrations.BuiltinsTable). Register adds
// them to a registry; it is their only registration line.
package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
)

// DB runs fn in a short transaction of its own on the deployment's
// database, with fn's statements in $1 placeholders as in any gate.Tx. The
// built-in tools use it for what they read outside their completing
// transaction (get_order; the order a refund and the user a reset mail
// look up before calling out) and for redeeming reset links. The assembly
// provides it over the gate's store (internal/builtins.StoreDB), so the tools need no
// engine of their own.
type DB func(ctx context.Context, fn func(tx gate.Tx) error) error

// Deps are what the built-in tools' effects use.
type Deps struct {
	// DB runs the tools' reads outside the completing transaction.
	DB DB
	// Stripe makes refunds.
	Stripe *refunds.Client
	// Mail sends password-reset mail.
	Mail *resetmail.Sender
	// Secret derives password-reset tokens (IDEMGATE_SECRET).
	Secret []byte
	// Audit, optional, writes the audit row of a refund adopted from an
	// operation a lost commit forgot (the deployment's core.Store).
	Audit Auditor
	// MailFailUnknownOutcome hands a password-reset mail whose outcome is
	// unknown (the server may have taken it; SMTP cannot deduplicate) to
	// an operator, failing the operation with outcome_unknown, instead of
	// sending it again with the same Message-ID (the default). It applies
	// to the reaper's expired leases too (gate.Policy.FailUnknownOutcome).
	MailFailUnknownOutcome bool
	// DuplicateWindow is the money and mail tools' gate.Policy.
	// DuplicateWindow: zero means the default (DuplicateWindow), negative
	// turns the guard off (IDEMGATE_DUPLICATE_WINDOW=0).
	DuplicateWindow time.Duration
}

// duplicateWindow is d's window for the money and mail tools.
func (d *Deps) duplicateWindow() time.Duration {
	switch {
	case d.DuplicateWindow == 0:
		return DuplicateWindow
	case d.DuplicateWindow < 0:
		return 0
	}
	return d.DuplicateWindow
}

// Auditor appends audit rows (core.Executor's AuditInsert).
type Auditor interface {
	AuditInsert(ctx context.Context, params *core.AuditInsertParams) error
}

// Register adds the built-in tools to reg.
func Register(reg *gate.Registry, d *Deps) error {
	if d == nil || d.DB == nil {
		return errors.New("tools: Deps.DB is required")
	}
	return add(reg, d)
}

// Scopes returns the scopes a token may be granted with the built-in tools:
// their own, operations:read and ops:admin. It runs nothing.
func Scopes() []string {
	reg := gate.NewRegistry()
	if err := add(reg, &Deps{}); err != nil {
		panic(err) // the declarations are fixed at compile time
	}
	return toolspec.Of(reg).Scopes()
}

// VolatileFields returns the built-in tool's arguments left out of its
// fingerprint (refund_order's reason), nil for another tool.
func VolatileFields(tool string) []string {
	reg := gate.NewRegistry()
	if err := add(reg, &Deps{}); err != nil {
		panic(err) // the declarations are fixed at compile time
	}
	if spec, ok := toolspec.Of(reg).Get(tool); ok && spec.Policy != nil {
		return spec.Policy.VolatileFields
	}
	return nil
}

func add(reg *gate.Registry, d *Deps) error {
	return reg.Add(
		RefundOrder(d),
		ApplyCredit(d),
		ResetSeat(d),
		SendPasswordReset(d),
		GetOrder(d),
	)
}

// notFound turns a missing row into a definitive "nothing happened" and
// any other lookup error into a transient one.
func notFound(err error, field, id string) error {
	if errors.Is(err, gate.ErrNotFound) {
		return gate.NothingHappened(codeNotFound, "%s %q does not exist for this tenant", field, id)
	}
	return gate.Transient(codeUnavailable, err)
}

const (
	codeNotFound    = "not_found"
	codeUnavailable = "unavailable"
)

// sqliteTime is how the SQLite tables store a time: UTC text with
// milliseconds, so that text order is time order.
const sqliteTime = "2006-01-02T15:04:05.000Z"

// dbTime is a time column to scan on either engine: a time on Postgres,
// sqliteTime text on SQLite.
type dbTime struct{ t *time.Time }

// Scan implements sql.Scanner.
func (d dbTime) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*d.t = v.UTC()
		return nil
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	}
	return fmt.Errorf("tools: cannot scan %T as a time", src)
}

func (d dbTime) parse(s string) error {
	t, err := time.Parse(sqliteTime, s)
	if err != nil {
		return err
	}
	*d.t = t
	return nil
}

// timeArg is t as the engine stores it.
func timeArg(tx gate.Tx, t time.Time) any {
	if tx.Engine() == gate.SQLite {
		return t.UTC().Format(sqliteTime)
	}
	return t
}

func errInfo(code string, err error) vocab.ErrorInfo {
	return vocab.ErrorInfo{Code: vocab.Code(code), Message: err.Error()}
}
