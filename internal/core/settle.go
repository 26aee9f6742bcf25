package core

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/idemgate/idemgate/internal/vocab"
)

// SettledByProvider starts the reason of the audit row a provider's
// settlement writes.
const SettledByProvider = "settled_by_provider"

// Settlement is what a provider reported of a claim's effect.
type Settlement struct {
	// Result is the claim's result when the effect happened; Error, when
	// set, is the failure the provider reported instead.
	Result json.RawMessage
	Error  *vocab.ErrorInfo
	// Reason says what the provider reported (the event, the object), for
	// the audit row: "settled_by_provider: <Reason>".
	Reason string
}

// Settle stores, in tx, the outcome a provider reported for a claim whose
// outcome was unknown (EventSettle, or EventSettleFailed with s.Error):
// the table's check on c as read, the claim's write (its store guard
// agrees with the table; the epoch read is held), and the audit row,
// whose reason starts with SettledByProvider. Nothing is called again. A
// claim whose outcome is known answers ErrSettleKnown and changes
// nothing; one that changed since it was read, vocab.ErrStateChanged.
func Settle(ctx context.Context, tx Tx, c *Claim, s *Settlement) (*Claim, error) {
	event := EventSettle
	if s.Error != nil {
		event = EventSettleFailed
	}
	settled, err := apply(ctx, tx, event, c, Facts{}, &ClaimSettleParams{ID: c.ID, Epoch: c.Epoch, Result: s.Result, Error: s.Error})
	if err != nil {
		if errors.Is(err, ErrStateRefused) {
			return c, errors.Join(ErrSettleKnown, err)
		}
		return c, err
	}
	reason := SettledByProvider + ": " + s.Reason
	if s.Error != nil {
		reason += " (" + string(s.Error.Code) + ": " + s.Error.Message + ")"
	}
	if err := tx.AuditInsert(ctx, transitionAudit(ctx, settled, event, reason, nil)); err != nil {
		return c, err
	}
	return settled, nil
}
