package coretest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// groupTests check the group commit of new claims: the store's
// ClaimInsertMany and the gate's groups of concurrent calls.
var groupTests = map[string]func(t *testing.T, s *suite){
	"ClaimInsertManyWritesOnlyFreeKeys": func(t *testing.T, s *suite) {
		ctx := context.Background()
		taken := Claim(ctx, t, s.gate, &ClaimOpts{Key: "many-taken-0001"}).Claim
		row := func(key string, amount int) *core.ClaimInsertParams {
			return &core.ClaimInsertParams{OperationID: uuid.NewString(), TenantID: "acme", Tool: "refund_order",
				IdempotencyKey: key, UserID: "u1", Args: json.RawMessage(fmt.Sprintf(`{"amount_cents":%d}`, amount)),
				ArgsHash: fmt.Sprintf("hash-%d", amount), TTL: time.Hour, Retention: 2 * time.Hour, JobID: int64(1000 + amount),
				Audit: &core.AuditInsertParams{TenantID: "acme", UserID: "u1", Tool: "refund_order", IdempotencyKey: key,
					Decision: vocab.DecisionAccepted, ArgsHash: fmt.Sprintf("hash-%d", amount)}}
		}
		rows := []*core.ClaimInsertParams{
			row("many-new-0001", 1),
			row("many-taken-0001", 2), // a claim has the key
			row("many-new-0002", 3),
			row("many-new-0001", 4), // an earlier row took it
		}
		tx, err := s.Store.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		claims, err := tx.ClaimInsertMany(ctx, rows)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		require.Len(t, claims, 4)
		require.Nil(t, claims[1])
		require.Nil(t, claims[3])
		for _, i := range []int{0, 2} {
			c := claims[i]
			require.NotNil(t, c, "row %d", i)
			require.NotZero(t, c.ID)
			require.Equal(t, rows[i].OperationID, c.OperationID)
			require.Equal(t, rows[i].IdempotencyKey, c.IdempotencyKey)
			require.Equal(t, rows[i].ArgsHash, c.ArgsHash)
			require.Equal(t, rows[i].JobID, c.JobID)
			require.Equal(t, vocab.StatusQueued, c.Status)
			require.Equal(t, time.Hour, c.TTL)
			require.JSONEq(t, string(rows[i].Args), string(c.Args))
			got, err := s.Store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: rows[i].IdempotencyKey})
			require.NoError(t, err)
			require.Equal(t, c.OperationID, got.OperationID)
		}
		still, err := s.Store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "many-taken-0001"})
		require.NoError(t, err)
		require.Equal(t, taken.OperationID, still.OperationID, "the taken key keeps its claim")

		// Audit rows only for the claims written, each naming its operation.
		first := audit(ctx, t, s.Store, "acme", "refund_order", "many-new-0001")
		require.Len(t, first, 1)
		require.Equal(t, rows[0].OperationID, first[0].OperationID)
		require.Equal(t, rows[0].JobID, first[0].JobID)
		require.Len(t, audit(ctx, t, s.Store, "acme", "refund_order", "many-new-0002"), 1)
		require.Len(t, audit(ctx, t, s.Store, "acme", "refund_order", "many-taken-0001"), 1, "only the first call's row")
	},

	"GroupCommitGivesEachCallItsOutcome": func(t *testing.T, s *suite) {
		ctx := context.Background()
		// Two gates, as two api processes: one groups its new claims, the
		// other claims one call per transaction.
		single, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: Policies(), Secret: Secret,
			MaxClaimBatch: 1, DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		prior := Claim(ctx, t, s.gate, &ClaimOpts{Key: "group-prior-0001"}).Claim
		const fresh, contested, retries = 24, 16, 8
		type call struct {
			gate *core.Gate
			opts *ClaimOpts
		}
		var calls []call
		for i := range fresh {
			calls = append(calls, call{s.gate, &ClaimOpts{Key: fmt.Sprintf("group-fresh-%04d", i)}})
		}
		for i := range contested { // one key, each call with other arguments
			g := s.gate
			if i%4 == 0 {
				g = single
			}
			calls = append(calls, call{g, &ClaimOpts{Key: "group-contested-0001",
				Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number(fmt.Sprint(100 + i))}}})
		}
		for range retries {
			calls = append(calls, call{s.gate, &ClaimOpts{Key: "group-prior-0001"}})
		}
		results := make([]*core.ClaimResult, len(calls))
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = claim(ctx, c.gate, c.opts)
			}()
		}
		close(start)
		wg.Wait()

		contestedAccepted := 0
		for i, c := range calls {
			require.NoError(t, errs[i], "call %d", i)
			res := results[i]
			switch {
			case i < fresh:
				require.Equal(t, vocab.OutcomeAccepted, res.Outcome, "fresh key %s", c.opts.Key)
				require.Equal(t, c.opts.Key, res.Claim.IdempotencyKey)
				require.NotZero(t, res.Claim.JobID)
				require.Equal(t, 1, decisionsOf(ctx, t, s.Store, c.opts.Key)[vocab.DecisionAccepted])
			case i < fresh+contested:
				switch res.Outcome {
				case vocab.OutcomeAccepted:
					contestedAccepted++
				case vocab.OutcomeConflict:
					require.Equal(t, vocab.CodeKeyReuseDifferentArgs, res.Conflict.Code)
					require.Equal(t, []string{"amount_cents"}, res.Conflict.Fields)
				default:
					t.Fatalf("contested call %d: outcome %s", i, res.Outcome)
				}
			default:
				require.Equal(t, vocab.OutcomeInFlight, res.Outcome)
				require.Equal(t, prior.OperationID, res.Claim.OperationID)
			}
		}
		require.Equal(t, 1, contestedAccepted, "one call of the contested key is accepted")
		require.Equal(t, fresh+2, s.ClaimCount(ctx))
		require.Equal(t, fresh+2, s.JobCount(ctx), "every claim has its job, and no job is left without a claim")
		require.Len(t, audit(ctx, t, s.Store, "acme", "refund_order", "group-contested-0001"), contested)
		require.Len(t, audit(ctx, t, s.Store, "acme", "refund_order", "group-prior-0001"), 1+retries)
	},

	"WorkTxCommitsWhatItKeptAndNothingItUndid": func(t *testing.T, s *suite) {
		ctx := context.Background()
		hooks := core.JobHooks{Complete: func(context.Context, core.Tx) error { return nil }}
		claims := map[string]*core.Claim{}
		for _, k := range []string{"a", "b", "c", "d"} {
			claims[k] = Claim(ctx, t, s.gate, &ClaimOpts{Key: "worktx-" + k}).Claim
		}
		params := func(c *core.Claim) *core.LeaseParams {
			return &core.LeaseParams{Claim: &core.Claim{TenantID: c.TenantID, OperationID: c.OperationID}, JobID: c.JobID, Lease: time.Minute}
		}
		w := s.gate.BeginWork()
		defer func() { _ = w.Rollback(ctx) }()
		run := func(k string) {
			require.NoError(t, w.Mark(ctx), k)
			locked, err := w.Lock(ctx, params(claims[k]))
			require.NoError(t, err, k)
			err = w.Apply(ctx, locked, json.RawMessage(`{"op":"`+k+`"}`), hooks)
			require.NoError(t, err, k)
		}
		// a, the first operation, is undone: no savepoint, the transaction
		// rolls back and b begins another.
		run("a")
		require.NoError(t, w.Undo(ctx))
		run("b")
		w.Keep()
		// c is undone at its savepoint after its writes and a failed
		// statement (which aborts a Postgres transaction but for the
		// savepoint); d goes on in the same transaction.
		run("c")
		type execer interface {
			Exec(ctx context.Context, query string, args ...any) (int64, error)
		}
		_, err := w.Tx().(execer).Exec(ctx, `SELECT no_such_column FROM idempotency_claims`)
		require.Error(t, err)
		require.NoError(t, w.Undo(ctx))
		run("d")
		w.Keep()
		// A claim that is not to be had answers as ClaimLock does.
		require.NoError(t, w.Mark(ctx))
		_, err = w.Lock(ctx, &core.LeaseParams{Claim: claims["b"], JobID: claims["b"].JobID + 1000, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		require.NoError(t, w.Undo(ctx))
		require.Equal(t, 2, w.Kept())
		require.NoError(t, w.Commit(ctx))

		for k, want := range map[string]vocab.Status{"a": vocab.StatusQueued, "b": vocab.StatusSucceeded, "c": vocab.StatusQueued, "d": vocab.StatusSucceeded} {
			c := claims[k]
			got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
			require.NoError(t, err)
			require.Equal(t, want, got.Status, k)
			d := decisionsOf(ctx, t, s.Store, c.IdempotencyKey)
			if want == vocab.StatusSucceeded {
				require.Equal(t, c.Epoch+1, got.Epoch, k)
				require.JSONEq(t, `{"op":"`+k+`"}`, string(got.Result), k)
				require.Equal(t, 1, d[vocab.DecisionSucceeded], k)
			} else {
				require.Equal(t, c.Epoch, got.Epoch, "%s: nothing of an undone operation stays", k)
				require.Zero(t, got.Attempts, k)
				require.Zero(t, d[vocab.DecisionSucceeded], k)
			}
		}
		// An undone operation's claim is to be had again.
		again := s.gate.BeginWork()
		defer func() { _ = again.Rollback(ctx) }()
		require.NoError(t, again.Mark(ctx))
		_, err = again.Lock(ctx, params(claims["c"]))
		require.NoError(t, err)
	},

	// A completion whose fence is lost in the transaction (impossible
	// under the claim's lock but for a write to the claim in the same
	// transaction, made here) keeps nothing: on Postgres, where the
	// completion travels with the next lock or with COMMIT, the whole
	// group fails; elsewhere the operation's Apply does.
	"WorkTxKeepsNothingWhenAFenceIsLostInTheTransaction": func(t *testing.T, s *suite) {
		ctx := context.Background()
		hooks := core.JobHooks{Complete: func(context.Context, core.Tx) error { return nil }}
		type execer interface {
			Exec(ctx context.Context, query string, args ...any) (int64, error)
		}
		for _, next := range []string{"commit", "lock"} {
			a := Claim(ctx, t, s.gate, &ClaimOpts{Key: "fence-a-" + next}).Claim
			b := Claim(ctx, t, s.gate, &ClaimOpts{Key: "fence-b-" + next}).Claim
			params := func(c *core.Claim) *core.LeaseParams {
				return &core.LeaseParams{Claim: &core.Claim{TenantID: c.TenantID, OperationID: c.OperationID}, JobID: c.JobID, Lease: time.Minute}
			}
			w := s.gate.BeginWork()
			require.NoError(t, w.Mark(ctx))
			locked, err := w.Lock(ctx, params(a))
			require.NoError(t, err)
			_, err = w.Tx().(execer).Exec(ctx, fmt.Sprintf(`UPDATE idempotency_claims SET epoch = epoch + 100 WHERE id = %d`, a.ID))
			require.NoError(t, err)
			applyErr := w.Apply(ctx, locked, json.RawMessage(`{"op":"a"}`), hooks)
			if applyErr != nil {
				require.ErrorIs(t, applyErr, vocab.ErrLeaseLost, next)
				require.NoError(t, w.Undo(ctx))
			} else {
				w.Keep()
				if next == "lock" {
					require.NoError(t, w.Mark(ctx))
					_, err = w.Lock(ctx, params(b))
					require.ErrorIs(t, err, core.ErrTxBroken, next)
					require.ErrorIs(t, w.Undo(ctx), core.ErrTxBroken, next)
				}
			}
			err = w.Commit(ctx)
			if applyErr == nil {
				require.ErrorIs(t, err, core.ErrTxBroken, next)
			}
			require.NoError(t, w.Rollback(ctx))
			for _, c := range []*core.Claim{a, b} {
				got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
				require.NoError(t, err)
				require.Equal(t, vocab.StatusQueued, got.Status, next)
				require.Equal(t, c.Epoch, got.Epoch, "%s: the transaction kept nothing", next)
				require.Zero(t, decisionsOf(ctx, t, s.Store, c.IdempotencyKey)[vocab.DecisionSucceeded], next)
			}
		}
	},
}

// decisionsOf counts the audit rows of key by decision.
func decisionsOf(ctx context.Context, t *testing.T, s core.Store, key string) map[vocab.Decision]int {
	t.Helper()
	n := map[vocab.Decision]int{}
	for _, e := range audit(ctx, t, s, "acme", "refund_order", key) {
		n[e.Decision]++
	}
	return n
}
