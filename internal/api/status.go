package api

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/domain"
)

// Codes the built-in tools store on failed operations besides domain's
// (docs/errors.md): refund_order's Stripe errors and send_password_reset's
// SMTP refusals.
const (
	codeDownstreamAuth domain.Code = "downstream_auth"
	codeMailRejected   domain.Code = "mail_rejected"
)

// defaultStatus is the HTTP status of a code missing from codeStatus: a
// code a team's own tool defines (tool.NothingHappened and the like).
const defaultStatus = http.StatusUnprocessableEntity

// codeStatus is the HTTP status of each code on the REST twin, whether the
// code refuses a request or is the stored outcome of an operation, and
// whether that outcome is fresh or replayed. docs/errors.md states the same
// table; a test holds the two together.
var codeStatus = map[domain.Code]int{
	// Refusals of the request: nothing was claimed (or the claim is another
	// intent's).
	domain.CodeUnauthenticated:        http.StatusUnauthorized,
	domain.CodeForbidden:              http.StatusForbidden,
	domain.CodeIdempotencyKeyRequired: http.StatusBadRequest,
	domain.CodeInvalidIdempotencyKey:  http.StatusBadRequest,
	domain.CodeInvalidArgument:        http.StatusBadRequest,
	domain.CodeKeyReuseDifferentArgs:  http.StatusUnprocessableEntity,
	domain.CodeKeyExpired:             http.StatusUnprocessableEntity,
	domain.CodeNotFound:               http.StatusNotFound,
	domain.CodeRateLimited:            http.StatusTooManyRequests,
	domain.CodeUnavailable:            http.StatusServiceUnavailable,
	domain.CodeInternal:               http.StatusInternalServerError,
	// A password-reset token that existed and can no longer be redeemed.
	domain.CodeResetTokenUsed:    http.StatusGone,
	domain.CodeResetTokenExpired: http.StatusGone,

	// Outcomes stored on failed operations.
	domain.CodeCardDeclined:                  http.StatusPaymentRequired,
	domain.CodeAmountExceedsRefundable:       http.StatusUnprocessableEntity,
	domain.CodeDownstreamRejected:            http.StatusUnprocessableEntity,
	domain.CodeDownstreamIdempotencyMismatch: http.StatusUnprocessableEntity,
	// Not 409: on this api 409 means in flight, retry after Retry-After.
	domain.CodeCancelled: http.StatusUnprocessableEntity,
	// An approver denied the operation, or nobody approved it in time.
	domain.CodeApprovalDenied:   http.StatusUnprocessableEntity,
	domain.CodeApprovalExpired:  http.StatusUnprocessableEntity,
	domain.CodeOutcomeUnknown:   http.StatusBadGateway,
	domain.CodeRetriesExhausted: http.StatusBadGateway,
	codeDownstreamAuth:          http.StatusBadGateway,
	codeMailRejected:            http.StatusUnprocessableEntity,
}

// statusFor returns code's HTTP status.
func statusFor(code domain.Code) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return defaultStatus
}
