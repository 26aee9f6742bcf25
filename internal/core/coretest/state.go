package coretest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// stateTests check the store against the gate's state machine
// (core.Transitions): every event, driven through the gate as production
// drives it, moves a claim from a status its row allows to the row's
// status, with the row's audit decision (or none).
var stateTests = map[string]func(t *testing.T, s *suite){
	"TransitionsFollowTheTable": func(t *testing.T, s *suite) {
		ctx := context.Background()
		seen := map[core.Event]bool{}
		check := func(e core.Event, before *core.Claim, auditBefore int) *core.Claim {
			t.Helper()
			tr := core.TransitionOf(e)
			got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: before.ID})
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
		nAudit := func(c *core.Claim) int {
			return len(audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey))
		}
		newClaim := func(key string) *core.Claim {
			c := Claim(ctx, t, s.gate, &ClaimOpts{Key: key}).Claim
			check(core.EventInsert, &core.Claim{ID: c.ID}, 0)
			return c
		}
		hooks := core.JobHooks{
			Complete: func(context.Context, core.Tx) error { return nil },
			Cancel: func(ctx context.Context, tx core.Tx) error {
				return nil
			},
		}
		enter := func(c *core.Claim) *core.Claim {
			n := nAudit(c)
			leased, err := s.gate.Enter(ctx, &core.LeaseParams{Claim: c, JobID: c.JobID, Lease: time.Minute})
			require.NoError(t, err)
			check(core.EventLease, c, n)
			return leased
		}

		// lease, release, lease, complete; then take_over.
		c := newClaim("state-complete-01")
		leased := enter(c)
		n := nAudit(c)
		_, err := s.gate.Release(ctx, leased, vocab.ErrorInfo{Code: "transient", Message: "503"})
		require.NoError(t, err)
		c = check(core.EventRelease, leased, n)
		leased = enter(c)
		n = nAudit(c)
		_, err = s.gate.Complete(ctx, &core.CompleteParams{Claim: leased, Result: json.RawMessage(`{"refund_id":"re_1"}`), Job: hooks})
		require.NoError(t, err)
		c = check(core.EventComplete, leased, n)
		_, err = s.Store.ClaimTakeOver(ctx, &core.ClaimTakeOverParams{ID: c.ID, OperationID: "00000000-0000-4000-8000-0000000000aa",
			UserID: "u", Args: json.RawMessage(`{}`), ArgsHash: "other", TTL: time.Hour, Now: ptr(time.Now().Add(48 * time.Hour))})
		require.NoError(t, err)
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.True(t, core.TransitionOf(core.EventTakeOver).Allows(c.Status))
		require.Equal(t, core.TransitionOf(core.EventTakeOver).To, got.Status)
		seen[core.EventTakeOver] = true // its audit row is the call's (Claim)

		// apply: locked, run and completed in one transaction.
		c = newClaim("state-apply-001")
		n = nAudit(c)
		tx, locked, err := s.gate.LockTx(ctx, &core.LeaseParams{Claim: &core.Claim{TenantID: c.TenantID, OperationID: c.OperationID},
			JobID: c.JobID, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, locked.Status, "a lock writes nothing")
		done, err := s.gate.Complete(ctx, &core.CompleteParams{Tx: tx, Locked: true, Claim: locked,
			Result: json.RawMessage(`{"ok":true}`), Job: hooks})
		require.NoError(t, err)
		require.Equal(t, locked.Epoch+1, done.Epoch, "the lease's epoch")
		require.Equal(t, 1, done.Attempts)
		require.NotNil(t, done.FirstCalledAt)
		check(core.EventApply, c, n)

		// fail, redrive.
		c = newClaim("state-fail-0001")
		leased = enter(c)
		n = nAudit(c)
		_, err = s.gate.Fail(ctx, leased, vocab.ErrorInfo{Code: vocab.CodeCardDeclined, Message: "declined"}, hooks)
		require.NoError(t, err)
		c = check(core.EventFail, leased, n)
		n = nAudit(c)
		_, err = s.gate.Redrive(ctx, &core.RedriveParams{TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey,
			Operator: "ops", Reason: "retry"}, s.Control)
		require.NoError(t, err)
		check(core.EventRedrive, c, n)

		// reclaim (expired lease).
		c = newClaim("state-reclaim-01")
		leased = lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		n = nAudit(c)
		res, err := s.gate.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.Reclaimed)
		check(core.EventReclaim, leased, n)

		// give_up: a gate whose refund policy has a budget of one lease.
		policies := Policies()
		for i := range policies {
			policies[i].ReclaimBudget = 1
		}
		strict, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: policies, Secret: Secret})
		require.NoError(t, err)
		c = newClaim("state-give-up-01")
		leased = lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		n = nAudit(c)
		res, err = strict.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.GaveUp)
		check(core.EventGiveUp, leased, n)

		// repoint (a fetched job that never took the lease).
		c = newClaim("state-repoint-01")
		s.MarkJobRunning(ctx, c.JobID, 2*time.Hour)
		n = nAudit(c)
		res, err = s.gate.Reap(ctx, s.Control, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, res.Repointed)
		check(core.EventRepoint, c, n)

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
		check(core.EventAbandon, c, n)

		// settle: the provider reports the effect of a claim whose outcome
		// was unknown (failed with outcome_unknown; running past its lease).
		c = newClaim("state-settle-001")
		leased = enter(c)
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: leased.ID, Epoch: leased.Epoch,
			Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown, Message: "lost"}})
		require.NoError(t, err)
		unknown, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		n = nAudit(c)
		tx, err = s.Store.Begin(ctx)
		require.NoError(t, err)
		settled, err := core.Settle(ctx, tx, unknown, &core.Settlement{Result: json.RawMessage(`{"refund_id":"re_settled"}`), Reason: "re_settled succeeded"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Greater(t, settled.Epoch, unknown.Epoch, "a late worker is fenced")
		require.JSONEq(t, `{"refund_id":"re_settled"}`, string(settled.Result))
		check(core.EventSettle, unknown, n)
		c = newClaim("state-settle-002")
		lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		leased, err = s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID}) // its lease expired, as read now
		require.NoError(t, err)
		n = nAudit(c)
		tx, err = s.Store.Begin(ctx)
		require.NoError(t, err)
		_, err = core.Settle(ctx, tx, leased, &core.Settlement{Error: &vocab.ErrorInfo{Code: vocab.CodeDownstreamRejected, Message: "expired_or_canceled_card"}, Reason: "re_x failed"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		got = check(core.EventSettleFailed, leased, n)
		require.Equal(t, vocab.CodeDownstreamRejected, got.Error.Code)
		settleAudit := audit(ctx, t, s.Store, got.TenantID, got.Tool, got.IdempotencyKey)
		require.Contains(t, settleAudit[len(settleAudit)-1].Reason, core.SettledByProvider)

		// cancel.
		c = newClaim("state-cancel-001")
		n = nAudit(c)
		_, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: c.TenantID, OperationID: c.OperationID, UserID: "agent"}, s.Control)
		require.NoError(t, err)
		check(core.EventCancel, c, n)

		// expire: nothing is written; the store reads the claim as expired
		// once the database's clock passes expires_at.
		c = newClaim("state-expire-001")
		leased = enter(c)
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`),
			Now: ptr(time.Now().Add(-2 * moneyTTL))})
		require.NoError(t, err)
		expired, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.True(t, expired.Expired)
		require.NoError(t, core.TransitionOf(core.EventExpire).Check(expired, core.Facts{}))
		seen[core.EventExpire] = true

		// archive: the claim leaves the table for its key's history, with
		// an archived audit row.
		n = nAudit(c)
		archived, err := s.gate.Prune(ctx, 10)
		require.NoError(t, err)
		require.GreaterOrEqual(t, archived, 1)
		_, err = s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.ErrorIs(t, err, vocab.ErrNotFound)
		events := audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey)
		require.Len(t, events, n+1)
		require.Equal(t, core.TransitionOf(core.EventArchive).Decision, events[n].Decision)
		require.Equal(t, c.OperationID, events[n].OperationID)
		hist, err := s.Store.TombstoneGetByKey(ctx, &core.TombstoneGetByKeyParams{TenantID: c.TenantID, Tool: c.Tool,
			IdempotencyKey: c.IdempotencyKey, ArgsHash: c.ArgsHash})
		require.NoError(t, err)
		require.Equal(t, c.OperationID, hist.OperationID)
		seen[core.EventArchive] = true

		// forget: after the retention, the history row goes, with a
		// forgotten audit row.
		_, err = s.gate.PruneAt(ctx, 10, time.Now().Add(core.MaxRetention+10*core.MaxTTL))
		require.NoError(t, err)
		_, err = s.Store.TombstoneGetByKey(ctx, &core.TombstoneGetByKeyParams{TenantID: c.TenantID, Tool: c.Tool,
			IdempotencyKey: c.IdempotencyKey, ArgsHash: c.ArgsHash, Now: ptr(time.Now().Add(core.MaxRetention + 10*core.MaxTTL))})
		require.ErrorIs(t, err, vocab.ErrNotFound)
		events = audit(ctx, t, s.Store, c.TenantID, c.Tool, c.IdempotencyKey)
		require.Len(t, events, n+2)
		require.Equal(t, core.TransitionOf(core.EventForget).Decision, events[n+1].Decision)
		seen[core.EventForget] = true

		// The approval events, driven through the gate as well.
		approvalEvents(ctx, t, s, check)
		seen[core.EventAwaitTakeOver] = true // its audit row is the call's (Claim)

		for _, tr := range core.Transitions {
			require.True(t, seen[tr.Event], fmt.Sprintf("event %s is in the table but not exercised here", tr.Event))
		}
	},

	"StoreRefusesExactlyWhatTheTableRefuses": func(t *testing.T, s *suite) {
		// Each engine's conditional writes are the lock; the table is what
		// the gate asks first. For every claim state and every event whose
		// store method is its own, the engine writes exactly when the
		// table allows it (each write rolled back, so states stay put).
		ctx := context.Background()
		past := ptr(time.Now().Add(-2 * moneyTTL))
		finish := func(key string, fail *vocab.ErrorInfo, at *time.Time) *core.Claim {
			c := Claim(ctx, t, s.gate, &ClaimOpts{Key: key}).Claim
			l := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
			var err error
			if fail != nil {
				_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: l.ID, Epoch: l.Epoch, Error: *fail, Now: at})
			} else {
				_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: l.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`), Now: at})
			}
			require.NoError(t, err)
			return c
		}
		declined := &vocab.ErrorInfo{Code: vocab.CodeCardDeclined, Message: "declined"}
		cancelled := &vocab.ErrorInfo{Code: vocab.CodeCancelled, Message: "cancelled by agent", NothingHappened: true}
		unknown := &vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown, Message: "lease expired"}
		queued := Claim(ctx, t, s.gate, &ClaimOpts{Key: "matrix-queued-01"}).Claim
		live := Claim(ctx, t, s.gate, &ClaimOpts{Key: "matrix-live-0001"}).Claim
		lease(ctx, t, s.Store, live, live.JobID, time.Hour)
		dead := Claim(ctx, t, s.gate, &ClaimOpts{Key: "matrix-dead-0001"}).Claim
		lease(ctx, t, s.Store, dead, dead.JobID, -time.Hour)
		ids := map[string]int64{
			"queued":            queued.ID,
			"running":           live.ID,
			"running_expired":   dead.ID,
			"succeeded":         finish("matrix-done-0001", nil, nil).ID,
			"succeeded_expired": finish("matrix-done-0002", nil, past).ID,
			"failed":            finish("matrix-fail-0001", declined, nil).ID,
			"failed_expired":    finish("matrix-fail-0002", declined, past).ID,
			"cancelled":         finish("matrix-cncl-0001", cancelled, nil).ID,
			"failed_unknown":    finish("matrix-unkn-0001", unknown, nil).ID,
		}
		writes := map[core.Event]func(tx core.Tx, c *core.Claim) error{
			core.EventLease: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
				return err
			},
			core.EventComplete: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{}`)})
				return err
			},
			core.EventFail: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: *declined})
				return err
			},
			core.EventRelease: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: c.ID, Epoch: c.Epoch, LastError: *declined})
				return err
			},
			core.EventReclaim: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimReclaim(ctx, &core.ClaimReclaimParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID})
				return err
			},
			core.EventAbandon: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimAbandon(ctx, &core.ClaimAbandonParams{ID: c.ID, Epoch: c.Epoch, JobID: c.JobID, Error: *declined})
				return err
			},
			core.EventRedrive: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID})
				return err
			},
			core.EventSettle: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimSettle(ctx, &core.ClaimSettleParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{}`)})
				return err
			},
			core.EventSettleFailed: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimSettle(ctx, &core.ClaimSettleParams{ID: c.ID, Epoch: c.Epoch, Error: declined})
				return err
			},
			core.EventTakeOver: func(tx core.Tx, c *core.Claim) error {
				_, err := tx.ClaimTakeOver(ctx, &core.ClaimTakeOverParams{ID: c.ID, OperationID: "00000000-0000-4000-8000-0000000000bb",
					UserID: "u", Args: json.RawMessage(`{}`), ArgsHash: "other", TTL: time.Hour, Retention: time.Hour})
				return err
			},
		}
		for state, id := range ids {
			for event, write := range writes {
				c, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: id})
				require.NoError(t, err)
				tableErr := core.TransitionOf(event).Check(c, core.Facts{})
				tx, err := s.Store.Begin(ctx)
				require.NoError(t, err)
				storeErr := write(tx, c)
				require.NoError(t, tx.Rollback(ctx))
				if tableErr == nil {
					require.NoError(t, storeErr, "%s on %s: the table allows it, the engine refused", event, state)
				} else {
					require.Error(t, storeErr, "%s on %s: the table refuses it (%v), the engine wrote", event, state, tableErr)
				}
			}
		}
	},
}
