package coretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// guardedGate is a gate of the suite's store whose refund_order holds
// re-minted keys as possible duplicates for window.
func guardedGate(t *testing.T, s *suite, window time.Duration) *core.Gate {
	t.Helper()
	policies := Policies()
	for i := range policies {
		if policies[i].Tool == "refund_order" {
			policies[i].DuplicateWindow = window
		}
	}
	g, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Waiter: s.Waiter, Policies: policies,
		Secret: Secret, DBTimeout: 30 * time.Second})
	require.NoError(t, err)
	return g
}

// refund is refund_order's arguments, confirming confirm when set.
func refund(order string, cents int, confirm string) map[string]any {
	args := map[string]any{"order_id": order, "amount_cents": json.Number(fmt.Sprint(cents)), "reason": "agent retry"}
	if confirm != "" {
		args[core.ConfirmField] = confirm
	}
	return args
}

var duplicateTests = map[string]func(t *testing.T, s *suite){
	// An agent that re-mints its key: the same arguments under a new key
	// within the window are not claimed and name the first operation; a
	// confirmation bound to that operation runs once, and its retry
	// replays it; other arguments, other tenants and the same key are not
	// held.
	"ReMintedKeyIsHeldUntilConfirmed": func(t *testing.T, s *suite) {
		ctx := context.Background()
		g := guardedGate(t, s, 10*time.Minute)
		first := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0001", Args: refund("ord_9f2", 1500, "")})
		require.Equal(t, vocab.OutcomeAccepted, first.Outcome)
		claims := s.ClaimCount(ctx)

		dup := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0002", Args: refund("ord_9f2", 1500, "")})
		require.Equal(t, vocab.OutcomeDuplicate, dup.Outcome)
		require.Equal(t, vocab.CodePossibleDuplicate, dup.Duplicate.Code)
		require.Equal(t, first.Claim.OperationID, dup.Claim.OperationID, "names the first operation")
		require.Equal(t, "remint-key-0001", dup.Claim.IdempotencyKey)
		require.Contains(t, dup.Duplicate.Message, first.Claim.OperationID)
		require.Contains(t, dup.Duplicate.Message, `"remint-key-0001"`)
		require.Equal(t, claims, s.ClaimCount(ctx), "nothing claimed")
		events := audit(ctx, t, s.Store, "acme", "refund_order", "remint-key-0002")
		require.Equal(t, []vocab.Decision{vocab.DecisionDenied}, decisions(events))
		require.Contains(t, events[0].Reason, "possible_duplicate: same arguments as operation "+first.Claim.OperationID)

		// A volatile field (the reason) does not make it another intent.
		volatile := refund("ord_9f2", 1500, "")
		volatile["reason"] = "the customer asked again"
		require.Equal(t, vocab.OutcomeDuplicate, Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0003", Args: volatile}).Outcome)

		// The same key is the same intent: its handle, not a refusal.
		require.Equal(t, vocab.OutcomeInFlight, Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0001", Args: refund("ord_9f2", 1500, "")}).Outcome)
		// Other arguments, another tenant: normal claims.
		require.Equal(t, vocab.OutcomeAccepted, Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0004", Args: refund("ord_9f2", 1600, "")}).Outcome)
		require.Equal(t, vocab.OutcomeAccepted, Claim(ctx, t, g, &ClaimOpts{Tenant: "globex", Key: "remint-key-0005", Args: refund("ord_9f2", 1500, "")}).Outcome)

		// A confirmation of another operation does not pass.
		wrong := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0006", Args: refund("ord_9f2", 1500, uuid.NewString())})
		require.Equal(t, vocab.OutcomeDuplicate, wrong.Outcome)
		require.Contains(t, audit(ctx, t, s.Store, "acme", "refund_order", "remint-key-0006")[0].Reason, "the call confirmed operation")

		// Confirmed: a new intent, claimed once, audited as confirmed.
		confirmed := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0007", Args: refund("ord_9f2", 1500, first.Claim.OperationID)})
		require.Equal(t, vocab.OutcomeAccepted, confirmed.Outcome)
		require.NotEqual(t, first.Claim.OperationID, confirmed.Claim.OperationID)
		events = audit(ctx, t, s.Store, "acme", "refund_order", "remint-key-0007")
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted}, decisions(events))
		require.Contains(t, events[0].Reason, "confirmed as a new intent beside operation "+first.Claim.OperationID)
		// The confirmation is not part of the fingerprint: its retry, with
		// or without it, is that operation.
		for _, c := range []string{first.Claim.OperationID, ""} {
			again := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0007", Args: refund("ord_9f2", 1500, c)})
			require.Equal(t, vocab.OutcomeInFlight, again.Outcome)
			require.Equal(t, confirmed.Claim.OperationID, again.Claim.OperationID)
		}
		// A third key is held again, now naming the confirmed operation;
		// confirming the first one no longer passes.
		third := Claim(ctx, t, g, &ClaimOpts{Key: "remint-key-0008", Args: refund("ord_9f2", 1500, first.Claim.OperationID)})
		require.Equal(t, vocab.OutcomeDuplicate, third.Outcome)
		require.Equal(t, confirmed.Claim.OperationID, third.Claim.OperationID)
		require.Equal(t, claims+3, s.ClaimCount(ctx), "the other arguments, the other tenant and the confirmed one")
	},

	// Past the window, a finished intent no longer holds a new key; one
	// that still waits or runs does. A window of a nanosecond is over by
	// the next transaction.
	"DuplicateWindowEndsButLiveIntentsHold": func(t *testing.T, s *suite) {
		ctx := context.Background()
		g := guardedGate(t, s, time.Nanosecond)
		first := Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0001", Args: refund("ord_w", 700, "")})
		held := Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0002", Args: refund("ord_w", 700, "")})
		require.Equal(t, vocab.OutcomeDuplicate, held.Outcome, "queued: still live")
		leased := lease(ctx, t, s.Store, first.Claim, first.Claim.JobID, time.Minute)
		require.Equal(t, vocab.OutcomeDuplicate, Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0002", Args: refund("ord_w", 700, "")}).Outcome,
			"running: still live")
		_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_w"}`)})
		require.NoError(t, err)
		after := Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0002", Args: refund("ord_w", 700, "")})
		require.Equal(t, vocab.OutcomeAccepted, after.Outcome, "finished and past the window")

		waiting := Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0003", Args: refund("ord_x", 900, ""), ApprovalWindow: time.Hour})
		require.Equal(t, vocab.StatusAwaitingApproval, waiting.Claim.Status)
		again := Claim(ctx, t, g, &ClaimOpts{Key: "window-key-0004", Args: refund("ord_x", 900, ""), ApprovalWindow: time.Hour})
		require.Equal(t, vocab.OutcomeDuplicate, again.Outcome, "awaiting approval: still live")
		require.Equal(t, waiting.Claim.OperationID, again.Claim.OperationID)

		// The pruner deletes guards past their window whose operation
		// ended, and keeps the waiting one's.
		leased = lease(ctx, t, s.Store, after.Claim, after.Claim.JobID, time.Minute)
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_w2"}`)})
		require.NoError(t, err)
		_, err = s.Store.TombstoneDeleteExpired(ctx, &core.TombstoneDeleteExpiredParams{Limit: 100})
		require.NoError(t, err)
		_, err = s.Store.FingerprintGuardGet(ctx, &core.FingerprintGuardGetParams{TenantID: "acme", Tool: "refund_order", ArgsHash: after.Claim.ArgsHash})
		require.ErrorIs(t, err, vocab.ErrNotFound)
		kept, err := s.Store.FingerprintGuardGet(ctx, &core.FingerprintGuardGetParams{TenantID: "acme", Tool: "refund_order", ArgsHash: waiting.Claim.ArgsHash})
		require.NoError(t, err)
		require.Equal(t, waiting.Claim.OperationID, kept.OperationID)
	},

	// The group's statement guards too: of two rows with one fingerprint
	// under two keys, the first is written; a row whose key is taken
	// leaves a guard naming its unwritten operation, which the gate
	// deletes in the same transaction (FingerprintGuardDelete).
	"ClaimInsertManyGuardsFingerprints": func(t *testing.T, s *suite) {
		ctx := context.Background()
		taken := Claim(ctx, t, s.gate, &ClaimOpts{Key: "guard-many-taken", Args: refund("ord_t", 10, "")}).Claim
		row := func(key, hash string) *core.ClaimInsertParams {
			return &core.ClaimInsertParams{OperationID: uuid.NewString(), TenantID: "acme", Tool: "refund_order",
				IdempotencyKey: key, UserID: "u1", Args: json.RawMessage(`{"amount_cents":1}`), ArgsHash: hash,
				TTL: time.Hour, Retention: 2 * time.Hour, DuplicateWindow: time.Hour,
				Audit: &core.AuditInsertParams{TenantID: "acme", UserID: "u1", Tool: "refund_order", IdempotencyKey: key,
					Decision: vocab.DecisionAccepted, ArgsHash: hash}}
		}
		rows := []*core.ClaimInsertParams{
			row("guard-many-0001", "fp-x"),
			row("guard-many-0002", "fp-x"), // the same arguments under another key
			row("guard-many-taken", "fp-y"),
			row("guard-many-0003", "fp-z"),
		}
		tx, err := s.Store.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		claims, err := tx.ClaimInsertMany(ctx, rows)
		require.NoError(t, err)
		require.NotNil(t, claims[0])
		require.Nil(t, claims[1], "held: the first row of the fingerprint was written")
		require.Nil(t, claims[2], "the key is taken")
		require.NotNil(t, claims[3])
		require.NoError(t, tx.FingerprintGuardDelete(ctx, []string{rows[1].OperationID, rows[2].OperationID}))
		require.NoError(t, tx.Commit(ctx))
		for hash, want := range map[string]string{"fp-x": rows[0].OperationID, "fp-z": rows[3].OperationID} {
			g, err := s.Store.FingerprintGuardGet(ctx, &core.FingerprintGuardGetParams{TenantID: "acme", Tool: "refund_order", ArgsHash: hash})
			require.NoError(t, err, hash)
			require.Equal(t, want, g.OperationID, hash)
		}
		g, err := s.Store.FingerprintGuardGet(ctx, &core.FingerprintGuardGetParams{TenantID: "acme", Tool: "refund_order", ArgsHash: "fp-y"})
		if err == nil {
			require.NotEqual(t, rows[2].OperationID, g.OperationID, "no guard names an operation that never was")
		} else {
			require.ErrorIs(t, err, vocab.ErrNotFound)
		}
		require.NotEqual(t, taken.OperationID, rows[2].OperationID)
	},

	// Race-safe: many re-minted keys at once, one claim.
	"ConcurrentReMintedKeysClaimOnce": func(t *testing.T, s *suite) {
		ctx := context.Background()
		g := guardedGate(t, s, 10*time.Minute)
		const calls = 12
		results := make([]*core.ClaimResult, calls)
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				results[i], errs[i] = claim(ctx, g, &ClaimOpts{Key: fmt.Sprintf("race-remint-%03d", i), Args: refund("ord_race", 4200, "")})
			})
		}
		wg.Wait()
		var accepted *core.Claim
		held := 0
		for i, r := range results {
			require.NoError(t, errs[i])
			switch r.Outcome {
			case vocab.OutcomeAccepted:
				require.Nil(t, accepted, "a second claim of the same arguments")
				accepted = r.Claim
			case vocab.OutcomeDuplicate:
				held++
			default:
				t.Fatalf("call %d: %s", i, r.Outcome)
			}
		}
		require.NotNil(t, accepted)
		require.Equal(t, calls-1, held)
		for i, r := range results {
			if r.Outcome == vocab.OutcomeDuplicate {
				require.Equal(t, accepted.OperationID, r.Claim.OperationID, "call %d names the one claim", i)
			}
		}
		// Concurrent confirmations of the one claim: one more, not more.
		confirms := make([]*core.ClaimResult, 6)
		for i := range confirms {
			wg.Go(func() {
				var err error
				confirms[i], err = claim(ctx, g, &ClaimOpts{Key: fmt.Sprintf("race-confirm-%03d", i), Args: refund("ord_race", 4200, accepted.OperationID)})
				if err != nil {
					errs[i] = errors.Join(errs[i], err)
				}
			})
		}
		wg.Wait()
		n := 0
		for i, r := range confirms {
			require.NoError(t, errs[i])
			if r.Outcome == vocab.OutcomeAccepted {
				n++
			}
		}
		require.Equal(t, 1, n, "one confirmed claim")
	},
}
