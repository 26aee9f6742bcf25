package ops

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
)

func TestApprovalTrailOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	row := func(m int, op string, d domain.Decision, user, reason string) *gate.AuditEvent {
		return &gate.AuditEvent{CreatedAt: at(m), OperationID: op, Decision: d, UserID: user, Reason: reason, ArgsHash: "h1"}
	}
	requested := row(1, "op-2", domain.DecisionAccepted, "bot", "took over expired operation op-1; awaiting approval for up to 1h0m0s")
	earlier := []*gate.AuditEvent{
		row(0, "op-1", domain.DecisionAccepted, "bot", "awaiting approval for up to 1h0m0s"),
		row(0, "op-1", domain.DecisionFailed, "lead", "deny by lead of fingerprint h1: no"),
	}
	window := at(61)
	for _, tt := range []struct {
		name   string
		claim  *gate.Claim
		events []*gate.AuditEvent
		want   *ApprovalTrail
	}{
		{
			name:   "NeverAsked",
			claim:  &gate.Claim{OperationID: "op-2", Status: domain.StatusQueued},
			events: []*gate.AuditEvent{row(1, "op-2", domain.DecisionAccepted, "bot", "")},
		},
		{
			name:   "Waiting",
			claim:  &gate.Claim{OperationID: "op-2", Status: domain.StatusAwaitingApproval, ApprovalExpiresAt: &window},
			events: append(earlier, requested),
			want:   &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), ApprovalExpiresAt: &window},
		},
		{
			name:  "ApprovedWithoutNoteThenCancelled",
			claim: &gate.Claim{OperationID: "op-2", Status: domain.StatusFailed},
			events: append(earlier, requested,
				row(2, "op-2", domain.DecisionDenied, "bot", "approve refused: gate: the requester may not approve or deny their own call"),
				row(3, "op-2", domain.DecisionAccepted, "lead", "approve by lead of fingerprint h1"),
				row(4, "op-2", domain.DecisionFailed, "bot", "cancel: cancelled by bot before it ran")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalApproved, DecidedBy: "lead", DecidedAt: ptr(at(3)),
				Refused: []ApprovalRefusal{{By: "bot", At: at(2), Reason: "approve refused: gate: the requester may not approve or deny their own call"}}},
		},
		{
			name:   "CancelledWhileWaiting",
			claim:  &gate.Claim{OperationID: "op-2", Status: domain.StatusFailed},
			events: append(earlier, requested, row(2, "op-2", domain.DecisionFailed, "bot", "cancel: cancelled by bot before it ran")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalCancelled, DecidedBy: "bot", DecidedAt: ptr(at(2)),
				Reason: "cancelled by bot before it ran"},
		},
		{
			name:  "Expired",
			claim: &gate.Claim{OperationID: "op-2", Status: domain.StatusFailed},
			events: append(earlier, requested,
				row(61, "op-2", domain.DecisionFailed, gate.WorkerUser, "approval_expired: nobody approved it within its approval window")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalExpired, DecidedBy: gate.WorkerUser, DecidedAt: ptr(at(61)),
				Reason: "nobody approved it within its approval window"},
		},
		{
			name:  "DeniedWithNote",
			claim: &gate.Claim{OperationID: "op-2", Status: domain.StatusFailed},
			events: append(earlier, requested,
				row(2, "op-2", domain.DecisionFailed, "lead", "deny by lead of fingerprint h1: too large: ask finance")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalDenied, DecidedBy: "lead", DecidedAt: ptr(at(2)),
				Reason: "too large: ask finance"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, ApprovalTrailOf(tt.claim, tt.events))
		})
	}
}

func ptr[T any](v T) *T { return &v }
