package ops

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

func TestApprovalTrailOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	row := func(m int, op string, d vocab.Decision, user, reason string) *core.AuditEvent {
		return &core.AuditEvent{CreatedAt: at(m), OperationID: op, Decision: d, UserID: user, Reason: reason, ArgsHash: "h1"}
	}
	requested := row(1, "op-2", vocab.DecisionAccepted, "bot", "took over expired operation op-1; awaiting approval for up to 1h0m0s")
	earlier := []*core.AuditEvent{
		row(0, "op-1", vocab.DecisionAccepted, "bot", "awaiting approval for up to 1h0m0s"),
		row(0, "op-1", vocab.DecisionFailed, "lead", "deny by lead of fingerprint h1: no"),
	}
	window := at(61)
	for _, tt := range []struct {
		name   string
		claim  *core.Claim
		events []*core.AuditEvent
		want   *ApprovalTrail
	}{
		{
			name:   "NeverAsked",
			claim:  &core.Claim{OperationID: "op-2", Status: vocab.StatusQueued},
			events: []*core.AuditEvent{row(1, "op-2", vocab.DecisionAccepted, "bot", "")},
		},
		{
			name:   "Waiting",
			claim:  &core.Claim{OperationID: "op-2", Status: vocab.StatusAwaitingApproval, ApprovalExpiresAt: &window},
			events: append(earlier, requested),
			want:   &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), ApprovalExpiresAt: &window},
		},
		{
			name:  "ApprovedWithoutNoteThenCancelled",
			claim: &core.Claim{OperationID: "op-2", Status: vocab.StatusFailed},
			events: append(earlier, requested,
				row(2, "op-2", vocab.DecisionDenied, "bot", "approve refused: gate: the requester may not approve or deny their own call"),
				row(3, "op-2", vocab.DecisionAccepted, "lead", "approve by lead of fingerprint h1"),
				row(4, "op-2", vocab.DecisionFailed, "bot", "cancel: cancelled by bot before it ran")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalApproved, DecidedBy: "lead", DecidedAt: ptr(at(3)),
				Refused: []ApprovalRefusal{{By: "bot", At: at(2), Reason: "approve refused: gate: the requester may not approve or deny their own call"}}},
		},
		{
			name:   "CancelledWhileWaiting",
			claim:  &core.Claim{OperationID: "op-2", Status: vocab.StatusFailed},
			events: append(earlier, requested, row(2, "op-2", vocab.DecisionFailed, "bot", "cancel: cancelled by bot before it ran")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalCancelled, DecidedBy: "bot", DecidedAt: ptr(at(2)),
				Reason: "cancelled by bot before it ran"},
		},
		{
			name:  "Expired",
			claim: &core.Claim{OperationID: "op-2", Status: vocab.StatusFailed},
			events: append(earlier, requested,
				row(61, "op-2", vocab.DecisionFailed, core.WorkerUser, "approval_expired: nobody approved it within its approval window")),
			want: &ApprovalTrail{RequestedBy: "bot", RequestedAt: at(1), Decision: ApprovalExpired, DecidedBy: core.WorkerUser, DecidedAt: ptr(at(61)),
				Reason: "nobody approved it within its approval window"},
		},
		{
			name:  "DeniedWithNote",
			claim: &core.Claim{OperationID: "op-2", Status: vocab.StatusFailed},
			events: append(earlier, requested,
				row(2, "op-2", vocab.DecisionFailed, "lead", "deny by lead of fingerprint h1: too large: ask finance")),
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
