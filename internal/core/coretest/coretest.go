// Package gatetest is the conformance suite that every core.Store must pass.
// engine/pgengine and engine/sqliteengine call Exercise from their tests.
package coretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Bundle is what a store's test gives the suite: a fresh, migrated store of
// its own, and the enqueuer its claims' jobs go through.
type Bundle struct {
	Store    core.Store
	Enqueuer core.Enqueuer
	// Waiter is optional; nil exercises the polling path.
	Waiter core.Waiter
	// Control cancels and retries the enqueuer's jobs (River's JobCancelTx
	// and JobRetryTx). Required.
	Control core.JobControl
	// MarkJobRunning makes River report a job running since `since` ago, as
	// if a worker had fetched it then. Required.
	MarkJobRunning func(ctx context.Context, jobID int64, since time.Duration)
	// SetClaimUpdatedAt sets a claim's updated_at, so that tests of the
	// order by update need not wait. Required.
	SetClaimUpdatedAt func(ctx context.Context, claimID int64, at time.Time)
	// JobState returns the state of a job ("" when it does not exist).
	JobState func(ctx context.Context, jobID int64) string
	// DeleteJob deletes a job as River UI's Delete does (River's
	// JobDelete). Required.
	DeleteJob func(ctx context.Context, jobID int64)
	// EndJob finalizes a job in state (cancelled, discarded or completed)
	// as its worker ending it would, without River's cancel request.
	// Required.
	EndJob func(ctx context.Context, jobID int64, state string)
	// JobCount returns how many jobs the enqueuer has inserted that are
	// visible (committed).
	JobCount func(ctx context.Context) int
	// ClaimCount returns how many idempotency_claims rows exist.
	ClaimCount func(ctx context.Context) int
}

// Exercise runs the suite. newBundle must return an isolated store each
// time it is called (a database or schema of its own).
func Exercise(t *testing.T, newBundle func(t *testing.T) *Bundle) {
	t.Helper()
	all := maps.Clone(tests)
	maps.Copy(all, stateTests)
	maps.Copy(all, traceTests)
	maps.Copy(all, groupTests)
	maps.Copy(all, historyTests)
	maps.Copy(all, intentTests)
	maps.Copy(all, approvalTests)
	maps.Copy(all, noticeTests)
	maps.Copy(all, pendingTests)
	maps.Copy(all, duplicateTests)
	for name, test := range all {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			g, err := core.New(&core.Config{
				Store:    b.Store,
				Enqueuer: b.Enqueuer,
				Waiter:   b.Waiter,
				Policies: Policies(),
				Secret:   Secret,
				// A bound, not a timing assertion: 64 concurrent calls queue
				// for SQLite's one connection, slowly under -race on a
				// loaded machine.
				DBTimeout: 30 * time.Second,
			})
			require.NoError(t, err)
			test(t, &suite{Bundle: b, gate: g, newBundle: newBundle})
		})
	}
}

type suite struct {
	*Bundle
	gate *core.Gate
	// newBundle makes another fresh store, for cases that compare two
	// databases.
	newBundle func(t *testing.T) *Bundle
}

// Secret is the deployment secret of the suite's gates: their claims'
// downstream keys derive from intent keys under it.
var Secret = []byte("gatetest: a deployment secret of 32 bytes or more")

// DownstreamKey is the downstream key that generation gen of c has under
// Secret: "idg_" + the intent key of c's tenant, tool, key and fingerprint
// + "_" + gen, for a first intent (incarnation 0).
func DownstreamKey(c *core.Claim, gen int) string {
	return core.DownstreamKey(core.NewIntentKeyer(Secret).Key(c.TenantID, c.Tool, c.IdempotencyKey, c.ArgsHash), c.OperationID, 0, gen)
}

// ClaimOpts are the options of Claim; nil fields take defaults.
type ClaimOpts struct {
	Tenant string
	Tool   string
	Key    string
	Args   map[string]any
	Wait   time.Duration
	// ApprovalWindow, when positive, claims an intent that awaits approval.
	ApprovalWindow time.Duration
}

// The TTLs of the suite's tools, as the built-in money and mail tools'.
const (
	moneyTTL = 24 * time.Hour
	mailTTL  = 2 * time.Hour
)

var keySeq atomic.Int64

// Claim claims an intent through g with defaults for every unset option:
// tenant "acme", tool refund_order, a fresh key, a refund of 500 cents.
func Claim(ctx context.Context, t testing.TB, g *core.Gate, opts *ClaimOpts) *core.ClaimResult {
	t.Helper()
	res, err := claim(ctx, g, opts)
	require.NoError(t, err)
	return res
}

func claim(ctx context.Context, g *core.Gate, opts *ClaimOpts) (*core.ClaimResult, error) {
	if opts == nil {
		opts = &ClaimOpts{}
	}
	o := *opts
	if o.Tenant == "" {
		o.Tenant = "acme"
	}
	if o.Tool == "" {
		o.Tool = "refund_order"
	}
	if o.Key == "" {
		o.Key = fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), keySeq.Add(1))
	}
	args := map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("500")}
	if o.Args != nil {
		args = map[string]any{}
		for k, v := range o.Args {
			args[k] = v
		}
	}
	args["idempotency_key"] = o.Key
	in, err := g.NewIntent(o.Tool, args)
	if err != nil {
		return nil, err
	}
	return g.Claim(ctx, &core.ClaimParams{
		Actor:          vocab.Actor{TenantID: o.Tenant, UserID: "support-bot", TokenID: "tok_test"},
		Intent:         in,
		Wait:           o.Wait,
		ApprovalWindow: o.ApprovalWindow,
	})
}

func ptr[T any](v T) *T { return &v }

// lease takes the lease of c's job with a lease that ends after d from now
// (d may be negative, for a lease that has already expired).
func lease(ctx context.Context, t *testing.T, s core.Store, c *core.Claim, jobID int64, d time.Duration) *core.Claim {
	t.Helper()
	leased, err := s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: jobID, Lease: time.Minute, Now: ptr(time.Now().Add(d - time.Minute))})
	require.NoError(t, err)
	return leased
}

func audit(ctx context.Context, t *testing.T, s core.Store, tenant, tool, key string) []*core.AuditEvent {
	t.Helper()
	events, err := s.AuditListByKey(ctx, &core.AuditListByKeyParams{TenantID: tenant, Tool: tool, IdempotencyKey: key})
	require.NoError(t, err)
	return events
}

func decisions(events []*core.AuditEvent) []vocab.Decision {
	out := make([]vocab.Decision, len(events))
	for i, e := range events {
		out[i] = e.Decision
	}
	return out
}

