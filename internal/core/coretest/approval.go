package coretest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// approver is a person of the suite's tenant who is not the requester
// (Claim's actor is support-bot).
var approver = vocab.Actor{TenantID: "acme", UserID: "finance-lead", TokenID: "tok_approver"}

// awaitClaim claims an intent that awaits approval for window.
func awaitClaim(ctx context.Context, t *testing.T, s *suite, key string, window time.Duration) *core.Claim {
	t.Helper()
	res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key, ApprovalWindow: window})
	require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	require.Equal(t, vocab.StatusAwaitingApproval, res.Claim.Status)
	require.Zero(t, res.Claim.JobID, "a waiting claim has no job")
	require.NotNil(t, res.Claim.ApprovalExpiresAt)
	return res.Claim
}

func decide(c *core.Claim, who vocab.Actor, hash string) *core.DecideParams {
	return &core.DecideParams{Approver: who, OperationID: c.OperationID, ArgsHash: hash}
}

// approvalEvents drives each approval event once for
// TransitionsFollowTheTable, which check checks against the table; a
// take-over that waits is checked on the store (its audit row is the
// call's).
func approvalEvents(ctx context.Context, t *testing.T, s *suite, check func(core.Event, *core.Claim, int) *core.Claim) {
	t.Helper()
	n := func(c *core.Claim) int { return len(audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey)) }

	a := awaitClaim(ctx, t, s, "table-await-0001", time.Hour)
	check(core.EventAwait, &core.Claim{ID: a.ID}, 0)
	before := n(a)
	_, err := s.gate.Approve(ctx, decide(a, approver, a.ArgsHash))
	require.NoError(t, err)
	check(core.EventApprove, a, before)

	d := awaitClaim(ctx, t, s, "table-deny-00001", time.Hour)
	before = n(d)
	_, err = s.gate.Deny(ctx, decide(d, approver, d.ArgsHash))
	require.NoError(t, err)
	check(core.EventDeny, d, before)

	e := awaitClaim(ctx, t, s, "table-expire-001", time.Minute)
	before = n(e)
	expired, err := s.gate.ExpireApprovals(ctx, &core.ExpireApprovalsParams{Now: ptr(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	require.Equal(t, 1, expired)
	check(core.EventApprovalExpire, e, before)

	// A take-over that waits: the denied claim's replay window has ended.
	tx, err := s.Store.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	to, err := tx.ClaimTakeOver(ctx, &core.ClaimTakeOverParams{ID: d.ID, OperationID: "00000000-0000-4000-8000-0000000000cc",
		UserID: "support-bot", Args: json.RawMessage(`{}`), ArgsHash: "other", TTL: time.Hour, Retention: time.Hour,
		ApprovalWindow: time.Hour, Now: ptr(time.Now().Add(48 * time.Hour))})
	require.NoError(t, err)
	require.Equal(t, vocab.StatusAwaitingApproval, to.Status)
	require.Zero(t, to.JobID)
	require.NotNil(t, to.ApprovalExpiresAt)
	require.NoError(t, tx.Rollback(ctx))
}

var approvalTests = map[string]func(t *testing.T, s *suite){
	"ApprovalWaitsWithNoJobAndApprovingEnqueuesOne": func(t *testing.T, s *suite) {
		ctx := context.Background()
		jobs := s.JobCount(ctx)
		c := awaitClaim(ctx, t, s, "approve-key-0001", time.Hour)
		require.Equal(t, jobs, s.JobCount(ctx), "no job while waiting")

		// A retry of the same intent gets the same waiting operation and no job.
		retry := Claim(ctx, t, s.gate, &ClaimOpts{Key: "approve-key-0001"})
		require.Equal(t, vocab.OutcomeInFlight, retry.Outcome)
		require.Equal(t, c.OperationID, retry.Claim.OperationID)
		require.Equal(t, vocab.StatusAwaitingApproval, retry.Claim.Status)
		require.Equal(t, jobs, s.JobCount(ctx))
		// Other arguments are the usual conflict.
		other := Claim(ctx, t, s.gate, &ClaimOpts{Key: "approve-key-0001", ApprovalWindow: time.Hour,
			Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("900")}})
		require.Equal(t, vocab.OutcomeConflict, other.Outcome)

		approved, err := s.gate.Approve(ctx, decide(c, approver, c.ArgsHash))
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, approved.Status)
		require.NotZero(t, approved.JobID)
		require.Nil(t, approved.ApprovalExpiresAt)
		require.Equal(t, jobs+1, s.JobCount(ctx), "exactly one job after approval")
		require.NotEmpty(t, s.JobState(ctx, approved.JobID))

		// A second approval changes nothing.
		again, err := s.gate.Approve(ctx, decide(c, approver, c.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalNotAwaiting)
		require.Equal(t, approved.JobID, again.JobID)
		require.Equal(t, jobs+1, s.JobCount(ctx))

		// The worker leases it like any queued claim.
		leased := lease(ctx, t, s.Store, approved, approved.JobID, time.Hour)
		require.Equal(t, vocab.StatusRunning, leased.Status)

		events := audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey)
		var byApprover []vocab.Decision
		for _, ev := range events {
			if ev.UserID == approver.UserID {
				byApprover = append(byApprover, ev.Decision)
			}
		}
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionDenied}, byApprover,
			"the approval and the refused second one name the approver")
	},

	"ApprovalRefusals": func(t *testing.T, s *suite) {
		ctx := context.Background()
		jobs := s.JobCount(ctx)
		c := awaitClaim(ctx, t, s, "refuse-key-00001", time.Hour)

		_, err := s.gate.Approve(ctx, decide(c, approver, "not-the-fingerprint"))
		require.ErrorIs(t, err, core.ErrApprovalFingerprint)
		self := vocab.Actor{TenantID: "acme", UserID: "support-bot"}
		_, err = s.gate.Approve(ctx, decide(c, self, c.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalSelf, "four eyes")
		_, err = s.gate.Deny(ctx, decide(c, self, c.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalSelf)
		_, err = s.gate.Approve(ctx, decide(c, vocab.Actor{TenantID: "other", UserID: "finance-lead"}, c.ArgsHash))
		require.ErrorIs(t, err, vocab.ErrNotFound, "another tenant's approver does not find it")
		_, err = s.gate.Approve(ctx, &core.DecideParams{Approver: approver, OperationID: c.OperationID, ArgsHash: c.ArgsHash,
			Now: ptr(time.Now().Add(2 * time.Hour))})
		require.ErrorIs(t, err, core.ErrApprovalExpired)

		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusAwaitingApproval, got.Status, "refusals change nothing")
		require.Zero(t, got.JobID)
		require.Equal(t, jobs, s.JobCount(ctx), "a refused approval's job rolled back")
		denied := 0
		for _, ev := range audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey) {
			if ev.Decision == vocab.DecisionDenied {
				denied++
			}
		}
		require.Equal(t, 4, denied, "each refusal writes a denied audit row")

		// Not awaiting: an ordinary claim.
		q := Claim(ctx, t, s.gate, &ClaimOpts{Key: "refuse-key-00002"}).Claim
		_, err = s.gate.Approve(ctx, decide(q, approver, q.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalNotAwaiting)
	},

	"ApprovalDenyAndExpireAreFinal": func(t *testing.T, s *suite) {
		ctx := context.Background()
		jobs := s.JobCount(ctx)
		d := awaitClaim(ctx, t, s, "final-deny-00001", time.Hour)
		denied, err := s.gate.Deny(ctx, decide(d, approver, d.ArgsHash))
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, denied.Status)
		require.Equal(t, vocab.CodeApprovalDenied, denied.Error.Code)
		_, err = s.gate.Approve(ctx, decide(d, approver, d.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalNotAwaiting)

		e := awaitClaim(ctx, t, s, "final-expire-001", time.Minute)
		n, err := s.gate.ExpireApprovals(ctx, &core.ExpireApprovalsParams{})
		require.NoError(t, err)
		require.Zero(t, n, "the window has not ended")
		n, err = s.gate.ExpireApprovals(ctx, &core.ExpireApprovalsParams{Now: ptr(time.Now().Add(time.Hour))})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		expired, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: e.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, expired.Status)
		require.Equal(t, vocab.CodeApprovalExpired, expired.Error.Code)

		// Replayed like any failure.
		replay := Claim(ctx, t, s.gate, &ClaimOpts{Key: "final-deny-00001", ApprovalWindow: time.Hour})
		require.Equal(t, vocab.OutcomeReplayed, replay.Outcome)
		require.Equal(t, vocab.CodeApprovalDenied, replay.Claim.Error.Code)

		// Never re-driven: the table and the engine's guard both refuse.
		for _, c := range []*core.Claim{denied, expired} {
			require.ErrorIs(t, core.TransitionOf(core.EventRedrive).Check(c, core.Facts{}), core.ErrRedriveApproval)
			_, err := s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID})
			require.ErrorIs(t, err, vocab.ErrStateChanged)
		}
		require.Equal(t, jobs, s.JobCount(ctx), "denied and expired operations never had a job")
	},

	"CancelAWaitingClaim": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := awaitClaim(ctx, t, s, "cancel-await-001", time.Hour)
		cancelled, err := s.gate.Cancel(ctx, &core.CancelParams{TenantID: c.TenantID, OperationID: c.OperationID, UserID: "support-bot"}, s.Control)
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, cancelled.Status)
		require.Equal(t, vocab.CodeCancelled, cancelled.Error.Code)
		_, err = s.gate.Approve(ctx, decide(c, approver, c.ArgsHash))
		require.ErrorIs(t, err, core.ErrApprovalNotAwaiting)
	},
}
