package core

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/idemgate/idemgate/internal/vocab"
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
	// EventAwait: a call that needs a person's approval claims a new
	// intent, which waits with no job.
	EventAwait Event = "await"
	// EventAwaitTakeOver: a call that needs approval takes over a key
	// whose claim ended and whose replay window is over; it waits with no
	// job.
	EventAwaitTakeOver Event = "await_take_over"
	// EventApprove: an approver of the tenant, not the requester, approves
	// the fingerprint they saw; the job is inserted in the same write's
	// transaction.
	EventApprove Event = "approve"
	// EventDeny: an approver denies the operation (approval_denied).
	EventDeny Event = "deny"
	// EventApprovalExpire: the approval window ends with no decision
	// (approval_expired).
	EventApprovalExpire Event = "approval_expire"
	// EventSettle: the provider reports that the effect of a claim whose
	// outcome was unknown (failed with outcome_unknown, or running past
	// its lease) happened: the claim succeeds with the provider's result,
	// and nothing is called again.
	EventSettle Event = "settle"
	// EventSettleFailed: the provider reports that such a claim's effect
	// failed: the claim fails with the provider's reason.
	EventSettleFailed Event = "settle_failed"

	// EventExpire: a terminal claim's replay window ends. Nothing is
	// written: the store computes it against the database's clock
	// (Claim.Expired); the same fingerprint is refused from then on, and
	// another may take the key over.
	EventExpire Event = "expire"
	// EventArchive: the pruner moves an expired claim into its key's
	// history (one row per fingerprint, kept for the tool's retention).
	EventArchive Event = "archive"
	// EventForget: the pruner marks a history row whose retention ended
	// forgotten: it no longer refuses its fingerprint, and numbers the
	// next intent until core.KeyMemory later, when it is deleted.
	EventForget Event = "forget"
)

// Refusals of a transition the table does not allow. Gate.Cancel and
// Gate.Redrive answer them; the claim as read comes back with them.
var (
	// ErrCancelTerminal: the operation already succeeded or failed.
	ErrCancelTerminal = errors.New("gate: the operation is already finished")
	// ErrCancelStarted: a worker runs the operation (or has fetched its
	// job), or an earlier attempt may have reached the downstream: its
	// effect may be under way, so it is not cancelled.
	ErrCancelStarted = errors.New("gate: the operation has started; its effect may be under way")
	// ErrRedriveSucceeded: re-driving a succeeded operation is refused.
	ErrRedriveSucceeded = errors.New("the operation succeeded; re-driving it is refused")
	// ErrRedriveNotFailed: only failed operations are re-driven.
	ErrRedriveNotFailed = errors.New("the operation is not failed; only failed operations are re-driven")
	// ErrRedriveCancelled: an operation cancelled by its agent or tenant
	// is final; its owner withdrew the intent, and only a new intent (a
	// new key) runs it.
	ErrRedriveCancelled = errors.New("the operation was cancelled by its owner and is final; re-driving it is refused (the agent may start a new intent with a new key)")
	// ErrRedriveApproval: an operation denied by an approver, or not
	// approved in time, is final; only a new intent (a new key) asks again.
	ErrRedriveApproval = errors.New("the operation was not approved (denied, or its approval window ended) and is final; re-driving it is refused (the agent may ask again with a new key)")

	// ErrApprovalNotAwaiting: the operation does not wait for approval
	// (any more): already decided, expired, or it never needed one.
	ErrApprovalNotAwaiting = errors.New("gate: the operation is not awaiting approval")
	// ErrApprovalFingerprint: the decision names other arguments than the
	// operation's.
	ErrApprovalFingerprint = errors.New("gate: the approval names other arguments than the operation's")
	// ErrApprovalSelf: the requester may not decide on their own call.
	ErrApprovalSelf = errors.New("gate: the requester may not approve or deny their own call")
	// ErrApprovalExpired: the approval window ended.
	ErrApprovalExpired = errors.New("gate: the approval window has ended")

	// ErrSettleKnown: the provider's report settles only an unknown
	// outcome; this claim's outcome is known (or still being worked).
	ErrSettleKnown = errors.New("gate: the operation's outcome is not unknown; the provider's report does not settle it")
)

