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

// historyTests check a key's history: every fingerprint that ran under a
// (tenant, tool, key) stays refused within its retention, however many
// take-overs came between, and archiving loses none.
var historyTests = map[string]func(t *testing.T, s *suite){
	"KeyChangingHandsTwiceRefusesEveryEarlierIntent": func(t *testing.T, s *suite) {
		for _, prune := range []bool{false, true} {
			t.Run(fmt.Sprintf("Prune=%v", prune), func(t *testing.T) {
				ctx := context.Background()
				key := fmt.Sprintf("hands-twice-%v", prune)
				argsA := map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("100")}
				argsB := map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("200")}
				argsC := map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("300")}
				// run claims args under key, completes it and ends its replay
				// window; with prune, the pruner archives it.
				run := func(args map[string]any) *core.Claim {
					t.Helper()
					res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key, Args: args})
					require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
					l := lease(ctx, t, s.Store, res.Claim, res.Claim.JobID, time.Minute)
					_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: l.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`),
						Now: ptr(time.Now().Add(-2 * moneyTTL))})
					require.NoError(t, err)
					if prune {
						_, err := s.gate.Prune(ctx, 10)
						require.NoError(t, err)
					}
					return res.Claim
				}
				expired := func(args map[string]any, want *core.Claim) {
					t.Helper()
					jobs := s.JobCount(ctx)
					res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key, Args: args})
					require.Equal(t, vocab.OutcomeExpired, res.Outcome, "amount %v", args["amount_cents"])
					require.Equal(t, want.OperationID, res.Claim.OperationID, "names the operation that ran these arguments")
					require.Contains(t, res.Expired.Message, want.OperationID)
					require.Equal(t, jobs, s.JobCount(ctx), "nothing enqueued")
				}
				a := run(argsA)
				b := run(argsB) // takes the key over from A (or, pruned, claims it anew)
				expired(argsA, a)
				expired(argsB, b)
				c := run(argsC)
				expired(argsA, a)
				expired(argsB, b)
				expired(argsC, c)
				// While a live claim holds the key, an earlier fingerprint is
				// still named, not a conflict with the live one.
				res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key, Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("400")}})
				require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
				expired(argsA, a)
				res = Claim(ctx, t, s.gate, &ClaimOpts{Key: key, Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("500")}})
				require.Equal(t, vocab.OutcomeConflict, res.Outcome, "a fingerprint that never ran conflicts with the live claim")
			})
		}
	},

	"ArchiveWhileClaimsExpireKeepsEveryOne": func(t *testing.T, s *suite) {
		// Claims whose replay windows end one after the other over two
		// seconds, by the database's clock, archived all along in small
		// batches: each claim ends either still a claim or a history row,
		// never neither. (SQLite once read the clock twice, in two
		// statements, and lost the claims whose windows ended in between.)
		ctx := context.Background()
		const n = 1500
		const spread = 2 * time.Second
		hashes := map[string]string{}
		leased := make([]*core.Claim, n)
		for i := range n {
			key := fmt.Sprintf("archive-race-%05d", i)
			res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key})
			leased[i] = lease(ctx, t, s.Store, res.Claim, res.Claim.JobID, time.Minute)
			hashes[key] = res.Claim.ArgsHash
		}
		archived := 0
		done := make(chan struct{})
		archiverErr := make(chan error, 1)
		archive := func() (int, error) {
			tx, err := s.Store.Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			k, err := tx.ClaimArchiveExpired(ctx, &core.ClaimArchiveExpiredParams{Limit: 37})
			if err != nil {
				return 0, err
			}
			return k, tx.Commit(ctx)
		}
		go func() {
			defer close(archiverErr)
			for {
				select {
				case <-done:
					return
				default:
				}
				k, err := archive()
				if err != nil {
					archiverErr <- err
					return
				}
				archived += k
			}
		}()
		// The windows end from half a second from now on, whatever the
		// completions' own pace.
		start := time.Now().Add(time.Second/2 - moneyTTL)
		for i, l := range leased {
			at := start.Add(time.Duration(i) * spread / n)
			_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: l.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`), Now: &at})
			require.NoError(t, err)
		}
		// The archiver runs until every window has ended by the database's
		// clock and every claim is gone (archived, or lost: the count of
		// history rows below tells); then it stops, and what is left is
		// archived. A bounded poll, not a wait for the clock: a claim
		// never archived fails here.
		deadline := time.Now().Add(spread + 2*time.Minute)
		for s.ClaimCount(ctx) > 0 {
			if time.Now().After(deadline) {
				close(done)
				require.Failf(t, "claims were never archived", "%d of %d claims are left, their windows long ended", s.ClaimCount(ctx), n)
			}
			select {
			case err := <-archiverErr:
				require.NoError(t, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		close(done)
		require.NoError(t, <-archiverErr)
		for {
			k, err := archive()
			require.NoError(t, err)
			if k == 0 {
				break
			}
			archived += k
		}
		require.Equal(t, n, archived)
		kept := 0
		for key, hash := range hashes {
			_, err := s.Store.TombstoneGetByKey(ctx, &core.TombstoneGetByKeyParams{TenantID: "acme", Tool: "refund_order",
				IdempotencyKey: key, ArgsHash: hash})
			if err == nil {
				kept++
			}
		}
		require.Equal(t, n, kept+s.ClaimCount(ctx), "claims + history rows = claims created")
		require.Equal(t, n, kept)
		archivedRows := 0
		for key := range hashes {
			for _, ev := range audit(ctx, t, s.Store, "acme", "refund_order", key) {
				if ev.Decision == vocab.DecisionArchived {
					archivedRows++
				}
			}
		}
		require.Equal(t, n, archivedRows, "one archived audit row per claim archived")
	},
}