var tests = map[string]func(t *testing.T, s *suite){
	"AcceptedCreatesClaimAndJob": func(t *testing.T, s *suite) {
		ctx := context.Background()
		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: "order-9f2-refund-1"})
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
		require.False(t, res.Replayed)
		c := res.Claim
		require.Equal(t, vocab.StatusQueued, c.Status)
		require.NotZero(t, c.JobID)
		require.Equal(t, "acme", c.TenantID)
		require.Equal(t, "order-9f2-refund-1", c.IdempotencyKey)
		require.Equal(t, DownstreamKey(c, 0), c.DownstreamKey)
		require.NotContains(t, c.DownstreamKey, c.OperationID)
		require.NotContains(t, c.DownstreamKey, c.IdempotencyKey)
		require.Len(t, c.DownstreamKey, len("idg_")+core.IntentKeyLen+len("_0"))
		require.Equal(t, moneyTTL, c.TTL)
		require.Nil(t, c.ExpiresAt)
		require.JSONEq(t, `{"amount_cents":500,"order_id":"ord_9f2"}`, string(c.Args))
		require.Equal(t, 1, s.JobCount(ctx))
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted}, decisions(audit(ctx, t, s.Store, "acme", "refund_order", c.IdempotencyKey)))
	},

	"ConcurrentSameKeyOneAccepted": func(t *testing.T, s *suite) {
		ctx := context.Background()
		// Two gates, as two api processes: each folds its own identical
		// calls, and the unique index decides between them.
		other, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: Policies(), Secret: Secret})
		require.NoError(t, err)
		gates := []*core.Gate{s.gate, other}
		const n = 64
		var (
			wg      sync.WaitGroup
			results = make([]*core.ClaimResult, n)
			errs    = make([]error, n)
			start   = make(chan struct{})
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = claim(ctx, gates[i%2], &ClaimOpts{Key: "storm-key-0001"})
			}()
		}
		close(start)
		wg.Wait()
		accepted := 0
		for i := range n {
			require.NoError(t, errs[i])
			switch results[i].Outcome {
			case vocab.OutcomeAccepted:
				accepted++
			case vocab.OutcomeInFlight, vocab.OutcomeReplayed:
			default:
				t.Fatalf("call %d: unexpected outcome %s", i, results[i].Outcome)
			}
			require.Equal(t, results[0].Claim.OperationID, results[i].Claim.OperationID)
			require.Equal(t, results[0].Claim.JobID, results[i].Claim.JobID)
		}
		require.Equal(t, 1, accepted)
		require.Equal(t, 1, s.ClaimCount(ctx))
		require.Equal(t, 1, s.JobCount(ctx))
		require.Len(t, audit(ctx, t, s.Store, "acme", "refund_order", "storm-key-0001"), n)
	},

	"AuditInsertManyWritesEveryRow": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "audit-many-0001"}).Claim
		full := &core.AuditInsertParams{TenantID: "acme", UserID: "u1", TokenID: "tok_1", RequestID: "req_1",
			ClientRequestID: "client-1", Tool: "refund_order", IdempotencyKey: "audit-many-0001", OperationID: c.OperationID,
			JobID: c.JobID, Decision: vocab.DecisionReplayed, Reason: "r", ArgsHash: "h1", Args: json.RawMessage(`{"a":1}`),
			Result: json.RawMessage(`{"status":"queued"}`), Duration: 1500 * time.Microsecond,
			TraceID: "0af7651916cd43dd8448eb211c80319c"}
		bare := &core.AuditInsertParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "audit-many-0001",
			Decision: vocab.DecisionDenied, Reason: "nothing else"}
		require.NoError(t, s.Store.AuditInsertMany(ctx, []*core.AuditInsertParams{full, bare, full}))
		events := audit(ctx, t, s.Store, "acme", "refund_order", "audit-many-0001")
		require.Len(t, events, 4, "the call's accepted row and the three")
		for i, want := range []*core.AuditInsertParams{full, bare, full} {
			got := events[i+1]
			require.Equal(t, want.UserID, got.UserID)
			require.Equal(t, want.TokenID, got.TokenID)
			require.Equal(t, want.RequestID, got.RequestID)
			require.Equal(t, want.ClientRequestID, got.ClientRequestID)
			require.Equal(t, want.OperationID, got.OperationID)
			require.Equal(t, want.JobID, got.JobID)
			require.Equal(t, want.Decision, got.Decision)
			require.Equal(t, want.Reason, got.Reason)
			require.Equal(t, want.ArgsHash, got.ArgsHash)
			require.Equal(t, want.TraceID, got.TraceID)
			require.InDelta(t, float64(want.Duration), float64(got.Duration), float64(time.Microsecond))
			if want.Args == nil {
				require.Empty(t, got.Args)
				require.Empty(t, got.Result)
			} else {
				require.JSONEq(t, string(want.Args), string(got.Args))
				require.JSONEq(t, string(want.Result), string(got.Result))
			}
		}
	},

	"ConflictNamesDifferingFields": func(t *testing.T, s *suite) {
		ctx := context.Background()
		first := Claim(ctx, t, s.gate, &ClaimOpts{Key: "conflict-key-1"})
		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: "conflict-key-1", Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("700")}})
		require.Equal(t, vocab.OutcomeConflict, res.Outcome)
		require.NotNil(t, res.Conflict)
		require.Equal(t, vocab.CodeKeyReuseDifferentArgs, res.Conflict.Code)
		require.Equal(t, []string{"amount_cents"}, res.Conflict.Fields)
		require.Equal(t, first.Claim.OperationID, res.Claim.OperationID)

		// Nothing changed but one audit row.
		after, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: first.Claim.ID})
		require.NoError(t, err)
		require.Equal(t, first.Claim.UpdatedAt, after.UpdatedAt)
		require.JSONEq(t, string(first.Claim.Args), string(after.Args))
		require.Equal(t, 1, s.ClaimCount(ctx))
		require.Equal(t, 1, s.JobCount(ctx))
		events := audit(ctx, t, s.Store, "acme", "refund_order", "conflict-key-1")
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionConflict}, decisions(events))
		require.Contains(t, events[1].Reason, "amount_cents")

		// A volatile field (refund reason) is not a conflict.
		res = Claim(ctx, t, s.gate, &ClaimOpts{Key: "conflict-key-1", Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("500"), "reason": "customer asked twice"}})
		require.Equal(t, vocab.OutcomeInFlight, res.Outcome)
	},

	"KeysAreScopedByTenantAndTool": func(t *testing.T, s *suite) {
		ctx := context.Background()
		a := Claim(ctx, t, s.gate, &ClaimOpts{Tenant: "acme", Key: "shared-key-1"})
		b := Claim(ctx, t, s.gate, &ClaimOpts{Tenant: "globex", Key: "shared-key-1", Args: map[string]any{"order_id": "ord_other", "amount_cents": json.Number("1")}})
		c := Claim(ctx, t, s.gate, &ClaimOpts{Tenant: "acme", Tool: "reset_seat", Key: "shared-key-1", Args: map[string]any{"seat_id": "seat_1"}})
		for _, r := range []*core.ClaimResult{a, b, c} {
			require.Equal(t, vocab.OutcomeAccepted, r.Outcome)
		}
		require.NotEqual(t, a.Claim.OperationID, b.Claim.OperationID)
		require.NotEqual(t, a.Claim.OperationID, c.Claim.OperationID)
		require.NotEqual(t, a.Claim.DownstreamKey, b.Claim.DownstreamKey)
		require.NotEqual(t, a.Claim.DownstreamKey, c.Claim.DownstreamKey)
		require.Equal(t, 3, s.ClaimCount(ctx))
		_, err := s.Store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "initech", Tool: "refund_order", IdempotencyKey: "shared-key-1"})
		require.ErrorIs(t, err, vocab.ErrNotFound)
	},

	"ReplayReturnsStoredResultAndError": func(t *testing.T, s *suite) {
		ctx := context.Background()
		ok := Claim(ctx, t, s.gate, &ClaimOpts{Key: "replay-ok-key"})
		leased := lease(ctx, t, s.Store, ok.Claim, ok.Claim.JobID, time.Minute)
		done, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_1"}`)})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusSucceeded, done.Status)
		require.NotNil(t, done.ExpiresAt)
		require.WithinDuration(t, time.Now().Add(moneyTTL), *done.ExpiresAt, time.Minute)

		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: "replay-ok-key"})
		require.Equal(t, vocab.OutcomeReplayed, res.Outcome)
		require.True(t, res.Replayed)
		require.JSONEq(t, `{"refund_id":"re_1"}`, string(res.Claim.Result))
		require.Equal(t, ok.Claim.OperationID, res.Claim.OperationID)

		bad := Claim(ctx, t, s.gate, &ClaimOpts{Key: "replay-bad-key"})
		leased = lease(ctx, t, s.Store, bad.Claim, bad.Claim.JobID, time.Minute)
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: leased.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined, Message: "declined"}})
		require.NoError(t, err)
		res = Claim(ctx, t, s.gate, &ClaimOpts{Key: "replay-bad-key"})
		require.Equal(t, vocab.OutcomeReplayed, res.Outcome)
		require.Equal(t, &vocab.ErrorInfo{Code: vocab.CodeCardDeclined, Message: "declined"}, res.Claim.Error)
		require.Equal(t, 2, s.JobCount(ctx))
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionReplayed}, decisions(audit(ctx, t, s.Store, "acme", "refund_order", "replay-bad-key")))
	},

	"ExpiredTerminalClaimIsTakenOver": func(t *testing.T, s *suite) {
		ctx := context.Background()
		first := Claim(ctx, t, s.gate, &ClaimOpts{Key: "takeover-key-1"})
		leased := lease(ctx, t, s.Store, first.Claim, first.Claim.JobID, time.Minute)
		// Completed two TTLs ago: expired by the database's clock now.
		_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`), Now: ptr(time.Now().Add(-2 * moneyTTL))})
		require.NoError(t, err)

		// The same intent (same arguments) is refused, never run again.
		same := Claim(ctx, t, s.gate, &ClaimOpts{Key: "takeover-key-1"})
		require.Equal(t, vocab.OutcomeExpired, same.Outcome)
		require.Equal(t, vocab.CodeKeyExpired, same.Expired.Code)
		require.Contains(t, same.Expired.Message, first.Claim.OperationID)
		require.Equal(t, first.Claim.OperationID, same.Claim.OperationID)
		require.Equal(t, vocab.StatusSucceeded, same.Claim.Status)
		require.Equal(t, 1, s.JobCount(ctx), "nothing enqueued")

		// A new intent, with other arguments, takes the key over.
		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: "takeover-key-1", Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("900")}})
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
		require.NotEqual(t, first.Claim.OperationID, res.Claim.OperationID)
		require.Equal(t, first.Claim.ID, res.Claim.ID)
		require.Equal(t, vocab.StatusQueued, res.Claim.Status)
		require.Equal(t, 0, res.Claim.Generation)
		require.Equal(t, 0, res.Claim.Attempts)
		require.Nil(t, res.Claim.Result)
		require.Nil(t, res.Claim.ExpiresAt)
		require.NotEqual(t, first.Claim.JobID, res.Claim.JobID)
		require.GreaterOrEqual(t, res.Claim.Epoch, leased.Epoch, "epoch stays monotonic across intents")
		require.Equal(t, DownstreamKey(res.Claim, 0), res.Claim.DownstreamKey)
		require.NotEqual(t, first.Claim.DownstreamKey, res.Claim.DownstreamKey, "another fingerprint, another intent key")
		require.Equal(t, 2, s.JobCount(ctx))
		events := audit(ctx, t, s.Store, "acme", "refund_order", "takeover-key-1")
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionDenied, vocab.DecisionArchived,
			vocab.DecisionAccepted}, decisions(events))
		require.Contains(t, events[1].Reason, string(vocab.CodeKeyExpired))
		require.Equal(t, first.Claim.OperationID, events[2].OperationID, "the old intent goes into the key's history")
		require.Contains(t, events[2].Reason, res.Claim.OperationID)
		require.Contains(t, events[3].Reason, first.Claim.OperationID)
	},

	"QueuedOrRunningClaimNeverExpires": func(t *testing.T, s *suite) {
		ctx := context.Background()
		farFuture := ptr(time.Now().Add(10 * core.MaxTTL))
		queued := Claim(ctx, t, s.gate, &ClaimOpts{Key: "old-queued-key"})
		_, err := s.Store.ClaimTakeOver(ctx, &core.ClaimTakeOverParams{ID: queued.Claim.ID, OperationID: "00000000-0000-4000-8000-000000000001", Args: json.RawMessage(`{}`), ArgsHash: "x", TTL: time.Hour, Now: farFuture})
		require.ErrorIs(t, err, vocab.ErrStateChanged)

		running := Claim(ctx, t, s.gate, &ClaimOpts{Key: "old-running-key"})
		leased := lease(ctx, t, s.Store, running.Claim, running.Claim.JobID, -core.MaxTTL) // lease long expired
		_, err = s.Store.ClaimTakeOver(ctx, &core.ClaimTakeOverParams{ID: leased.ID, OperationID: "00000000-0000-4000-8000-000000000002", Args: json.RawMessage(`{}`), ArgsHash: "x", TTL: time.Hour, Now: farFuture})
		require.ErrorIs(t, err, vocab.ErrStateChanged)

		for _, key := range []string{"old-queued-key", "old-running-key"} {
			res := Claim(ctx, t, s.gate, &ClaimOpts{Key: key})
			require.Equal(t, vocab.OutcomeInFlight, res.Outcome)
			require.Equal(t, core.DefaultRetryAfter, res.RetryAfter)
			got, err := s.Store.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key, Now: farFuture})
			require.NoError(t, err)
			require.False(t, got.Expired)
		}
		require.Equal(t, 2, s.JobCount(ctx))
	},

	"LeaseRules": func(t *testing.T, s *suite) {
		ctx := context.Background()
		res := Claim(ctx, t, s.gate, &ClaimOpts{})
		c := res.Claim

		// Another job may not lease the claim.
		got, err := s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID + 1000, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		require.Equal(t, vocab.StatusQueued, got.Status)

		leased, err := s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusRunning, leased.Status)
		require.Equal(t, c.Epoch+1, leased.Epoch)
		require.Equal(t, 1, leased.Attempts)
		require.True(t, leased.LeaseLive)
		require.NotNil(t, leased.FirstCalledAt)

		// A live lease is not taken twice.
		got, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		require.True(t, got.LeaseLive)
		require.Equal(t, leased.Epoch, got.Epoch)

		// Once it expired (by the clock given), it is.
		again, err := s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute, Now: ptr(time.Now().Add(2 * time.Minute))})
		require.NoError(t, err)
		require.Equal(t, leased.Epoch+1, again.Epoch)
		require.Equal(t, 2, again.Attempts)
		require.Equal(t, *leased.FirstCalledAt, *again.FirstCalledAt)

		// A succeeded claim cannot be leased.
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: again.Epoch, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		got, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		require.Equal(t, vocab.StatusSucceeded, got.Status)

		_, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: "00000000-0000-4000-8000-00000000ffff", JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrNotFound)
	},

	"ReleaseKeepsEpochAndRecordsLastError": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{}).Claim
		leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		released, err := s.Store.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: c.ID, Epoch: leased.Epoch, LastError: vocab.ErrorInfo{Code: "stripe_500", Message: "server error"}})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, released.Status)
		require.Equal(t, leased.Epoch, released.Epoch)
		require.Nil(t, released.LeaseExpiresAt)
		require.Equal(t, &vocab.ErrorInfo{Code: "stripe_500", Message: "server error"}, released.LastError)
		next := lease(ctx, t, s.Store, released, c.JobID, time.Minute)
		require.Equal(t, leased.Epoch+1, next.Epoch)
		require.Equal(t, 2, next.Attempts)
	},

	"StaleEpochCannotWrite": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{}).Claim
		old := lease(ctx, t, s.Store, c, c.JobID, -time.Second) // the old worker's lease expired

		expired, err := s.Store.ClaimListLeaseExpired(ctx, &core.ClaimListLeaseExpiredParams{Limit: 10})
		require.NoError(t, err)
		require.Len(t, expired, 1)
		require.Equal(t, c.ID, expired[0].ID)

		const newJob = int64(987654321)
		reclaimed, err := s.Store.ClaimReclaim(ctx, &core.ClaimReclaimParams{ID: c.ID, Epoch: old.Epoch, JobID: newJob})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, reclaimed.Status)
		require.Equal(t, newJob, reclaimed.JobID)

		// The old job may not lease again; the new one may.
		_, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		fresh := lease(ctx, t, s.Store, reclaimed, newJob, time.Minute)
		require.Equal(t, old.Epoch+1, fresh.Epoch)

		// The old worker can neither complete, fail, release nor reclaim.
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: old.Epoch, Result: json.RawMessage(`{"refund_id":"re_stale"}`)})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: old.Epoch, Error: vocab.ErrorInfo{Code: "x"}})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
		_, err = s.Store.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: c.ID, Epoch: old.Epoch})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
		_, err = s.Store.ClaimReclaim(ctx, &core.ClaimReclaimParams{ID: c.ID, Epoch: old.Epoch, JobID: 1})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
		// Nor reclaim a live lease.
		_, err = s.Store.ClaimReclaim(ctx, &core.ClaimReclaimParams{ID: c.ID, Epoch: fresh.Epoch, JobID: 1})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)

		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusRunning, got.Status)
		require.Equal(t, fresh.Epoch, got.Epoch)
		require.Nil(t, got.Result)

		done, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: fresh.Epoch, Result: json.RawMessage(`{"refund_id":"re_1"}`)})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusSucceeded, done.Status)
		// A completed claim cannot be completed again, even by its own epoch.
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: fresh.Epoch, Result: json.RawMessage(`{}`)})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
	},

	"ReaperGiveUpNeedsExpiredLease": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{}).Claim
		live := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: live.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}, LeaseExpiredOnly: true})
		require.ErrorIs(t, err, vocab.ErrLeaseLost)
		failed, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: live.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}, LeaseExpiredOnly: true, Now: ptr(time.Now().Add(2 * time.Minute))})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, failed.Status)
		require.Equal(t, vocab.CodeOutcomeUnknown, failed.Error.Code)
	},

	"RedriveRules": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{}).Claim
		leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		_, err := s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID})
		require.ErrorIs(t, err, vocab.ErrStateChanged, "a running claim is not re-driven")
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}})
		require.NoError(t, err)

		// Unknown outcome: same generation, same downstream key.
		same, err := s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, same.Status)
		require.Equal(t, c.DownstreamKey, same.DownstreamKey)
		require.Equal(t, c.JobID, same.JobID)
		require.Nil(t, same.Error)
		require.Nil(t, same.ExpiresAt)

		leased = lease(ctx, t, s.Store, same, c.JobID, time.Minute)
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined}})
		require.NoError(t, err)
		// Definitive "nothing happened": next generation, fresh job.
		next, err := s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID, NextGeneration: true, JobID: 424242})
		require.NoError(t, err)
		require.Equal(t, 1, next.Generation)
		require.Equal(t, DownstreamKey(c, 1), next.DownstreamKey)
		require.Equal(t, int64(424242), next.JobID)
		require.Nil(t, next.FirstCalledAt)

		leased = lease(ctx, t, s.Store, next, 424242, time.Minute)
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		_, err = s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID})
		require.ErrorIs(t, err, vocab.ErrStateChanged, "a succeeded claim is never re-driven")
	},

	"ArchiveExpiredOnlyTerminal": func(t *testing.T, s *suite) {
		ctx := context.Background()
		past := ptr(time.Now().Add(-2 * moneyTTL))
		var expiredKeys []string
		var expiredHash string
		for i := range 5 {
			c := Claim(ctx, t, s.gate, &ClaimOpts{Key: fmt.Sprintf("expired-key-%d", i)}).Claim
			l := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
			_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`), Now: past})
			require.NoError(t, err)
			expiredKeys = append(expiredKeys, c.IdempotencyKey)
			expiredHash = c.ArgsHash
		}
		live := Claim(ctx, t, s.gate, &ClaimOpts{Key: "live-terminal-key"}).Claim
		l := lease(ctx, t, s.Store, live, live.JobID, time.Minute)
		_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: live.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		Claim(ctx, t, s.gate, &ClaimOpts{Key: "queued-key-0001"})
		running := Claim(ctx, t, s.gate, &ClaimOpts{Key: "running-key-0001"}).Claim
		lease(ctx, t, s.Store, running, running.JobID, -time.Hour)

		archive := func(limit int, now *time.Time) int {
			t.Helper()
			tx, err := s.Store.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			n, err := tx.ClaimArchiveExpired(ctx, &core.ClaimArchiveExpiredParams{Limit: limit, Now: now})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			return n
		}
		require.Equal(t, 3, archive(3, nil), "bounded by the limit")
		require.Equal(t, 2, archive(100, nil))
		require.Equal(t, 3, s.ClaimCount(ctx))

		// Even far in the future, queued and running claims stay.
		require.Equal(t, 1, archive(100, ptr(time.Now().Add(10*core.MaxTTL))))
		require.Equal(t, 2, s.ClaimCount(ctx))

		// An archived intent leaves a tombstone: the same key and arguments
		// are refused; other arguments start a new operation.
		ts, err := s.Store.TombstoneGetByKey(ctx, &core.TombstoneGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: expiredKeys[0],
			ArgsHash: expiredHash})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusSucceeded, ts.Status)
		require.WithinDuration(t, ts.ExpiredAt.Add(core.DefaultRetention), ts.RetainUntil, time.Second)
		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: expiredKeys[0]})
		require.Equal(t, vocab.OutcomeExpired, res.Outcome)
		require.Equal(t, ts.OperationID, res.Claim.OperationID)
		res = Claim(ctx, t, s.gate, &ClaimOpts{Key: expiredKeys[1], Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("777")}})
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)

		// After the retention the tombstone goes, and the key is free.
		n, err := s.Store.TombstoneDeleteExpired(ctx, &core.TombstoneDeleteExpiredParams{Limit: 100, Now: ptr(time.Now().Add(core.MaxRetention + 10*core.MaxTTL))})
		require.NoError(t, err)
		require.Equal(t, 6, n, "the five expired keys and the terminal one archived in the far future")
		_, err = s.Store.TombstoneGetByKey(ctx, &core.TombstoneGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: expiredKeys[2],
			ArgsHash: expiredHash})
		require.ErrorIs(t, err, vocab.ErrNotFound)
		res = Claim(ctx, t, s.gate, &ClaimOpts{Key: expiredKeys[2]})
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	},

	"ListTerminalNamesTerminalClaimsOnly": func(t *testing.T, s *suite) {
		ctx := context.Background()
		done := Claim(ctx, t, s.gate, &ClaimOpts{Key: "terminal-key-01"}).Claim
		leased := lease(ctx, t, s.Store, done, done.JobID, time.Minute)
		_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		queued := Claim(ctx, t, s.gate, &ClaimOpts{Key: "terminal-key-02"}).Claim
		running := Claim(ctx, t, s.gate, &ClaimOpts{Key: "terminal-key-03"}).Claim
		lease(ctx, t, s.Store, running, running.JobID, time.Minute)
		ids, err := s.Store.ClaimListTerminal(ctx, &core.ClaimListTerminalParams{IDs: []int64{queued.ID, done.ID, running.ID, 1 << 40}})
		require.NoError(t, err)
		require.Equal(t, []int64{done.ID}, ids)
		ids, err = s.Store.ClaimListTerminal(ctx, &core.ClaimListTerminalParams{})
		require.NoError(t, err)
		require.Empty(t, ids)
	},

	"WaitReturnsOutcomeWhenItArrives": func(t *testing.T, s *suite) {
		ctx := context.Background()
		first := Claim(ctx, t, s.gate, &ClaimOpts{Key: "wait-key-0001"})
		leased := lease(ctx, t, s.Store, first.Claim, first.Claim.JobID, time.Minute)
		// The outcome arrives once the call waits for it: when the gate's
		// waiter subscribed (its own, the poller: when it first asked the
		// store), never by a guess at how long the call takes to start.
		waiting := make(chan struct{})
		var once sync.Once
		signal := func() { once.Do(func() { close(waiting) }) }
		g, err := core.New(&core.Config{Store: &pollSignal{Store: s.Store, polled: signal}, Enqueuer: s.Enqueuer,
			Waiter: subscribeSignal(s.Waiter, signal), Policies: Policies(), Secret: Secret, DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		completed := make(chan error, 1)
		go func() {
			select {
			case <-waiting:
			case <-time.After(time.Minute):
				completed <- errors.New("the call never waited for the outcome")
				return
			}
			_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_w"}`)})
			completed <- err
		}()
		res := Claim(ctx, t, g, &ClaimOpts{Key: "wait-key-0001", Wait: time.Minute})
		require.NoError(t, <-completed)
		require.Equal(t, vocab.OutcomeReplayed, res.Outcome)
		require.Equal(t, vocab.StatusSucceeded, res.Claim.Status)
		require.JSONEq(t, `{"refund_id":"re_w"}`, string(res.Claim.Result))
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionReplayed}, decisions(audit(ctx, t, s.Store, "acme", "refund_order", "wait-key-0001")))

		// Without an outcome, the wait ends with the handle.
		other := Claim(ctx, t, s.gate, &ClaimOpts{Key: "wait-key-0002", Wait: 100 * time.Millisecond})
		require.Equal(t, vocab.OutcomeAccepted, other.Outcome)
		require.Equal(t, vocab.StatusQueued, other.Claim.Status)
		require.Equal(t, core.DefaultRetryAfter, other.RetryAfter)
	},

	"ReaperReclaimsExpiredLeases": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "reap-me-00001"}).Claim
		dead := lease(ctx, t, s.Store, c, c.JobID, -time.Second)
		live := Claim(ctx, t, s.gate, &ClaimOpts{Key: "leave-me-0001"}).Claim
		lease(ctx, t, s.Store, live, live.JobID, time.Minute)

		res, err := s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{Reclaimed: 1}, res)
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, got.Status)
		require.NotEqual(t, c.JobID, got.JobID, "a fresh job took over")
		require.Equal(t, dead.Epoch, got.Epoch)
		require.Equal(t, c.DownstreamKey, got.DownstreamKey, "the downstream key survives a reclaim")
		require.Equal(t, 3, s.JobCount(ctx))
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionReclaimed}, decisions(audit(ctx, t, s.Store, "acme", "refund_order", "reap-me-00001")))

		// The old job cannot lease any more; the new one can.
		_, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		lease(ctx, t, s.Store, got, got.JobID, time.Minute)

		// A second pass has nothing to do.
		res, err = s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{}, res)
	},

	"ReaperGivesUpAfterTheBudget": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "budget-key-001"}).Claim
		for i := range core.DefaultReclaimBudget {
			leased := lease(ctx, t, s.Store, c, c.JobID, -time.Second)
			require.Equal(t, i+1, leased.Attempts)
			if i < core.DefaultReclaimBudget-1 {
				res, err := s.gate.Reap(ctx, s.Control, time.Minute)
				require.NoError(t, err)
				require.Equal(t, 1, res.Reclaimed)
				c, err = s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
				require.NoError(t, err)
			}
		}
		res, err := s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{GaveUp: 1}, res)
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, got.Status)
		require.Equal(t, vocab.CodeOutcomeUnknown, got.Error.Code)
	},

	// A claim whose job ended without it fails with a code that says what
	// ended the job: a cancel asked of River from outside the gate (River
	// UI, rivercli, the River client) is an operator's, a job that is gone
	// or that its worker ended unrun vanished, one that ended after
	// attempts has an unknown outcome. None is the owner's `cancelled`.
	"ReaperFailsClaimsWhoseJobEnded": func(t *testing.T, s *suite) {
		ctx := context.Background()
		claimTried := func(key string) *core.Claim {
			c := Claim(ctx, t, s.gate, &ClaimOpts{Key: key}).Claim
			leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
			released, err := s.Store.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: c.ID, Epoch: leased.Epoch, LastError: vocab.ErrorInfo{Code: "x"}})
			require.NoError(t, err)
			return released
		}
		cancelJob := func(c *core.Claim) {
			tx, err := s.Store.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, s.Control.JobCancelTx(ctx, tx, c.JobID))
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, "cancelled", s.JobState(ctx, c.JobID))
		}
		cancelled := Claim(ctx, t, s.gate, &ClaimOpts{Key: "orphan-never-1"}).Claim
		cancelJob(cancelled)
		cancelledTried := claimTried("orphan-tried-1")
		cancelJob(cancelledTried)
		deleted := Claim(ctx, t, s.gate, &ClaimOpts{Key: "orphan-deleted-1"}).Claim
		s.DeleteJob(ctx, deleted.JobID)
		require.Empty(t, s.JobState(ctx, deleted.JobID))
		deletedTried := claimTried("orphan-deleted-2")
		s.DeleteJob(ctx, deletedTried.JobID)
		discarded := Claim(ctx, t, s.gate, &ClaimOpts{Key: "orphan-discard-1"}).Claim
		s.EndJob(ctx, discarded.JobID, "discarded")
		workerCancelled := Claim(ctx, t, s.gate, &ClaimOpts{Key: "orphan-wcancel-1"}).Claim
		s.EndJob(ctx, workerCancelled.JobID, "cancelled")
		discardedTried := claimTried("orphan-discard-2")
		s.EndJob(ctx, discardedTried.JobID, "discarded")
		fine := Claim(ctx, t, s.gate, &ClaimOpts{Key: "orphan-fine-01"}).Claim

		res, err := s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{Abandoned: 7}, res)
		for _, want := range []struct {
			c    *core.Claim
			code vocab.Code
			says string
		}{
			{cancelled, vocab.CodeJobCancelledByOperator, "cancelled in River by an operator"},
			{cancelledTried, vocab.CodeJobCancelledByOperator, "after 1 attempt(s) whose outcome is unknown"},
			{deleted, vocab.CodeJobVanished, "deleted from River before the operation ran"},
			{deletedTried, vocab.CodeJobVanished, "after 1 attempt(s)"},
			{discarded, vocab.CodeJobVanished, "ended (discarded) before the operation ran"},
			{workerCancelled, vocab.CodeJobVanished, "ended (cancelled) before the operation ran"},
			{discardedTried, vocab.CodeOutcomeUnknown, "ended (discarded) after 1 attempt(s)"},
		} {
			got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: want.c.ID})
			require.NoError(t, err)
			require.Equal(t, vocab.StatusFailed, got.Status, want.c.IdempotencyKey)
			require.Equal(t, want.code, got.Error.Code, want.c.IdempotencyKey)
			require.Contains(t, got.Error.Message, want.says, want.c.IdempotencyKey)
			require.False(t, got.Error.NothingHappened, "a re-drive keeps the downstream key")
			require.NotContains(t, got.Error.Message, "owner cancelled", want.c.IdempotencyKey)
			require.NoError(t, core.TransitionOf(core.EventRedrive).Check(got, core.Facts{}), "%s may be re-driven", want.c.IdempotencyKey)
			events := audit(ctx, t, s.Store, "acme", "refund_order", want.c.IdempotencyKey)
			last := events[len(events)-1]
			require.Equal(t, vocab.DecisionFailed, last.Decision)
			require.Equal(t, "abandon: "+string(want.code)+": "+got.Error.Message, last.Reason, "the audit row names what ended the job")
		}
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: fine.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, got.Status)
	},

	// An operator's cancel (River's JobCancel, as River UI's Cancel) or
	// delete (JobDelete) of a queued job is not the owner's word: the agent's
	// retry with the same key replays the truth, an operator's dry run
	// says it would re-drive and changes nothing, and the re-drive runs it
	// on a fresh job. The owner's own cancellation stays final.
	"OperatorCancelOrDeleteIsRedrivableOwnerCancelIsNot": func(t *testing.T, s *suite) {
		ctx := context.Background()
		byOperator := Claim(ctx, t, s.gate, &ClaimOpts{Key: "op-cancel-key-01"}).Claim
		tx, err := s.Store.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Control.JobCancelTx(ctx, tx, byOperator.JobID))
		require.NoError(t, tx.Commit(ctx))
		job, err := s.Store.JobGet(ctx, &core.JobGetParams{ID: byOperator.JobID})
		require.NoError(t, err)
		require.Equal(t, "cancelled", job.State)
		require.True(t, job.CancelRequested)
		deleted := Claim(ctx, t, s.gate, &ClaimOpts{Key: "op-delete-key-01"}).Claim
		s.DeleteJob(ctx, deleted.JobID)
		byOwner := Claim(ctx, t, s.gate, &ClaimOpts{Key: "owner-cancel-01"}).Claim
		_, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: byOwner.OperationID, UserID: "support-bot"}, s.Control)
		require.NoError(t, err)

		res, err := s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{Abandoned: 2}, res, "the owner's cancellation is no orphan")

		for c, code := range map[*core.Claim]vocab.Code{byOperator: vocab.CodeJobCancelledByOperator, deleted: vocab.CodeJobVanished} {
			replay := Claim(ctx, t, s.gate, &ClaimOpts{Key: c.IdempotencyKey})
			require.True(t, replay.Replayed, c.IdempotencyKey)
			require.Equal(t, c.OperationID, replay.Claim.OperationID)
			require.Equal(t, code, replay.Claim.Error.Code)
			require.Contains(t, replay.Claim.Error.Message, "an operator can re-drive it")

			before := audit(ctx, t, s.Store, "acme", "refund_order", c.IdempotencyKey)
			params := &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: c.IdempotencyKey,
				Operator: "ops@acme", Reason: "cancelled by mistake", DryRun: true}
			dry, err := s.gate.Redrive(ctx, params, s.Control)
			require.NoError(t, err, "a dry run says it would re-drive")
			require.Equal(t, vocab.StatusFailed, dry.Claim.Status)
			require.Equal(t, before, audit(ctx, t, s.Store, "acme", "refund_order", c.IdempotencyKey), "a dry run writes nothing")

			params.DryRun = false
			jobs := s.JobCount(ctx)
			redriven, err := s.gate.Redrive(ctx, params, s.Control)
			require.NoError(t, err)
			require.Equal(t, vocab.StatusQueued, redriven.Claim.Status)
			require.True(t, redriven.FreshJob, "River will not run the job again: a fresh one")
			require.False(t, redriven.NextGeneration, "the downstream key stays")
			require.Equal(t, c.DownstreamKey, redriven.Claim.DownstreamKey)
			require.Equal(t, jobs+1, s.JobCount(ctx))
			require.Equal(t, "available", s.JobState(ctx, redriven.Claim.JobID))
			events := audit(ctx, t, s.Store, "acme", "refund_order", c.IdempotencyKey)
			last := events[len(events)-1]
			require.Equal(t, vocab.DecisionRedriven, last.Decision)
			require.Equal(t, "ops@acme", last.UserID)
		}

		_, err = s.gate.Redrive(ctx, &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "owner-cancel-01",
			Operator: "ops@acme", Reason: "try", DryRun: true}, s.Control)
		require.ErrorIs(t, err, core.ErrRedriveCancelled, "an owner's cancellation is final")
		_, err = s.gate.Redrive(ctx, &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "owner-cancel-01",
			Operator: "ops@acme", Reason: "try"}, s.Control)
		require.ErrorIs(t, err, core.ErrRedriveCancelled)
		events := audit(ctx, t, s.Store, "acme", "refund_order", "owner-cancel-01")
		require.Equal(t, vocab.DecisionDenied, events[len(events)-1].Decision)
	},

	// An operator may re-drive the moment the failure commits, before
	// River has finalized the failed job (still running, to be cancelled):
	// River will not run that job again, so a fresh one replaces it.
	"RedriveWhileRiverStillRunsTheFailedJob": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "redrive-run-01"}).Claim
		s.MarkJobRunning(ctx, c.JobID, time.Second)
		leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined}})
		require.NoError(t, err)
		res, err := s.gate.Redrive(ctx, &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "redrive-run-01",
			Operator: "ops@acme", Reason: "card updated"}, s.Control)
		require.NoError(t, err)
		require.True(t, res.FreshJob, "the running job will not run again")
		require.NotEqual(t, c.JobID, res.Claim.JobID)
		require.Equal(t, "available", s.JobState(ctx, res.Claim.JobID))
		require.Equal(t, vocab.StatusQueued, res.Claim.Status)
	},
	// A job nobody asked to cancel (here: still available) is the claim's
	// own job again after a re-drive; no second job is inserted.
	"RedriveKeepsAJobNotCancelled": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "redrive-own-01"}).Claim
		leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}})
		require.NoError(t, err)
		jobs := s.JobCount(ctx)
		res, err := s.gate.Redrive(ctx, &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "redrive-own-01",
			Operator: "ops@acme", Reason: "retry"}, s.Control)
		require.NoError(t, err)
		require.False(t, res.FreshJob)
		require.Equal(t, c.JobID, res.Claim.JobID, "its own job runs it")
		require.Equal(t, jobs, s.JobCount(ctx))
		require.Equal(t, "available", s.JobState(ctx, c.JobID))
	},
	"RedriveThroughTheGate": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "redrive-key-01"}).Claim
		leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
		_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeOutcomeUnknown}})
		require.NoError(t, err)
		tx, err := s.Store.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Control.JobCancelTx(ctx, tx, c.JobID))
		require.NoError(t, tx.Commit(ctx))
		params := &core.RedriveParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "redrive-key-01", Operator: "ops@acme", Reason: "stripe outage over", DryRun: true}

		res, err := s.gate.Redrive(ctx, params, s.Control)
		require.NoError(t, err)
		require.False(t, res.NextGeneration, "an unknown outcome keeps the downstream key")
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: c.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, got.Status, "a dry run changes nothing")

		params.DryRun = false
		res, err = s.gate.Redrive(ctx, params, s.Control)
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, res.Claim.Status)
		require.Equal(t, c.DownstreamKey, res.Claim.DownstreamKey)
		// Its job's cancellation was requested (a failing worker cancels its
		// own job): River may still deliver it to a retried job of that id,
		// so a fresh job runs the claim and the cancelled one stays so.
		require.True(t, res.FreshJob)
		require.NotEqual(t, c.JobID, res.Claim.JobID)
		require.Equal(t, "available", s.JobState(ctx, res.Claim.JobID))
		require.Equal(t, "cancelled", s.JobState(ctx, c.JobID))
		events := audit(ctx, t, s.Store, "acme", "refund_order", "redrive-key-01")
		last := events[len(events)-1]
		require.Equal(t, vocab.DecisionRedriven, last.Decision)
		require.Equal(t, "ops@acme", last.UserID)
		require.Contains(t, last.Reason, "stripe outage over")

		// Re-driving a queued one is refused; so is a succeeded one.
		_, err = s.gate.Redrive(ctx, params, s.Control)
		require.ErrorIs(t, err, core.ErrRedriveNotFailed)
		leased = lease(ctx, t, s.Store, res.Claim, res.Claim.JobID, time.Minute)
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		_, err = s.gate.Redrive(ctx, params, s.Control)
		require.ErrorIs(t, err, core.ErrRedriveSucceeded)
	},

	"PruneRemovesExpiredOnly": func(t *testing.T, s *suite) {
		ctx := context.Background()
		old := Claim(ctx, t, s.gate, &ClaimOpts{Key: "prune-old-0001"}).Claim
		l := lease(ctx, t, s.Store, old, old.JobID, time.Minute)
		_, err := s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: old.ID, Epoch: l.Epoch, Result: json.RawMessage(`{}`), Now: ptr(time.Now().Add(-2 * moneyTTL))})
		require.NoError(t, err)
		Claim(ctx, t, s.gate, &ClaimOpts{Key: "prune-live-001"})
		n, err := s.gate.Prune(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, s.ClaimCount(ctx))
		// Within the retention the same intent is refused.
		res := Claim(ctx, t, s.gate, &ClaimOpts{Key: "prune-old-0001"})
		require.Equal(t, vocab.OutcomeExpired, res.Outcome)
		require.Equal(t, old.OperationID, res.Claim.OperationID)
		// A prune after the retention forgets it: the key is free again.
		_, err = s.gate.PruneAt(ctx, 10, time.Now().Add(core.DefaultRetention+3*moneyTTL))
		require.NoError(t, err)
		res = Claim(ctx, t, s.gate, &ClaimOpts{Key: "prune-old-0001"})
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
		require.NotEqual(t, old.OperationID, res.Claim.OperationID)
	},

	"ListNewestPagesOneTenantNewestFirst": func(t *testing.T, s *suite) {
		ctx := context.Background()
		var mine []*core.Claim
		for i := range 5 {
			mine = append(mine, Claim(ctx, t, s.gate, &ClaimOpts{Key: fmt.Sprintf("list-newest-%02d", i)}).Claim)
		}
		Claim(ctx, t, s.gate, &ClaimOpts{Tenant: "globex", Key: "list-newest-globex"})
		credit := Claim(ctx, t, s.gate, &ClaimOpts{Tool: "apply_credit", Key: "list-newest-credit",
			Args: map[string]any{"customer_id": "cus_1", "amount_cents": json.Number("100"), "currency": "usd"}}).Claim
		leased := lease(ctx, t, s.Store, mine[1], mine[1].JobID, time.Minute)
		_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: mine[1].ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined}})
		require.NoError(t, err)

		// Pages of two, newest first, the cursor being the last row read;
		// the failure (a transition) does not move mine[1].
		var got []string
		var after *core.ClaimCursor
		for {
			page, err := s.Store.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: "acme", After: after, Limit: 2})
			require.NoError(t, err)
			for _, c := range page {
				require.Equal(t, "acme", c.TenantID)
				got = append(got, c.IdempotencyKey)
			}
			if len(page) < 2 {
				break
			}
			last := page[len(page)-1]
			after = &core.ClaimCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		want := []string{credit.IdempotencyKey}
		for i := len(mine) - 1; i >= 0; i-- {
			want = append(want, mine[i].IdempotencyKey)
		}
		require.Equal(t, want, got)

		failed, err := s.Store.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: "acme", Status: vocab.StatusFailed, Limit: 10})
		require.NoError(t, err)
		require.Len(t, failed, 1)
		require.Equal(t, mine[1].ID, failed[0].ID)
		credits, err := s.Store.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: "acme", Tool: "apply_credit", Limit: 10})
		require.NoError(t, err)
		require.Len(t, credits, 1)
		require.Equal(t, credit.ID, credits[0].ID)
	},

	"ListFiltersByTenantToolStatusAndUpdate": func(t *testing.T, s *suite) {
		ctx := context.Background()
		first := Claim(ctx, t, s.gate, &ClaimOpts{Key: "list-key-0001"}).Claim
		second := Claim(ctx, t, s.gate, &ClaimOpts{Key: "list-key-0002"}).Claim
		seat := Claim(ctx, t, s.gate, &ClaimOpts{Key: "list-key-0003", Tool: "reset_seat", Args: map[string]any{"seat_id": "seat_1"}}).Claim
		globex := Claim(ctx, t, s.gate, &ClaimOpts{Key: "list-key-0004", Tenant: "globex"}).Claim
		leased, err := s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: first.TenantID, OperationID: first.OperationID, JobID: first.JobID, Lease: time.Minute})
		require.NoError(t, err)
		_, err = s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: first.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined}})
		require.NoError(t, err)
		// Distinct update times, set rather than waited for: first was
		// updated last (it failed), then the seat and globex's; second before
		// since.
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		for id, offset := range map[int64]time.Duration{second.ID: 0, seat.ID: 2 * time.Second, globex.ID: 2 * time.Second, first.ID: 3 * time.Second} {
			s.SetClaimUpdatedAt(ctx, id, base.Add(offset))
		}
		since := base.Add(500 * time.Millisecond)

		ids := func(p *core.ClaimListParams) []int64 {
			claims, err := s.Store.ClaimList(ctx, p)
			require.NoError(t, err)
			out := []int64{}
			for _, c := range claims {
				out = append(out, c.ID)
			}
			return out
		}
		// Newest (by update) first.
		require.Equal(t, []int64{first.ID, seat.ID, second.ID}, ids(&core.ClaimListParams{TenantID: "acme"}))
		require.Equal(t, []int64{first.ID}, ids(&core.ClaimListParams{TenantID: "acme", Status: vocab.StatusFailed}))
		require.Equal(t, []int64{seat.ID}, ids(&core.ClaimListParams{TenantID: "acme", Tool: "reset_seat"}))
		require.Equal(t, []int64{first.ID, seat.ID}, ids(&core.ClaimListParams{TenantID: "acme", Since: &since}), "second was updated before since")
		require.Equal(t, []int64{seat.ID}, ids(&core.ClaimListParams{TenantID: "acme", Status: vocab.StatusQueued, Since: &since}))
		require.Equal(t, []int64{first.ID, seat.ID}, ids(&core.ClaimListParams{TenantID: "acme", Limit: 2}))
		require.Len(t, ids(&core.ClaimListParams{}), 4, "no filter: every tenant")
	},

	"ListFindsOperationsByArgument": func(t *testing.T, s *suite) {
		// "Did we refund ord_a twice?": two keys on one order are two
		// operations; a retry of one key is not a third.
		ctx := context.Background()
		first := Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-arg-key-0001", Args: map[string]any{"order_id": "ord_a", "amount_cents": json.Number("1500")}}).Claim
		Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-arg-key-0001", Args: map[string]any{"order_id": "ord_a", "amount_cents": json.Number("1500")}})
		second := Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-arg-key-0002", Args: map[string]any{"order_id": "ord_a", "amount_cents": json.Number("1500")}}).Claim
		other := Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-arg-key-0003", Args: map[string]any{"order_id": "ord_b", "amount_cents": json.Number("700")}}).Claim
		Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-arg-key-0004", Tenant: "globex", Args: map[string]any{"order_id": "ord_a"}})
		ids := func(p *core.ClaimListParams) []int64 {
			claims, err := s.Store.ClaimList(ctx, p)
			require.NoError(t, err)
			out := []int64{}
			for _, c := range claims {
				out = append(out, c.ID)
			}
			sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
			return out
		}
		require.Equal(t, []int64{first.ID, second.ID}, ids(&core.ClaimListParams{TenantID: "acme", ArgName: "order_id", ArgValue: "ord_a"}))
		require.Equal(t, []int64{other.ID}, ids(&core.ClaimListParams{TenantID: "acme", ArgName: "order_id", ArgValue: "ord_b"}))
		require.Equal(t, []int64{other.ID}, ids(&core.ClaimListParams{TenantID: "acme", ArgName: "amount_cents", ArgValue: "700"}), "a number compares as its digits")
		require.Empty(t, ids(&core.ClaimListParams{TenantID: "acme", ArgName: "order_id", ArgValue: "ord_c"}))
		require.Empty(t, ids(&core.ClaimListParams{TenantID: "acme", ArgName: "no_such_arg", ArgValue: "ord_a"}))
		_, err := s.Store.ClaimList(ctx, &core.ClaimListParams{TenantID: "acme", ArgName: "order_id') OR 1=1 --", ArgValue: "x"})
		require.Error(t, err, "an argument name that is no name is refused")

		// The newest-first pages filter the same way.
		newest := func(p *core.ClaimListNewestParams) []int64 {
			claims, err := s.Store.ClaimListNewest(ctx, p)
			require.NoError(t, err)
			out := []int64{}
			for _, c := range claims {
				out = append(out, c.ID)
			}
			return out
		}
		require.Equal(t, []int64{second.ID, first.ID}, newest(&core.ClaimListNewestParams{TenantID: "acme", ArgName: "order_id", ArgValue: "ord_a", Limit: 10}))
		require.Equal(t, []int64{second.ID}, newest(&core.ClaimListNewestParams{TenantID: "acme", ArgName: "order_id", ArgValue: "ord_a", Limit: 1}))
		require.Equal(t, []int64{other.ID}, newest(&core.ClaimListNewestParams{TenantID: "acme", ArgName: "amount_cents", ArgValue: "700", Limit: 10}))
		require.Empty(t, newest(&core.ClaimListNewestParams{TenantID: "globex", ArgName: "order_id", ArgValue: "ord_b", Limit: 10}))
		_, err = s.Store.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: "acme", ArgName: "order_id') OR 1=1 --", ArgValue: "x", Limit: 1})
		require.Error(t, err)
	},

	"GetByOperationIsTenantScoped": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "by-operation-01"}).Claim
		got, err := s.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: c.OperationID})
		require.NoError(t, err)
		require.Equal(t, c.ID, got.ID)
		_, err = s.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "globex", OperationID: c.OperationID})
		require.ErrorIs(t, err, vocab.ErrNotFound)
		_, err = s.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: "00000000-0000-4000-8000-000000000000"})
		require.ErrorIs(t, err, vocab.ErrNotFound)
	},

	"JobGetSaysWhenTheJobRunsNext": func(t *testing.T, s *suite) {
		ctx := context.Background()
		before := time.Now().Add(-time.Second)
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "job-get-key-01"}).Claim
		job, err := s.Store.JobGet(ctx, &core.JobGetParams{ID: c.JobID})
		require.NoError(t, err)
		require.Equal(t, "available", job.State)
		require.NotNil(t, job.NextRunAt)
		require.True(t, job.NextRunAt.After(before), "an available job runs now, not in the past: %s", job.NextRunAt)
		s.MarkJobRunning(ctx, c.JobID, time.Second)
		job, err = s.Store.JobGet(ctx, &core.JobGetParams{ID: c.JobID, Lock: true})
		require.NoError(t, err)
		require.Equal(t, "running", job.State)
		require.Nil(t, job.NextRunAt, "a running job has no next run")
		_, err = s.Store.JobGet(ctx, &core.JobGetParams{ID: c.JobID + 1000})
		require.ErrorIs(t, err, vocab.ErrNotFound)
	},

	"CancelOnlyBeforeTheOperationStarts": func(t *testing.T, s *suite) {
		ctx := context.Background()
		c := Claim(ctx, t, s.gate, &ClaimOpts{Key: "cancel-queued-01"}).Claim
		params := &core.CancelParams{TenantID: "acme", OperationID: c.OperationID, UserID: "support-bot", RequestID: "req_cancel"}
		_, err := s.gate.Cancel(ctx, &core.CancelParams{TenantID: "globex", OperationID: c.OperationID, UserID: "x"}, s.Control)
		require.ErrorIs(t, err, vocab.ErrNotFound, "another tenant's operation")

		got, err := s.gate.Cancel(ctx, params, s.Control)
		require.NoError(t, err)
		require.Equal(t, vocab.StatusFailed, got.Status)
		require.Equal(t, vocab.CodeCancelled, got.Error.Code)
		require.True(t, got.Error.NothingHappened)
		require.Equal(t, "cancelled", s.JobState(ctx, c.JobID))
		events := audit(ctx, t, s.Store, "acme", "refund_order", "cancel-queued-01")
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionFailed}, decisions(events))
		require.Equal(t, "support-bot", events[1].UserID)
		require.Contains(t, events[1].Reason, "cancelled")
		_, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable, "a cancelled claim is never leased")

		_, err = s.gate.Cancel(ctx, params, s.Control)
		require.ErrorIs(t, err, core.ErrCancelTerminal)

		// A job a worker has fetched is about to take the lease: refused.
		fetched := Claim(ctx, t, s.gate, &ClaimOpts{Key: "cancel-fetched-01"}).Claim
		s.MarkJobRunning(ctx, fetched.JobID, time.Second)
		got, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: fetched.OperationID, UserID: "x"}, s.Control)
		require.ErrorIs(t, err, core.ErrCancelStarted)
		require.Equal(t, vocab.StatusQueued, got.Status)

		// Running: refused. Queued again after an attempt: refused unless
		// the tool's attempts leave no effect (in-transaction tools).
		tried := Claim(ctx, t, s.gate, &ClaimOpts{Key: "cancel-tried-01"}).Claim
		leased := lease(ctx, t, s.Store, tried, tried.JobID, time.Minute)
		_, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: tried.OperationID, UserID: "x"}, s.Control)
		require.ErrorIs(t, err, core.ErrCancelStarted)
		_, err = s.Store.ClaimRelease(ctx, &core.ClaimReleaseParams{ID: tried.ID, Epoch: leased.Epoch, LastError: vocab.ErrorInfo{Code: "transient"}})
		require.NoError(t, err)
		_, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: tried.OperationID, UserID: "x"}, s.Control)
		require.ErrorIs(t, err, core.ErrCancelStarted)
		got, err = s.gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: tried.OperationID, UserID: "x", AttemptsLeaveNoEffect: true}, s.Control)
		require.NoError(t, err)
		require.Equal(t, vocab.CodeCancelled, got.Error.Code)
	},

	"ReaperRequeuesClaimsWhoseWorkerStoppedBeforeTheLease": func(t *testing.T, s *suite) {
		ctx := context.Background()
		stuck := Claim(ctx, t, s.gate, &ClaimOpts{Key: "stalled-key-01"}).Claim
		fresh := Claim(ctx, t, s.gate, &ClaimOpts{Key: "stalled-key-02"}).Claim
		s.MarkJobRunning(ctx, stuck.JobID, 2*time.Minute)
		s.MarkJobRunning(ctx, fresh.JobID, time.Second) // just fetched: a live worker is about to lease

		res, err := s.gate.Reap(ctx, s.Control, time.Minute)
		require.NoError(t, err)
		require.Equal(t, &core.ReapResult{Repointed: 1}, res)
		got, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: stuck.ID})
		require.NoError(t, err)
		require.Equal(t, vocab.StatusQueued, got.Status)
		require.NotEqual(t, stuck.JobID, got.JobID)
		require.Equal(t, stuck.DownstreamKey, got.DownstreamKey)
		// The stuck job is marked for cancellation; the fresh one can lease.
		_, err = s.Store.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: stuck.TenantID, OperationID: stuck.OperationID, JobID: stuck.JobID, Lease: time.Minute})
		require.ErrorIs(t, err, vocab.ErrLeaseUnavailable)
		lease(ctx, t, s.Store, got, got.JobID, time.Minute)
		same, err := s.Store.ClaimGetByID(ctx, &core.ClaimGetByIDParams{ID: fresh.ID})
		require.NoError(t, err)
		require.Equal(t, fresh.JobID, same.JobID)
		require.Equal(t, []vocab.Decision{vocab.DecisionAccepted, vocab.DecisionReclaimed}, decisions(audit(ctx, t, s.Store, "acme", "refund_order", "stalled-key-01")))
	},
}

