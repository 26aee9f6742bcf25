// Package domain holds the types that idemgate's clients and tool
// authors share with it: an operation as clients see it, its statuses, and
// the stable error codes. It imports only the standard library, as River's
// rivertype does, so that any package may use it.
package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Status is the state of an operation.
type Status string

// The statuses. Awaiting approval, queued and running are in flight;
// succeeded and failed are terminal.
const (
	// StatusAwaitingApproval: the operation needs a person's approval and
	// waits for it, with no job: nothing runs until an approver of the
	// tenant approves it.
	StatusAwaitingApproval Status = "awaiting_approval"
	StatusQueued           Status = "queued"
	StatusRunning          Status = "running"
	StatusSucceeded        Status = "succeeded"
	StatusFailed           Status = "failed"
)

// Terminal reports whether s is succeeded or failed.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed
}

// Operation is one intent as clients see it: what a mutation call answers
// with and what get_operation returns.
type Operation struct {
	OperationID    string          `json:"operation_id"`
	Tool           string          `json:"tool"`
	IdempotencyKey string          `json:"idempotency_key"`
	Status         Status          `json:"status"`
	Attempts       int             `json:"attempts"`
	JobID          int64           `json:"job_id,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *ErrorInfo      `json:"error,omitempty"`
	// Generation counts re-drives that moved to a new downstream key.
	Generation int `json:"generation"`
	// LastError is the last transient error while the operation is retried
	// (a Stripe outage, a network error): why it is not done yet.
	LastError *ErrorInfo `json:"last_error,omitempty"`
	// NextAttemptAt is when the operation's job runs next, while it waits
	// for a retry.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// LeaseExpiresAt is the end of the worker's in-flight lease while the
	// operation is running: a worker that died is replaced after it.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	// Approval says where and by whom the operation is decided, while it
	// is awaiting_approval; nil otherwise.
	Approval *Approval `json:"approval,omitempty"`
}

// Approval is how an operation awaiting approval gets decided: on the
// page at URL, by a person of the operation's tenant who holds the scope
// approvals:decide and is not RequestedBy (four eyes), before ExpiresAt.
type Approval struct {
	// URL is the page where a person approves or denies the operation.
	URL string `json:"url,omitempty"`
	// RequestedBy is the user whose call asked for approval.
	RequestedBy string `json:"requested_by"`
	// MayDecide says who may decide, in words an agent can relay.
	MayDecide string `json:"may_decide"`
	// ExpiresAt ends the window; after it the operation fails
	// approval_expired.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Summary is the tool's account of the call for the approver, with
	// facts read as it started waiting, such as "Refund 110.00 USD of order
	// ord_9f2 (total 150.00 USD, 0.00 already refunded)"; empty if the tool
	// gives none.
	Summary string `json:"summary,omitempty"`
}

// ErrorInfo is an operation's stored error: a stable code and a message.
type ErrorInfo struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// NothingHappened is set when the downstream answered definitively
	// that it made no effect, so that a re-drive may use a new downstream
	// key (the next generation).
	NothingHappened bool `json:"nothing_happened,omitempty"`
}

// Code is a stable, machine-readable error code. Clients branch on codes,
// never on messages. Tools may use codes of their own (snake_case).
type Code string

// The codes of the gate's answers that clients and tool authors meet.
const (
	CodeIdempotencyKeyRequired Code = "idempotency_key_required"
	CodeInvalidIdempotencyKey  Code = "invalid_idempotency_key"
	// CodeKeyReuseDifferentArgs: the key was used before with other
	// arguments (a conflict).
	CodeKeyReuseDifferentArgs Code = "idempotency_key_reuse_with_different_args"
	// CodeKeyExpired: the same key and arguments as an intent whose replay
	// window ended; it is not run again.
	CodeKeyExpired      Code = "idempotency_key_expired"
	CodeInvalidArgument Code = "invalid_argument"
	CodeNotFound        Code = "not_found"
	CodeForbidden       Code = "forbidden"
	CodeUnauthenticated Code = "unauthenticated"
	// CodeOutcomeUnknown: the effect may or may not have happened; an
	// operator decides.
	CodeOutcomeUnknown Code = "outcome_unknown"
	// CodeCancelled: the owner withdrew the intent before it ran; final.
	CodeCancelled Code = "cancelled"
	// CodeJobCancelledByOperator: the operation's job was cancelled in
	// River by someone other than its owner (an operator in River UI, say);
	// an operator may re-drive it.
	CodeJobCancelledByOperator Code = "job_cancelled_by_operator"
	// CodeJobVanished: the operation's job is gone (deleted in River) or
	// ended without running it; an operator may re-drive it.
	CodeJobVanished Code = "job_vanished"
	// CodeApprovalDenied: an approver denied the operation; final.
	CodeApprovalDenied Code = "approval_denied"
	// CodeApprovalExpired: nobody approved the operation within its
	// approval window; final.
	CodeApprovalExpired Code = "approval_expired"
	// CodeApprovalAlreadyDecided: a decision on an operation that no
	// longer awaits approval (decided already); nothing changed.
	CodeApprovalAlreadyDecided Code = "approval_already_decided"
	// CodeApprovalsPendingLimit: the call would wait for a person's
	// approval while its tenant already has the most calls waiting that
	// the deployment allows; nothing was claimed, retry later.
	CodeApprovalsPendingLimit Code = "approvals_pending_limit"
	// CodePossibleDuplicate: the same arguments as a recent or live
	// operation of the tool under another idempotency key (a re-minted
	// key); nothing was claimed. Retry the same intent with that
	// operation's key, or confirm a new intent beside it.
	CodePossibleDuplicate Code = "possible_duplicate"
)

// Error is an error with a stable code, the field it is about (if any), and
// for a conflict the argument names that differ.
type Error struct {
	Code    Code
	Field   string
	Message string
	// Fields lists the argument names a conflict differs in.
	Fields []string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}
