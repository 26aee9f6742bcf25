// Package domain holds the types that every other idemgate package shares:
// the actor a request acts for, the operation a claim describes, its
// statuses, and the stable error codes clients and operators rely on.
//
// It imports only the standard library, so that the gate, the stores, the
// workers and the HTTP front door can all depend on it.
package vocab

import (
	"slices"

	"github.com/idemgate/idemgate/domain"
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
	// Issuer and Subject are a verified OAuth access token's iss and sub,
	// whatever claim UserID was read from; both empty for idemgate's own
	// tokens. Operator rules match them (IDEMGATE_OPS_SUBJECTS), never the
	// tenant claim.
	Issuer  string
	Subject string
}

// HasScope reports whether the actor holds scope.
func (a Actor) HasScope(scope string) bool {
	return slices.Contains(a.Scopes, scope)
}

// Status is the state of a claim (domain.Status).
type Status = domain.Status

// The claim statuses. Awaiting approval, queued and running are in flight;
// succeeded and failed are terminal.
const (
	StatusAwaitingApproval = domain.StatusAwaitingApproval
	StatusQueued           = domain.StatusQueued
	StatusRunning          = domain.StatusRunning
	StatusSucceeded        = domain.StatusSucceeded
	StatusFailed           = domain.StatusFailed
)

// ValidStatus reports whether s is one of the five statuses.
func ValidStatus(s Status) bool {
	switch s {
	case StatusAwaitingApproval, StatusQueued, StatusRunning, StatusSucceeded, StatusFailed:
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
	// OutcomeDuplicate means the same arguments as a recent or live intent
	// under another key (a guarded tool): refused with possible_duplicate,
	// nothing claimed.
	OutcomeDuplicate Outcome = "possible_duplicate"
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
	// DecisionDrift: the provider reported an effect no operation
	// explains (a refund made outside idemgate, a second refund of one
	// operation); a drift record names it.
	DecisionDrift Decision = "drift"
)

// Operation is the client-visible view of a claim (domain.Operation).
type Operation = domain.Operation

// ErrorInfo is a stored, redacted error: a stable code and a message.
type ErrorInfo = domain.ErrorInfo

// Approval is how an operation awaiting approval gets decided
// (domain.Approval).
type Approval = domain.Approval
