package gate

import (
	"fmt"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// An effect's error says what happened downstream. An error made by none
// of the functions below is transient: nothing is known to have happened
// and trying again with the same downstream key may succeed (a 5xx, a
// timeout, a rate limit); River retries it within its attempt budget.

// NothingHappened returns a definitive failure after which nothing happened
// downstream: the provider answered that it made no effect (card declined,
// over-refund, unknown id). The operation fails; an operator's re-drive
// moves to the next generation (a new downstream key), since the provider
// would replay its refusal.
func NothingHappened(code domain.Code, format string, args ...any) error {
	return effectError(toolspec.OutcomeNothingHappened, code, fmt.Sprintf(format, args...), nil)
}

// Happened returns a definitive failure after which the effect may have
// been made (the provider refused after acting, or a reused key with other
// parameters). The operation fails; a re-drive keeps the downstream key.
func Happened(code domain.Code, format string, args ...any) error {
	return effectError(toolspec.OutcomeHappened, code, fmt.Sprintf(format, args...), nil)
}

// Transient returns a retryable failure whose code is recorded as the
// operation's last_error while River retries.
func Transient(code domain.Code, err error) error {
	return effectError(toolspec.OutcomeTransient, code, err.Error(), err)
}

// Unknown returns a failure whose outcome cannot be known (an SMTP server
// that hung up after DATA): the operation fails with outcome_unknown for an
// operator to decide; a re-drive keeps the downstream key.
func Unknown(err error) error {
	return effectError(toolspec.OutcomeUnknown, domain.CodeOutcomeUnknown, err.Error(), err)
}

func effectError(o toolspec.Outcome, code domain.Code, msg string, cause error) *toolspec.Error {
	return &toolspec.Error{Outcome: o, Info: vocab.ErrorInfo{Code: code, Message: msg}, Err: cause}
}

// Invalid returns the error a Mutation's Check gives for bad arguments: the
// call is refused with invalid_argument naming field, before any claim.
func Invalid(field, format string, args ...any) error {
	return vocab.Errorf(vocab.CodeInvalidArgument, field, format, args...)
}

// NotFound returns the error a read tool gives when the thing asked for
// does not exist for the caller.
func NotFound(field, format string, args ...any) error {
	return vocab.Errorf(vocab.CodeNotFound, field, format, args...)
}
