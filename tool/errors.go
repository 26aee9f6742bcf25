package tool

import (
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/domain"
)

// Outcome is what an effect's error says about what happened downstream.
type Outcome int

const (
	// OutcomeTransient: nothing is known to have happened and trying again
	// with the same downstream key may succeed (a 5xx, a timeout, a 409
	// while the provider still works on the first request, a rate limit).
	// River retries within its attempt budget.
	OutcomeTransient Outcome = iota
	// OutcomeNothingHappened: the provider answered definitively that it
	// made no effect (card declined, over-refund, unknown id). The
	// operation fails; an operator's re-drive moves to the next generation
	// (a new downstream key), since the provider would replay its refusal.
	OutcomeNothingHappened
	// OutcomeHappened: definitive, and the effect may have been made (the
	// provider refused after acting, or a reused key with other
	// parameters). The operation fails; a re-drive keeps the downstream key.
	OutcomeHappened
	// OutcomeUnknown: the effect may or may not have happened and the
	// downstream cannot tell (an SMTP server that hung up after DATA). The
	// operation fails with outcome_unknown for an operator to decide; a
	// re-drive keeps the downstream key.
	OutcomeUnknown
)

// Error is an effect's failure with its code and what it says happened.
// Any other error from an effect is transient.
type Error struct {
	Outcome Outcome
	Info    domain.ErrorInfo
	// Err is the cause, for logs (never shown to clients).
	Err error
}

// Error implements error.
func (e *Error) Error() string { return string(e.Info.Code) + ": " + e.Info.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Definitive reports whether the operation ends failed (no retry).
func (e *Error) Definitive() bool { return e.Outcome != OutcomeTransient }

// NothingHappened returns a definitive failure after which nothing
// happened downstream.
func NothingHappened(code Code, format string, args ...any) *Error {
	return &Error{Outcome: OutcomeNothingHappened, Info: domain.ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// Happened returns a definitive failure after which the effect may have
// been made.
func Happened(code Code, format string, args ...any) *Error {
	return &Error{Outcome: OutcomeHappened, Info: domain.ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// Transient returns a retryable failure with code recorded as the
// operation's last_error.
func Transient(code Code, err error) *Error {
	return &Error{Outcome: OutcomeTransient, Info: domain.ErrorInfo{Code: code, Message: err.Error()}, Err: err}
}

// Unknown returns a failure whose outcome cannot be known: the operation
// fails with outcome_unknown.
func Unknown(err error) *Error {
	return &Error{Outcome: OutcomeUnknown, Info: domain.ErrorInfo{Code: domain.CodeOutcomeUnknown, Message: err.Error()}, Err: err}
}

// Invalid returns the error a Mutation's Check gives for bad arguments: the
// call is refused with invalid_argument naming field, before any claim.
func Invalid(field, format string, args ...any) error {
	return domain.Errorf(domain.CodeInvalidArgument, field, format, args...)
}

// NotFound returns the error a read tool gives when the thing asked for
// does not exist for the caller.
func NotFound(field, format string, args ...any) error {
	return domain.Errorf(domain.CodeNotFound, field, format, args...)
}

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
