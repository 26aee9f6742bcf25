package ops

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The decisions an ApprovalTrail reports.
const (
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalCancelled = "cancelled"
)

// ApprovalTrail summarizes the approval of an operation that awaited a
// person's approval, from its audit rows: who asked and when, and what
// ended the wait.
type ApprovalTrail struct {
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	// ApprovalExpiresAt is the end of the window while the operation still
	// waits; nil once it is decided.
	ApprovalExpiresAt *time.Time `json:"approval_expires_at,omitempty"`
	// Decision is approved, denied, expired or cancelled (by its owner);
	// empty while the operation waits.
	Decision  string     `json:"decision,omitempty"`
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	// Reason is the approver's note (approved, denied) or what ended the
	// wait (expired, cancelled).
	Reason string `json:"reason,omitempty"`
	// Refused are the decisions refused on the operation (denied audit
	// rows), oldest first.
	Refused []ApprovalRefusal `json:"refused,omitempty"`
}

// ApprovalRefusal is one refused approve or deny.
type ApprovalRefusal struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// awaitingReason is in the reason of the accepted row of a call that
// awaits approval (the gate's EventAwait and EventAwaitTakeOver).
const awaitingReason = "awaiting approval for up to "

// ApprovalTrailOf returns the approval trail of c from events (its key's
// audit rows, oldest first), or nil when c never awaited approval. It
// reads the rows as core.Gate writes them: the request is c's accepted row
// "awaiting approval for up to …"; a decision is "approve by U of
// fingerprint H[: note]" (accepted) or "deny by …" (failed); an expiry is
// "approval_expired: …" and a cancellation "cancel: …" (failed); refusals
// are denied rows "approve refused: …" or "deny refused: …".
func ApprovalTrailOf(c *core.Claim, events []*core.AuditEvent) *ApprovalTrail {
	var t *ApprovalTrail
	for _, e := range events {
		switch {
		case e.OperationID != c.OperationID:
			// An earlier intent of the key.
		case t == nil:
			if e.Decision == vocab.DecisionAccepted && strings.Contains(e.Reason, awaitingReason) {
				t = &ApprovalTrail{RequestedBy: e.UserID, RequestedAt: e.CreatedAt}
			}
		case e.Decision == vocab.DecisionDenied && isRefusal(e.Reason):
			t.Refused = append(t.Refused, ApprovalRefusal{By: e.UserID, At: e.CreatedAt, Reason: e.Reason})
		case t.Decision == "":
			if decision, reason, ok := approvalDecision(e); ok {
				at := e.CreatedAt
				t.Decision, t.DecidedBy, t.DecidedAt, t.Reason = decision, e.UserID, &at, reason
			}
		}
	}
	if c.Status == vocab.StatusAwaitingApproval {
		if t == nil { // its request row is written with it: not expected
			t = &ApprovalTrail{RequestedBy: c.UserID, RequestedAt: c.CreatedAt}
		}
		t.ApprovalExpiresAt = c.ApprovalExpiresAt
	}
	return t
}

// isRefusal reports whether reason is a refused decision's.
func isRefusal(reason string) bool {
	for _, ev := range []core.Event{core.EventApprove, core.EventDeny} {
		if strings.HasPrefix(reason, string(ev)+" refused: ") {
			return true
		}
	}
	return false
}

// approvalDecision reads e as the row that ended an approval's wait.
func approvalDecision(e *core.AuditEvent) (decision, reason string, ok bool) {
	decided := func(ev core.Event) (string, bool) {
		rest, ok := strings.CutPrefix(e.Reason, fmt.Sprintf("%s by %s of fingerprint %s", ev, e.UserID, e.ArgsHash))
		if !ok || (rest != "" && !strings.HasPrefix(rest, ": ")) {
			return "", false
		}
		return strings.TrimPrefix(rest, ": "), true
	}
	switch e.Decision {
	case vocab.DecisionAccepted:
		if note, ok := decided(core.EventApprove); ok {
			return ApprovalApproved, note, true
		}
	case vocab.DecisionFailed:
		if note, ok := decided(core.EventDeny); ok {
			return ApprovalDenied, note, true
		}
		if msg, ok := strings.CutPrefix(e.Reason, string(vocab.CodeApprovalExpired)+": "); ok {
			return ApprovalExpired, msg, true
		}
		if msg, ok := strings.CutPrefix(e.Reason, string(core.EventCancel)+": "); ok {
			return ApprovalCancelled, msg, true
		}
	}
	return "", "", false
}
