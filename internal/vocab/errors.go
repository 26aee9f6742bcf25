package vocab

import (
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/domain"
)

// Code is a stable, machine-readable error code (domain.Code).
type Code = domain.Code

// The error codes of the contract.
const (
	CodeIdempotencyKeyRequired Code = "idempotency_key_required"
	CodeInvalidIdempotencyKey  Code = "invalid_idempotency_key"
	CodeKeyReuseDifferentArgs  Code = "idempotency_key_reuse_with_different_args"
	// CodeKeyExpired: the same key and arguments as an intent whose replay
	// window ended; it is not run again.
	CodeKeyExpired      Code = "idempotency_key_expired"
	CodeForbidden       Code = "forbidden"
	CodeUnauthenticated Code = "unauthenticated"
	CodeNotFound        Code = "not_found"
	CodeInvalidArgument Code = "invalid_argument"
	CodeUnavailable     Code = "unavailable"
	CodeRateLimited     Code = "rate_limited"
	CodeInternal        Code = "internal"
	// CodeResetTokenUsed and CodeResetTokenExpired refuse a password-reset
	// token that was redeemed before, or is past its expiry.
	CodeResetTokenUsed    Code = "reset_token_used"
	CodeResetTokenExpired Code = "reset_token_expired"

	// Outcome codes stored on failed claims.
	CodeOutcomeUnknown                Code = "outcome_unknown"
	CodeCancelled                     Code = "cancelled"
	CodeDownstreamIdempotencyMismatch Code = "downstream_idempotency_mismatch"
	CodeAmountExceedsRefundable       Code = "amount_exceeds_refundable"
	CodeCardDeclined                  Code = "card_declined"
	CodeDownstreamRejected            Code = "downstream_rejected"
	CodeRetriesExhausted              Code = "retries_exhausted"
	// CodeJobCancelledByOperator and CodeJobVanished fail an operation
	// whose River job ended without it, not by its owner's word: the job
	// was cancelled in River (River UI, rivercli, the River client), or is
	// gone (deleted) or ended without running it. An operator may re-drive
	// either.
	CodeJobCancelledByOperator Code = "job_cancelled_by_operator"
	CodeJobVanished            Code = "job_vanished"
	// CodeApprovalDenied and CodeApprovalExpired fail an operation that
	// waited for a person's approval: denied, or not approved in time.
	// Both are final: never re-driven.
	CodeApprovalDenied  Code = "approval_denied"
	CodeApprovalExpired Code = "approval_expired"
	// CodeApprovalAlreadyDecided refuses a decision on an operation that no
	// longer awaits approval: another approver decided it first.
	CodeApprovalAlreadyDecided Code = "approval_already_decided"
	// CodeApprovalsPendingLimit refuses a call that would wait for a
	// person's approval while its tenant already has the most calls
	// waiting that the deployment allows; nothing is claimed.
	CodeApprovalsPendingLimit Code = "approvals_pending_limit"
	// CodePossibleDuplicate refuses a call of a guarded tool whose
	// arguments match a recent or live intent under another key: nothing
	// is claimed until the caller confirms a new intent.
	CodePossibleDuplicate Code = "possible_duplicate"
)

// Codes returns every code constant above, in declaration order. Tools may
// store codes of their own besides these (docs/errors.md).
func Codes() []Code {
	return []Code{
		CodeIdempotencyKeyRequired, CodeInvalidIdempotencyKey, CodeKeyReuseDifferentArgs, CodeKeyExpired,
		CodeForbidden, CodeUnauthenticated, CodeNotFound, CodeInvalidArgument,
		CodeUnavailable, CodeRateLimited, CodeInternal, CodeResetTokenUsed, CodeResetTokenExpired,
		CodeOutcomeUnknown, CodeCancelled, CodeDownstreamIdempotencyMismatch, CodeAmountExceedsRefundable,
		CodeCardDeclined, CodeDownstreamRejected, CodeRetriesExhausted, CodeJobCancelledByOperator, CodeJobVanished,
		CodeApprovalDenied, CodeApprovalExpired, CodeApprovalAlreadyDecided, CodeApprovalsPendingLimit,
		CodePossibleDuplicate,
	}
}

// Error is an error with a stable code (domain.Error).
type Error = domain.Error

// Errorf returns an *Error with code, field and a formatted message.
func Errorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err if it is (or wraps) an *Error, and
// CodeInternal otherwise.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Sentinel errors shared by the stores and the gate. Stores translate their
// engine's errors into these at the boundary.
var (
	// ErrNotFound means the row asked for does not exist (for this tenant).
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost means a conditional write found the claim no longer
	// running under the caller's epoch: another worker or the reaper took it.
	ErrLeaseLost = errors.New("lease lost: claim is no longer running under this epoch")
	// ErrUnavailable means the database could not be reached in time.
	ErrUnavailable = errors.New("database unavailable")
)

// More sentinel errors for conditional writes.
var (
	// ErrAlreadyExists means an insert found a row with the same identity.
	ErrAlreadyExists = errors.New("already exists")
	// ErrStateChanged means a conditional write found the row in another
	// state than the one it requires (for example a take-over of a claim
	// that is no longer expired, or a re-drive of a claim that is not failed).
	ErrStateChanged = errors.New("row is not in the state this write requires")
	// ErrLeaseUnavailable means a worker could not take a claim's lease: it
	// is held by a live worker, terminal, or belongs to another job.
	ErrLeaseUnavailable = errors.New("lease unavailable")
	// ErrAlreadyUsed means a one-time row (a password-reset token) was
	// consumed before.
	ErrAlreadyUsed = errors.New("already used")
	// ErrExpired means a row (a password-reset token) is past its expiry.
	ErrExpired = errors.New("expired")
)
