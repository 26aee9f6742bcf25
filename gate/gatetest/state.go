package gatetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// stateTests check the store against the gate's state machine
// (gate.Transitions): every event, driven through the gate as production
// drives it, moves a claim from a status its row allows to the row's
// status, with the row's audit decision (or none).
var stateTests = map[string]func(t *testing.T, s *suite){
	"TransitionsFollowTheTable": func(t *testing.T, s *suite) {
		ctx := context.Background()
		seen := map[gate.Event]bool{}
		check := func(e gate.Event, before *gate.Claim, auditBefore int) *gate.Claim {
			t.Helper()
			tr := gate.TransitionOf(e)
			got, err := s.Store.ClaimGetByID(ctx, &gate.ClaimGetByIDParams{ID: before.ID})
			require.NoError(t, err, e)
			if tr.From != nil {
				require.True(t, tr.Allows(before.Status), "%s from %s", e, before.Status)
			}
			require.Equal(t, tr.To, got.Status, "%s", e)
			events := audit(ctx, t, s.Store, got.TenantID, got.Tool, got.IdempotencyKey)
			if tr.Decision == "" {
				require.Len(t, events, auditBefore, "%s writes no audit row", e)
			} else {
				require.Len(t, events, auditBefore+1, "%s writes one audit row", e)
				require.Equal(t, tr.Decision, events[len(events)-1].Decision, "%s", e)
			}
			seen[e] = true
			return got
		}
		nAudit := func(c *gate.Claim) int {
			return len(audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey))
		}
		newClaim := func(key string) *gate.Claim {
			c := Claim(ctx, t, s.gate, &ClaimOpts{Key: key}).Claim
			check(gate.EventInsert, &gate.Claim{ID: c.ID}, 0)
			return c
		}
		hooks := gate.JobHooks{
			Complete: func(context.Context, gate.Tx) error { return nil },
			Cancel: func(ctx context.Context, tx gate.Tx) error {
				return nil
			},
		}
		enter := func(c *gate.Claim) *gate.Claim {
			n := nAudit(c)
			leased, err := s.gate.Enter(ctx, &gate.LeaseParams{Claim: c, JobID: c.JobID, Lease: time.Minute})
			require.NoError(t, err)
			check(gate.EventLease, c, n)
			return leased
		}

		// lease, release, lease, complete; then take_over.
		c := newClaim("state-complete-01")
		leased := enter(c)
		n := nAudit(c)
		_, err := s.gate.Release(ctx, leased, domain.ErrorInfo{Code: "transient", Message: "503"})
		require.NoError(t, err)
		c = check(gate.EventRelease, leased, n)
		leased = enter(c)
		n = nAudit(c)
		_, err = s.gate.Complete(ctx, &gate.CompleteParams{Claim: leased, Result: json.RawMessage(`{"refund_id":"re_1"}`), Job: hooks})
		require.NoError(t, err)
		c = check(gate.EventComplete, leased, n)
		_, err = s.Store.ClaimTakeOver(ctx, &gate.ClaimTakeOverParams{ID: c.ID, OperationID: "00000000-0000-4000-8000-0000000000aa",
			UserID: "u", Args: json.RawMessage(`{}`), ArgsHash: "other", TTL: time.Hour, Now: ptr(time.Now().Add(48 * time.Hour))})
		require.NoError(t, err)
		got, err := s.Store.ClaimGetByID(ctx, &gate.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.True(t, gate.TransitionOf(gate.EventTakeOver).Allows(c.Status))
		require.Equal(t, gate.TransitionOf(gate.EventTakeOver).To, got.Status)
		seen[gate.EventTakeOver] = true // its audit row is the call's (Claim)

		// apply: locked, run and completed in one transaction.
		c = newClaim("state-apply-001")
		n = nAudit(c)
		tx, locked, err := s.gate.LockTx(ctx, &gate.LeaseParams{Claim: &gate.Claim{TenantID: c.TenantID, OperationID: c.OperationID},
			JobID: c.JobID, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, domain.StatusQueued, locked.Status, "a lock writes nothing")
		done, err := s.gate.Complete(ctx, &gate.CompleteParams{Tx: tx, Locked: true, Claim: locked,
			Result: json.RawMessage(`{"ok":true}`), Job: hooks})
		require.NoError(t, err)
		require.Equal(t, locked.Epoch+1, done.Epoch, "the lease's epoch")
		require.Equal(t, 1, done.Attempts)
		require.NotNil(t, done.FirstCalledAt)
		check(gate.EventApply, c, n)

		// fail, redrive.
		c = newClaim("state-fail-0001")
		leased = enter(c)
		n = nAudit(c)
		_, err = s.gate.Fail(ctx, leased, domain.ErrorInfo{Code: domain.CodeCardDeclined, Message: "declined"}, hooks)
		require.NoError(t, err)
		c = check(gate.EventFail, leased, n)
		n = nAudit(c)
		_, err = s.gate.Redrive(ctx, &gate.RedriveParams{TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey,
			Operator: "ops", Reason: "retry"}, s.Control)
		require.NoError(t, err)
		check(gate.EventRedrive, c, n)

		// reclaim (expired lease).
		c = newClaim("state-reclaim-01")
		leased = lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		n = nAudit(c)
		res, err := s.gate.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.Reclaimed)
		check(gate.EventReclaim, leased, n)

		// give_up: a gate whose refund policy has a budget of one lease.
		policies := Policies()
		for i := range policies {
			policies[i].ReclaimBudget = 1
		}
		strict, err := gate.New(&gate.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: policies})
		require.NoError(t, err)
		c = newClaim("state-give-up-01")
		leased = lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		n = nAudit(c)
		res, err = strict.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.GaveUp)
		check(gate.EventGiveUp, leased, n)

		// repoint (a fetched job that never took the lease).
		c = newClaim("state-repoint-01")
		s.MarkJobRunning(ctx, c.JobID, 2*time.Hour)
		n = nAudit(c)
		res, err = s.gate.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.Repointed)
		check(gate.EventRepoint, c, n)

		// abandon (its job ended).
		c = newClaim("state-abandon-01")
		tx, err = s.Store.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Control.JobCancelTx(ctx, tx, c.JobID))
		require.NoError(t, tx.Commit(ctx))
		n = nAudit(c)
		res, err = s.gate.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.Abandoned)
		check(gate.EventAbandon, c, n)

		// cancel.
		c = newClaim("state-cancel-001")
		n = nAudit(c)
		_, err = s.gate.Cancel(ctx, &gate.CancelParams{TenantID: c.TenantID, OperationID: c.OperationID, UserID: "agent"}, s.Control)
		require.NoError(t, err)
		check(gate.EventCancel, c, n)

		for _, tr := range gate.Transitions {
			require.True(t, seen[tr.Event], fmt.Sprintf("event %s is in the table but not exercised here", tr.Event))
		}
	},
}