// Facts are what the gate knows of a call besides the claim, for the
// table's guards.
type Facts struct {
	// AttemptsLeaveNoEffect: a failed attempt of this tool changed nothing
	// (an in-transaction effect rolls back), so a queued operation may be
	// cancelled after attempts too.
	AttemptsLeaveNoEffect bool
	// JobFetched: River reports the claim's job running (a worker fetched
	// it and is about to take the lease).
	JobFetched bool
}

// Transition is one row of the claim's state machine.
type Transition struct {
	Event Event
	// From are the statuses the event applies to (nil: to no claim at
	// all); Guard and Condition say what else must hold.
	From []vocab.Status
	// To is the status after the event.
	To vocab.Status
	// Decision is the audit row written in the event's transaction; empty
	// for none.
	Decision vocab.Decision
	// Store is the Executor method that writes the event, as a method
	// expression (Executor.ClaimRedrive): the gate calls it through the
	// table (apply), and a misspelt method does not compile. Nil for an
	// event that writes nothing.
	Store any
	// Condition is what the store's conditional write checks besides the
	// status: the engines' SQL guards, which are the lock.
	Condition string
	// Refused maps a status the event does not apply to onto the refusal
	// the gate answers; others are ErrStateRefused.
	Refused map[vocab.Status]error
	// Guard, when set, is what the gate checks of the claim before the
	// write, besides its status: nil when the event applies, else the
	// refusal.
	Guard func(c *Claim, f Facts) error
}

// ErrStateRefused is the refusal of a transition from a status its row
// does not list, when the row names no refusal of its own.
var ErrStateRefused = errors.New("gate: the state machine does not allow this transition")

var (
	awaiting = []vocab.Status{vocab.StatusAwaitingApproval}
	inFlight = []vocab.Status{vocab.StatusQueued, vocab.StatusRunning}
	terminal = []vocab.Status{vocab.StatusSucceeded, vocab.StatusFailed}
	queued   = []vocab.Status{vocab.StatusQueued}
	running  = []vocab.Status{vocab.StatusRunning}
	failed   = []vocab.Status{vocab.StatusFailed}
)