// Policies are the suite's fixture policies, shaped like the built-in
// tools' (package tools declares the real ones).
func Policies() []core.Policy {
	return []core.Policy{
		{
			Tool:           "refund_order",
			TTL:            moneyTTL,
			VolatileFields: []string{"reason"},
			AuditArgFields: []string{"order_id", "amount_cents"},
			ResultFields:   []string{"refund_id", "order_id", "amount_cents", "currency", "status"},
		},
		{
			Tool:           "apply_credit",
			TTL:            moneyTTL,
			VolatileFields: []string{"memo"},
			AuditArgFields: []string{"customer_id", "amount_cents", "currency"},
			ResultFields:   []string{"ledger_entry_id", "customer_id", "amount_cents", "currency"},
		},
		{
			Tool:           "reset_seat",
			TTL:            moneyTTL,
			AuditArgFields: []string{"seat_id"},
			ResultFields:   []string{"seat_id", "status"},
		},
		{
			Tool:           "send_password_reset",
			TTL:            mailTTL,
			AuditArgFields: []string{"user_id"},
			ResultFields:   []string{"user_id", "message_id", "sent_at"},
		},
	}
}

// pollSignal is a store that calls polled each time the gate's own waiter
// asks it which awaited claims are terminal: a call is then waiting.
type pollSignal struct {
	core.Store
	polled func()
}

func (p *pollSignal) ClaimListTerminal(ctx context.Context, params *core.ClaimListTerminalParams) ([]int64, error) {
	ids, err := p.Store.ClaimListTerminal(ctx, params)
	p.polled()
	return ids, err
}

// subscribeSignal wraps w (nil: the gate's own waiter, left as it is) so
// that a subscription calls subscribed.
func subscribeSignal(w core.Waiter, subscribed func()) core.Waiter {
	if w == nil {
		return nil
	}
	return &subscribeWaiter{Waiter: w, subscribed: subscribed}
}

type subscribeWaiter struct {
	core.Waiter
	subscribed func()
}

func (w *subscribeWaiter) Subscribe(claimID int64) (<-chan struct{}, func()) {
	ch, cancel := w.Waiter.Subscribe(claimID)
	w.subscribed()
	return ch, cancel
}
