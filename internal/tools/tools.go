// Package tools holds idemgate's built-in tools, each declared in one file
// with the public tool API: refund_order (Stripe), apply_credit (ledger),
// reset_seat (seats), send_password_reset (SMTP) and get_order. Register
// adds them to a registry; it is their only registration line.
package tools

import (
	"context"
	"errors"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/idemgate/idemgate/internal/domain"

	"github.com/idemgate/idemgate/internal/domain/refunds"
	"github.com/idemgate/idemgate/internal/domain/resetmail"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/tool"
)

// Deps are what the built-in tools' effects use.
type Deps struct {
	// Data reads and writes the domain tables (orders, ledger, seats,
	// users) on the deployment's engine.
	Data store.Domain
	// Orders reads orders for get_order.
	Orders store.Orders
	// Stripe makes refunds.
	Stripe *refunds.Client
	// Mail sends password-reset mail.
	Mail *resetmail.Sender
	// Secret derives password-reset tokens (IDEMGATE_SECRET).
	Secret []byte
	// Audit, optional, writes the audit row of a refund adopted from an
	// operation a lost commit forgot (the deployment's gate.Store).
	Audit Auditor
	// MailFailUnknownOutcome hands a password-reset mail whose outcome is
	// unknown (the server may have taken it; SMTP cannot deduplicate) to
	// an operator, failing the operation with outcome_unknown, instead of
	// sending it again with the same Message-ID (the default). It applies
	// to the reaper's expired leases too (gate.Policy.FailUnknownOutcome).
	MailFailUnknownOutcome bool
}

// Auditor appends audit rows (gate.Executor's AuditInsert).
type Auditor interface {
	AuditInsert(ctx context.Context, params *gate.AuditInsertParams) error
}

// Register adds the built-in tools to reg.
func Register(reg *tool.Registry, d *Deps) error {
	if d == nil || d.Data == nil || d.Orders == nil {
		return errors.New("tools: Deps.Data and Deps.Orders are required")
	}
	return add(reg, d)
}

// Scopes returns the scopes a token may be granted with the built-in tools:
// their own, operations:read and ops:admin. It runs nothing.
func Scopes() []string {
	reg := tool.NewRegistry()
	if err := add(reg, &Deps{}); err != nil {
		panic(err) // the declarations are fixed at compile time
	}
	return toolspec.Of(reg).Scopes()
}

func add(reg *tool.Registry, d *Deps) error {
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
	if errors.Is(err, tool.ErrNotFound) {
		return tool.NothingHappened(codeNotFound, "%s %q does not exist for this tenant", field, id)
	}
	return tool.Transient(codeUnavailable, err)
}

const (
	codeNotFound    = "not_found"
	codeUnavailable = "unavailable"
)

func errInfo(code string, err error) domain.ErrorInfo {
	return domain.ErrorInfo{Code: domain.Code(code), Message: err.Error()}
}

// storeTx is the store transaction behind an effect's tx.
// TODO(builtins): the built-ins' SQL moves into the tools (tool.Tx only).
func storeTx(tx tool.Tx) store.Tx { return tx.(store.Tx) }