// Transitions is the claim's state machine: status × event → next status,
// audit decision and store method. The gate asks it what is allowed
// (Transition.Check) and writes each event through it (apply); both
// engines are checked against it (gate/gatetest), including that each
// refuses exactly what it refuses.
var Transitions = []Transition{
	{Event: EventInsert, To: vocab.StatusQueued, Decision: vocab.DecisionAccepted, Store: Executor.ClaimInsert,
		Condition: "no claim for (tenant, tool, key) and no history row of the same fingerprint; a group of concurrent calls' claims in one ClaimInsertMany"},
	{Event: EventTakeOver, From: terminal, To: vocab.StatusQueued, Decision: vocab.DecisionAccepted, Store: Executor.ClaimTakeOver,
		Condition: "past expires_at, and the key's history does not know the new fingerprint (read in the same transaction); new operation id, generation 0; the old fingerprint goes into the history (archived row)",
		Guard:     expiredOnly},
	{Event: EventLease, From: inFlight, To: vocab.StatusRunning, Decision: vocab.DecisionStarted, Store: Executor.ClaimLease,
		Condition: "the claim's own job; running only with an expired lease",
		Guard:     noLiveLease},
	{Event: EventComplete, From: running, To: vocab.StatusSucceeded, Decision: vocab.DecisionSucceeded, Store: Executor.ClaimComplete,
		Condition: "epoch held"},
	{Event: EventApply, From: inFlight, To: vocab.StatusSucceeded, Decision: vocab.DecisionSucceeded, Store: Executor.ClaimComplete,
		Condition: "Locked: locked by ClaimLock in the same transaction, epoch held; running only with an expired lease",
		Guard:     noLiveLease},
	{Event: EventFail, From: running, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimFail,
		Condition: "epoch held"},
	{Event: EventRelease, From: running, To: vocab.StatusQueued, Store: Executor.ClaimRelease,
		Condition: "epoch held; the job is retried by River"},
	{Event: EventReclaim, From: running, To: vocab.StatusQueued, Decision: vocab.DecisionReclaimed, Store: Executor.ClaimReclaim,
		Condition: "epoch held and the lease expired; a fresh job",
		Guard:     noLiveLease},
	{Event: EventGiveUp, From: running, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimFail,
		Condition: "epoch held and the lease expired; outcome_unknown",
		Guard:     noLiveLease},
	{Event: EventRepoint, From: queued, To: vocab.StatusQueued, Decision: vocab.DecisionReclaimed, Store: Executor.ClaimRepoint,
		Condition: "epoch and job held; a fresh job"},
	{Event: EventAbandon, From: inFlight, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimAbandon,
		Condition: "epoch and job held, no live lease; its job ended",
		Guard:     noLiveLease},
	{Event: EventCancel, From: []vocab.Status{vocab.StatusAwaitingApproval, vocab.StatusQueued}, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimAbandon,
		Condition: "epoch and job held (none while awaiting approval); the job not fetched; not attempted unless attempts leave no effect",
		Refused: map[vocab.Status]error{vocab.StatusRunning: ErrCancelStarted,
			vocab.StatusSucceeded: ErrCancelTerminal, vocab.StatusFailed: ErrCancelTerminal},
		Guard: func(c *Claim, f Facts) error {
			if f.JobFetched || c.Attempts > 0 && !f.AttemptsLeaveNoEffect {
				return ErrCancelStarted
			}
			return nil
		}},
	{Event: EventRedrive, From: failed, To: vocab.StatusQueued, Decision: vocab.DecisionRedriven, Store: Executor.ClaimRedrive,
		Condition: "failed, not cancelled by its owner, not denied or expired awaiting approval; a retried or fresh job",
		Refused: map[vocab.Status]error{vocab.StatusSucceeded: ErrRedriveSucceeded,
			vocab.StatusQueued: ErrRedriveNotFailed, vocab.StatusRunning: ErrRedriveNotFailed,
			vocab.StatusAwaitingApproval: ErrRedriveNotFailed},
		Guard: func(c *Claim, _ Facts) error {
			switch {
			case c.Error == nil:
			case c.Error.Code == vocab.CodeCancelled:
				return ErrRedriveCancelled
			case c.Error.Code == vocab.CodeApprovalDenied, c.Error.Code == vocab.CodeApprovalExpired:
				return ErrRedriveApproval
			}
			return nil
		}},
	{Event: EventAwait, To: vocab.StatusAwaitingApproval, Decision: vocab.DecisionAccepted, Store: Executor.ClaimInsert,
		Condition: "as insert, with no job; approval_expires_at = now() + the approval window"},
	{Event: EventAwaitTakeOver, From: terminal, To: vocab.StatusAwaitingApproval, Decision: vocab.DecisionAccepted, Store: Executor.ClaimTakeOver,
		Condition: "as take-over, with no job; approval_expires_at = now() + the approval window",
		Guard:     expiredOnly},
	{Event: EventApprove, From: awaiting, To: vocab.StatusQueued, Decision: vocab.DecisionAccepted, Store: Executor.ClaimApprove,
		Condition: "awaiting approval, the approved fingerprint is the claim's, the window not ended; the job inserted in the same transaction",
		Refused:   notAwaiting()},
	{Event: EventDeny, From: awaiting, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimDecline,
		Condition: "awaiting approval, the window not ended; approval_denied",
		Refused:   notAwaiting()},
	{Event: EventApprovalExpire, From: awaiting, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimDecline,
		Condition: "awaiting approval, the window ended (database clock); approval_expired",
		Refused:   notAwaiting()},
	{Event: EventSettle, From: settleable, To: vocab.StatusSucceeded, Decision: vocab.DecisionSucceeded, Store: Executor.ClaimSettle,
		Condition: "failed with outcome_unknown, or running with an expired lease; epoch held (and bumped: a late worker is fenced); the provider's result",
		Refused:   settleRefusals(), Guard: unknownOutcome},
	{Event: EventSettleFailed, From: settleable, To: vocab.StatusFailed, Decision: vocab.DecisionFailed, Store: Executor.ClaimSettle,
		Condition: "as settle; the provider's failure",
		Refused:   settleRefusals(), Guard: unknownOutcome},
	{Event: EventExpire, From: terminal, To: "",
		Condition: "expires_at <= the database's now(); no write (computed as Claim.Expired)"},
	{Event: EventArchive, From: terminal, To: "", Decision: vocab.DecisionArchived, Store: Executor.ClaimArchiveExpired,
		Condition: "past expires_at, under one clock reading; the claim's row becomes its fingerprint's history row",
		Guard:     expiredOnly},
	{Event: EventForget, To: "", Decision: vocab.DecisionForgotten, Store: Executor.TombstoneDeleteExpired,
		Condition: "a history row past its retention"},
}

