package tools

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/vocab"
)

// CreditArgs are apply_credit's arguments.
type CreditArgs struct {
	CustomerID  string `json:"customer_id" jsonschema:"The customer to credit." idem:"id"`
	AmountCents int64  `json:"amount_cents" jsonschema:"Credit amount in the currency's minor unit." idem:"cents"`
	Currency    string `json:"currency" jsonschema:"ISO 4217 code in lowercase, such as usd; must be the customer's currency." idem:"currency"`
	Memo        string `json:"memo,omitempty" jsonschema:"Free-text memo; changing it on a retry is not a conflict." idem:"text"`
}

// Credit is apply_credit's result.
type Credit struct {
	LedgerEntryID string `json:"ledger_entry_id" jsonschema:"The ledger entry: the operation id."`
	CustomerID    string `json:"customer_id"`
	AmountCents   int64  `json:"amount_cents"`
	Currency      string `json:"currency"`
}

// ApplyCredit adds a credit to a customer's ledger, in the transaction
// that completes the operation.
func ApplyCredit(d *Deps) *gate.Mutation[CreditArgs, Credit] {
	return &gate.Mutation[CreditArgs, Credit]{
		Name:        "apply_credit",
		Title:       "Apply account credit",
		Description: "Add a credit to a customer's ledger, exactly once per idempotency_key.",
		Scope:       "billing:credit",
		Provider:    "ledger",
		Policy: gate.Policy{
			TTL:             MoneyTTL,
			VolatileFields:  []string{"memo"},
			DuplicateWindow: d.duplicateWindow(),
			AuditFields:     []string{"customer_id", "amount_cents", "currency"},
		},
		// Above the tenant's threshold (tenants[].approval_thresholds), a
		// person approves first.
		Approval: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *CreditArgs) (bool, error) {
			return overThreshold(ctx, tx, caller.TenantID, "apply_credit", a.AmountCents)
		},
		// Before a call waits, the approver's summary; a credit to an
		// unknown customer or in another currency fails at once, with the
		// effect's own check.
		Review: func(ctx context.Context, tx gate.Tx, caller domain.Caller, a *CreditArgs) (string, error) {
			if err := creditable(ctx, tx, caller.TenantID, a); err != nil {
				return "", err
			}
			return fmt.Sprintf("Credit %s to customer %s", money(a.AmountCents, a.Currency), a.CustomerID), nil
		},
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[CreditArgs]) (*Credit, error) {
			a := op.Args
			if err := creditable(ctx, tx, op.TenantID, &a); err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (tenant_id, customer_id, operation_id, amount_cents, currency, memo)
				VALUES ($1, $2, $3, $4, $5, $6)`, op.TenantID, a.CustomerID, op.OperationID, a.AmountCents, a.Currency, a.Memo); err != nil {
				return nil, err
			}
			return &Credit{LedgerEntryID: op.OperationID, CustomerID: a.CustomerID, AmountCents: a.AmountCents, Currency: a.Currency}, nil
		},
	}
}

// creditable refuses a credit to a customer the tenant does not have, or in
// another currency than the customer's: the effect's check, and the
// Review's before a call waits for approval.
func creditable(ctx context.Context, tx gate.Tx, tenantID string, a *CreditArgs) error {
	var currency string
	err := tx.QueryRow(ctx, `SELECT currency FROM customers WHERE tenant_id = $1 AND customer_id = $2`, tenantID, a.CustomerID).Scan(&currency)
	if err != nil {
		return notFound(err, "customer_id", a.CustomerID)
	}
	if currency != a.Currency {
		return gate.NothingHappened(vocab.CodeInvalidArgument, "currency %q is not customer %s's currency %q", a.Currency, a.CustomerID, currency)
	}
	return nil
}
