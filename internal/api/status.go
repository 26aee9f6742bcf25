package api

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Codes the built-in tools store on failed operations besides domain's
// (docs/errors.md): refund_order's Stripe errors and the mail tool's SMTP
// refusals.
const (
	codeDownstreamAuth vocab.Code = "downstream_auth"
	codeMailRejected   vocab.Code = "mail_rejected"
)

// defaultStatus is the HTTP status of a code missing from codeStatus: a
// code a team's own tool defines (gate.NothingHappened and the like).
const defaultStatus = http.StatusUnprocessableEntity

// codeStatus is the HTTP status of each code on the REST twin, whether the
// code refuses a request or is the stored outcome of an operation, and
// whether that outcome is fresh or replayed. docs/errors.md states the same
// table; a test holds the two together.
var codeStatus = map[vocab.Code]int{
	// Refusals of the request: nothing was claimed (or the claim is another
	// intent's).
	vocab.CodeUnauthenticated:        http.StatusUnauthorized,
	vocab.CodeForbidden:              http.StatusForbidden,
	vocab.CodeIdempotencyKeyRequired: http.StatusBadRequest,
	vocab.CodeInvalidIdempotencyKey:  http.StatusBadRequest,
	vocab.CodeInvalidArgument:        http.StatusBadRequest,
	vocab.CodeKeyReuseDifferentArgs:  http.StatusUnprocessableEntity,
	vocab.CodeKeyExpired:             http.StatusUnprocessableEntity,
	vocab.CodeNotFound:               http.StatusNotFound,
	vocab.CodeRateLimited:            http.StatusTooManyRequests,
	// Too many calls of the tenant wait for approval: like rate_limited,
	// a wait clears it (not 409: in flight on this api).
	vocab.CodeApprovalsPendingLimit: http.StatusTooManyRequests,
	vocab.CodePossibleDuplicate:     http.StatusConflict,
	vocab.CodeUnavailable:           http.StatusServiceUnavailable,
	vocab.CodeInternal:              http.StatusInternalServerError,
	// A single-use token that existed and can no longer be used (a route
	// the tools contribute, Config.Routes).
	vocab.CodeResetTokenUsed:    http.StatusGone,
	vocab.CodeResetTokenExpired: http.StatusGone,

	// Outcomes stored on failed operations.
	vocab.CodeCardDeclined:                  http.StatusPaymentRequired,
	vocab.CodeAmountExceedsRefundable:       http.StatusUnprocessableEntity,
	vocab.CodeDownstreamRejected:            http.StatusUnprocessableEntity,
	vocab.CodeDownstreamIdempotencyMismatch: http.StatusUnprocessableEntity,
	// Not 409: on this api 409 means in flight, retry after Retry-After.
	vocab.CodeCancelled: http.StatusUnprocessableEntity,
	// An approver denied the operation, or nobody approved it in time.
	vocab.CodeApprovalDenied:  http.StatusUnprocessableEntity,
	vocab.CodeApprovalExpired: http.StatusUnprocessableEntity,
	// A decision on an operation decided already (not 409: in flight).
	vocab.CodeApprovalAlreadyDecided: http.StatusUnprocessableEntity,
	vocab.CodeOutcomeUnknown:         http.StatusBadGateway,
	vocab.CodeRetriesExhausted:       http.StatusBadGateway,
	// The job was cancelled or removed in River, not by the owner: the
	// fault is on the server's side, and an operator re-drives.
	vocab.CodeJobCancelledByOperator: http.StatusBadGateway,
	vocab.CodeJobVanished:            http.StatusBadGateway,
	codeDownstreamAuth:               http.StatusBadGateway,
	codeMailRejected:                 http.StatusUnprocessableEntity,
}

// statusFor returns code's HTTP status.
func statusFor(code vocab.Code) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return defaultStatus
}