// settleable are the statuses an unknown outcome is in: failed with
// outcome_unknown, or running past its lease (unknownOutcome says which).
var settleable = []vocab.Status{vocab.StatusRunning, vocab.StatusFailed}

// settleRefusals refuse a provider's settlement of a claim whose outcome
// is not unknown.
func settleRefusals() map[vocab.Status]error {
	return map[vocab.Status]error{vocab.StatusAwaitingApproval: ErrSettleKnown, vocab.StatusQueued: ErrSettleKnown,
		vocab.StatusSucceeded: ErrSettleKnown}
}

// unknownOutcome allows a settlement of a failed claim only with
// outcome_unknown, and of a running one only when its lease expired.
func unknownOutcome(c *Claim, _ Facts) error {
	switch {
	case c.Status == vocab.StatusFailed && (c.Error == nil || c.Error.Code != vocab.CodeOutcomeUnknown):
		return ErrSettleKnown
	case c.Status == vocab.StatusRunning && c.LeaseLive:
		return fmt.Errorf("%w: a live worker holds the lease", ErrSettleKnown)
	}
	return nil
}

// notAwaiting refuses a decision on a claim that does not await one.
func notAwaiting() map[vocab.Status]error {
	return map[vocab.Status]error{vocab.StatusQueued: ErrApprovalNotAwaiting, vocab.StatusRunning: ErrApprovalNotAwaiting,
		vocab.StatusSucceeded: ErrApprovalNotAwaiting, vocab.StatusFailed: ErrApprovalNotAwaiting}
}

// noLiveLease refuses a claim whose lease a live worker holds.
func noLiveLease(c *Claim, _ Facts) error {
	if c.LeaseLive {
		return fmt.Errorf("%w: a live worker holds the lease", ErrStateRefused)
	}
	return nil
}

// expiredOnly refuses a claim whose replay window has not ended.
func expiredOnly(c *Claim, _ Facts) error {
	if !c.Expired {
		return fmt.Errorf("%w: the replay window has not ended", ErrStateRefused)
	}
	return nil
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
func (t Transition) Allows(from vocab.Status) bool {
	return slices.Contains(t.From, from)
}

// Check returns nil when the event applies to c, else the refusal: the
// row's own for c's status, or its guard's.
func (t Transition) Check(c *Claim, f Facts) error {
	if !t.Allows(c.Status) {
		if err, ok := t.Refused[c.Status]; ok {
			return err
		}
		return fmt.Errorf("%w: %s from %s", ErrStateRefused, t.Event, c.Status)
	}
	if t.Guard != nil {
		return t.Guard(c, f)
	}
	return nil
}

// apply writes event e through the store method its row names, after
// checking the row allows it for c (nil c: an event on no claim yet, or
// one the store's condition alone decides, such as a lease). It panics
// when the row's method does not take p: a programmer's mistake.
func apply[P any](ctx context.Context, x Executor, e Event, c *Claim, f Facts, p P) (*Claim, error) {
	t := TransitionOf(e)
	if c != nil {
		if err := t.Check(c, f); err != nil {
			return c, err
		}
	}
	write, ok := t.Store.(func(Executor, context.Context, P) (*Claim, error))
	if !ok {
		panic(fmt.Sprintf("gate: event %s's store method does not take %T", e, p))
	}
	return write(x, ctx, p)
}

// applyCount is apply for the events that write many rows and count them
// (archive, forget).
func applyCount[P any](ctx context.Context, x Executor, e Event, p P) (int, error) {
	write, ok := TransitionOf(e).Store.(func(Executor, context.Context, P) (int, error))
	if !ok {
		panic(fmt.Sprintf("gate: event %s's store method does not take %T", e, p))
	}
	return write(x, ctx, p)
}
