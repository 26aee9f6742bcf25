package enginesql

import (
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Errors is how an engine tells its driver's errors apart, for Translate.
type Errors struct {
	// NoRows is the driver's error for a query that returned no row.
	NoRows error
	// Duplicate reports a unique (or primary key) violation and names what
	// was violated.
	Duplicate func(err error) (name string, ok bool)
	// Unavailable reports that the database cannot be reached or used right
	// now (a retryable condition), as opposed to a statement error.
	Unavailable func(err error) bool
}

// Translate maps a driver error to domain's sentinels at the engine's
// boundary: no rows is vocab.ErrNotFound, a duplicate wraps
// vocab.ErrAlreadyExists (with the name of what was violated, not the
// driver's error), a database that cannot be used wraps
// vocab.ErrUnavailable and err, and any other error is err.
func (e *Errors) Translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, e.NoRows) {
		return vocab.ErrNotFound
	}
	if name, ok := e.Duplicate(err); ok {
		return fmt.Errorf("%w: %s", vocab.ErrAlreadyExists, name)
	}
	if e.Unavailable(err) {
		return fmt.Errorf("%w: %w", vocab.ErrUnavailable, err)
	}
	return err
}

// Conditional is the outcome of a conditional claim write that returned
// (c, err) after translation: a write that matched no row
// (vocab.ErrNotFound) failed its condition, and returns failed instead,
// the error core.Executor names for the method (vocab.ErrAlreadyExists,
// vocab.ErrLeaseLost or vocab.ErrStateChanged).
func Conditional(c *core.Claim, err, failed error) (*core.Claim, error) {
	if errors.Is(err, vocab.ErrNotFound) {
		return nil, failed
	}
	return c, err
}

// Leased is the outcome of ClaimLease's conditional write that returned
// (c, err) after translation: when it matched no row, the claim as read
// now, with vocab.ErrLeaseUnavailable.
func Leased(c *core.Claim, err error, read func() (*core.Claim, error)) (*core.Claim, error) {
	if !errors.Is(err, vocab.ErrNotFound) {
		return c, err
	}
	c, err = read()
	if err != nil {
		return nil, err
	}
	return c, vocab.ErrLeaseUnavailable
}

// FillLeaseAudit completes a lease's started audit row from the leased
// claim: the reason names the attempt and the epoch, and the fingerprint
// is the claim's (the job does not carry it). The Postgres engine writes
// the same in SQL.
func FillLeaseAudit(row *core.AuditInsertParams, c *core.Claim) {
	row.Reason = fmt.Sprintf("attempt %d, epoch %d", c.Attempts, c.Epoch)
	row.ArgsHash = c.ArgsHash
}
