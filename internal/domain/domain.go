// Package domain holds the types that every other idemgate package shares:
// the actor a request acts for, the operation a claim describes, its
// statuses, and the stable error codes clients and operators rely on.
//
// It imports only the standard library, so that the gate, the stores, the
// workers and the HTTP front door can all depend on it.
package domain

import (
	"encoding/json"
	"slices"
	"time"
)

// Actor is who a request acts for. It comes from the bearer token, never
// from tool arguments.
type Actor struct {
	// TenantID scopes every claim, audit row and domain row.
	TenantID string
	// UserID names the person or bot the token was issued to.
	UserID string
	// TokenID identifies the token (not its secret) for audit rows.
	TokenID string
	// Scopes are the permissions the token grants, such as "billing:refund".
	Scopes []string
}

// HasScope reports whether the actor holds scope.
func (a Actor) HasScope(scope string) bool {
	return slices.Contains(a.Scopes, scope)
}

// Status is the state of a claim.
type Status string

// The claim statuses. Queued and running are in flight; succeeded and failed
// are terminal.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// Terminal reports whether s is succeeded or failed.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed
}

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusSucceeded, StatusFailed:
		return true
	}
	return false
}

// Outcome is how a mutation call was answered.
type Outcome string

// The outcomes of a mutation call (docs/design.md, "The gate").
const (
	// OutcomeAccepted means this call created the claim.
	OutcomeAccepted Outcome = "accepted"
	// OutcomeReplayed means the claim existed and was terminal: the stored
	// outcome is returned and nothing runs.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeConflict means the key was used before with other arguments.
	OutcomeConflict Outcome = "conflict"
	// OutcomeInFlight means the claim existed and is still queued or running.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeExpired means the same key and arguments ran before and their
	// replay window ended: refused with idempotency_key_expired, not run.
	OutcomeExpired Outcome = "expired"
)

// Decision is the kind of an audit row.
type Decision string

// The audit decisions.
const (
	DecisionAccepted  Decision = "accepted"
	DecisionReplayed  Decision = "replayed"
	DecisionConflict  Decision = "conflict"
	DecisionInFlight  Decision = "in_flight"
	DecisionDenied    Decision = "denied"
	DecisionStarted   Decision = "started"
	DecisionSucceeded Decision = "succeeded"
	DecisionFailed    Decision = "failed"
	DecisionReclaimed Decision = "reclaimed"
	DecisionRedriven  Decision = "redriven"
	// DecisionArchived: a claim's replay window ended and the pruner moved
	// it into its key's history (the fingerprint stays refused).
	DecisionArchived Decision = "archived"
	// DecisionForgotten: a history row's retention ended and the pruner
	// deleted it (the fingerprint may run again under that key).
	DecisionForgotten Decision = "forgotten"
)

// Operation is the client-visible view of a claim: what a mutation call
// answers with and what get_operation returns.
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
	// NextAttemptAt is when River runs the operation's job next, while it
	// waits for a retry; set by get_operation, list_operations and tasks.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// LeaseExpiresAt is the end of the worker's in-flight lease while the
	// operation is running: a worker that died is replaced after it.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

// ErrorInfo is a stored, redacted error: a stable code and a message.
type ErrorInfo struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// NothingHappened is set when the downstream answered definitively
	// that it made no effect, so that a re-drive may use a new downstream
	// key (the next generation).
	NothingHappened bool `json:"nothing_happened,omitempty"`
}
