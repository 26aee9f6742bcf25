package gate

import (
	"fmt"
	"slices"

	"github.com/idemgate/idemgate/domain"
)

// Event is something that happens to a claim. Each event has one name: the
// store method that writes it (Transition.Store), the metric label and
// the log line. Audit decisions are the contract's: several events write
// failed, and their reasons say which.
type Event string

// The claim's events.
const (
	// EventInsert: a call claims a new intent.
	EventInsert Event = "insert"
	// EventTakeOver: a new intent takes over a key whose claim ended and
	// whose replay window is over.
	EventTakeOver Event = "take_over"
	// EventLease: a worker takes the in-flight lease (epoch+1).
	EventLease Event = "lease"
	// EventComplete: the lease holder stores the result.
	EventComplete Event = "complete"
	// EventApply: a worker that ran an in-transaction effect under the
	// claim's row lock takes the lease and stores the result in one write.
	EventApply Event = "apply"
	// EventFail: the lease holder stores a definitive failure.
	EventFail Event = "fail"
	// EventRelease: the lease holder hands a transient failure back to
	// River (same epoch, last_error kept).
	EventRelease Event = "release"
	// EventReclaim: the reaper gives a claim whose lease expired a fresh job.
	EventReclaim Event = "reclaim"
	// EventGiveUp: the reaper fails a claim whose lease expired once its
	// reclaim budget is spent (or at once, for a tool that fails unknown
	// outcomes), with outcome_unknown.
	EventGiveUp Event = "give_up"
	// EventRepoint: the reaper gives a queued claim a fresh job when its
	// job was fetched by a worker that stopped before taking the lease.
	EventRepoint Event = "repoint"
	// EventAbandon: the reaper fails a claim whose job ended without it.
	EventAbandon Event = "abandon"
	// EventCancel: a client cancels an operation that has not started.
	EventCancel Event = "cancel"
	// EventRedrive: an operator runs a failed claim again.
	EventRedrive Event = "redrive"
)

// Transition is one row of the claim's state machine.
type Transition struct {
	Event Event
	// From are the statuses the event applies to; Condition says what
	// else must hold.
	From []domain.Status
	// To is the status after the event.
	To domain.Status
	// Decision is the audit row written in the event's transaction; empty
	// for none.
	Decision domain.Decision
	// Store is the Executor method that writes the event.
	Store string
	// Condition is what the store's conditional write checks besides the
	// status.
	Condition string
}

var (
	inFlight = []domain.Status{domain.StatusQueued, domain.StatusRunning}
	terminal = []domain.Status{domain.StatusSucceeded, domain.StatusFailed}
	queued   = []domain.Status{domain.StatusQueued}
	running  = []domain.Status{domain.StatusRunning}
	failed   = []domain.Status{domain.StatusFailed}
)

// Transitions is the claim's state machine: status × event → next status,
// audit decision and store method. Both engines are checked against it
// (gate/gatetest).
var Transitions = []Transition{
	{EventInsert, nil, domain.StatusQueued, domain.DecisionAccepted, "ClaimInsert", "no claim for (tenant, tool, key) and no tombstone of the same fingerprint; a group of concurrent calls' claims in one ClaimInsertMany"},
	{EventTakeOver, terminal, domain.StatusQueued, domain.DecisionAccepted, "ClaimTakeOver", "past expires_at; new operation id, generation 0"},
	{EventLease, inFlight, domain.StatusRunning, domain.DecisionStarted, "ClaimLease", "the claim's own job; running only with an expired lease"},
	{EventComplete, running, domain.StatusSucceeded, domain.DecisionSucceeded, "ClaimComplete", "epoch held"},
	{EventApply, inFlight, domain.StatusSucceeded, domain.DecisionSucceeded, "ClaimComplete", "Locked: locked by ClaimLock in the same transaction, epoch held; running only with an expired lease"},
	{EventFail, running, domain.StatusFailed, domain.DecisionFailed, "ClaimFail", "epoch held"},
	{EventRelease, running, domain.StatusQueued, "", "ClaimRelease", "epoch held; the job is retried by River"},
	{EventReclaim, running, domain.StatusQueued, domain.DecisionReclaimed, "ClaimReclaim", "epoch held and the lease expired; a fresh job"},
	{EventGiveUp, running, domain.StatusFailed, domain.DecisionFailed, "ClaimFail", "epoch held and the lease expired; outcome_unknown"},
	{EventRepoint, queued, domain.StatusQueued, domain.DecisionReclaimed, "ClaimRepoint", "epoch and job held; a fresh job"},
	{EventAbandon, inFlight, domain.StatusFailed, domain.DecisionFailed, "ClaimAbandon", "epoch and job held, no live lease; its job ended"},
	{EventCancel, queued, domain.StatusFailed, domain.DecisionFailed, "ClaimAbandon", "epoch and job held; the job not fetched; not attempted unless attempts leave no effect"},
	{EventRedrive, failed, domain.StatusQueued, domain.DecisionRedriven, "ClaimRedrive", "failed; a retried or fresh job"},
}

// TransitionOf returns the row of event e. It panics for an event that is
// not in Transitions: a programmer's mistake.
func TransitionOf(e Event) Transition {
	for _, t := range Transitions {
		if t.Event == e {
			return t
		}
	}
	panic(fmt.Sprintf("gate: no transition %q", e))
}

// Allows reports whether the event applies to a claim in status from
// (nil From: to no claim at all).
func (t Transition) Allows(from domain.Status) bool {
	return slices.Contains(t.From, from)
}
