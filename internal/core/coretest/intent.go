package coretest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// intentTests check that downstream keys derive from the intent (tenant,
// tool, key, fingerprint, under the deployment's secret), not from the
// operation id a database may forget.
var intentTests = map[string]func(t *testing.T, s *suite){
	"DownstreamKeySurvivesALostCommit": func(t *testing.T, s *suite) {
		ctx := context.Background()
		// The same intent claimed in two fresh databases (a claim whose
		// commit a failover or a restore lost, claimed again), once through
		// a group (ClaimInsertMany, when the enqueuer groups) and once on
		// its own (ClaimInsert): a new operation id, the same key.
		opts := &ClaimOpts{Key: "lost-commit-key-01"}
		first := Claim(ctx, t, s.gate, opts).Claim
		again := s.newBundle(t)
		single, err := core.New(&core.Config{Store: again.Store, Enqueuer: again.Enqueuer, Policies: Policies(), Secret: Secret,
			MaxClaimBatch: 1, DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		second := Claim(ctx, t, single, opts)
		require.Equal(t, vocab.OutcomeAccepted, second.Outcome)
		require.NotEqual(t, first.OperationID, second.Claim.OperationID)
		require.Equal(t, first.DownstreamKey, second.Claim.DownstreamKey)
		require.Equal(t, DownstreamKey(first, 0), first.DownstreamKey)

		// A volatile field (the refund's reason) is no part of the intent.
		reasoned := Claim(ctx, t, s.newBundleGate(t), &ClaimOpts{Key: "lost-commit-key-01",
			Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("500"), "reason": "customer asked"}}).Claim
		require.Equal(t, first.DownstreamKey, reasoned.DownstreamKey)
	},

	"NewIntentUnderAForgottenKeyGetsNewDownstreamKeys": func(t *testing.T, s *suite) {
		ctx := context.Background()
		// A key whose intent ran 40 days ago (past its 30-day retention):
		// the same arguments under it now are a new intent, whose
		// downstream keys must differ from the first's (a mail receiver
		// folds a second mail with the first's Message-ID), while the same
		// new intent claimed again after a lost commit keeps its own.
		opts := &ClaimOpts{Key: "forgotten-key-0001"}
		past := time.Now().Add(-40 * 24 * time.Hour)
		finishInThePast := func(g *core.Gate, b *Bundle, c *core.Claim, archive bool) {
			t.Helper()
			leased, err := g.Enter(ctx, &core.LeaseParams{Claim: c, JobID: c.JobID, Lease: time.Minute})
			require.NoError(t, err)
			_, err = b.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch,
				Result: json.RawMessage(`{}`), Now: &past})
			require.NoError(t, err)
			if archive {
				_, err = g.Prune(ctx, 10) // archived into the key's history
				require.NoError(t, err)
				_, err = g.Prune(ctx, 10) // and forgotten: its retention ended
				require.NoError(t, err)
			}
		}
		intentKey := func(c *core.Claim) string {
			return core.NewIntentKeyer(Secret).Key(c.TenantID, c.Tool, c.IdempotencyKey, c.ArgsHash)
		}

		// Through the key's history: archived, forgotten, claimed again.
		first := Claim(ctx, t, s.gate, opts).Claim
		finishInThePast(s.gate, s.Bundle, first, true)
		second := Claim(ctx, t, s.gate, opts)
		require.Equal(t, vocab.OutcomeAccepted, second.Outcome)
		require.NotEqual(t, first.DownstreamKey, second.Claim.DownstreamKey)
		require.Equal(t, core.DownstreamKey(intentKey(first), first.OperationID, 1, 0), second.Claim.DownstreamKey)

		// The same history in another database (the second claim's commit
		// lost, claimed again): the same downstream key.
		b := s.newBundle(t)
		g, err := core.New(&core.Config{Store: b.Store, Enqueuer: b.Enqueuer, Policies: Policies(), Secret: Secret,
			DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		finishInThePast(g, b, Claim(ctx, t, g, opts).Claim, true)
		lost := Claim(ctx, t, g, opts)
		require.Equal(t, vocab.OutcomeAccepted, lost.Outcome)
		require.Equal(t, second.Claim.DownstreamKey, lost.Claim.DownstreamKey)

		// A third intent under the key counts on: incarnation 2.
		finishInThePast(s.gate, s.Bundle, second.Claim, true)
		third := Claim(ctx, t, s.gate, opts)
		require.Equal(t, vocab.OutcomeAccepted, third.Outcome)
		require.Equal(t, core.DownstreamKey(intentKey(first), first.OperationID, 2, 0), third.Claim.DownstreamKey)

		// Through a take-over: the forgotten intent's fingerprint comes back
		// over another fingerprint's ended claim under the key: the same
		// second key.
		b = s.newBundle(t)
		g, err = core.New(&core.Config{Store: b.Store, Enqueuer: b.Enqueuer, Policies: Policies(), Secret: Secret,
			DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		finishInThePast(g, b, Claim(ctx, t, g, opts).Claim, true)
		other := &ClaimOpts{Key: opts.Key, Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("501")}}
		ended := Claim(ctx, t, g, other).Claim
		finishInThePast(g, b, ended, false)
		takeOver := Claim(ctx, t, g, opts)
		require.Equal(t, vocab.OutcomeAccepted, takeOver.Outcome)
		require.Equal(t, ended.ID, takeOver.Claim.ID, "the key was taken over")
		require.Equal(t, second.Claim.DownstreamKey, takeOver.Claim.DownstreamKey)
		require.Equal(t, second.Claim.DownstreamKey, takeOver.Claim.DownstreamKey)
	},

	"DownstreamKeysDifferAcrossIntents": func(t *testing.T, s *suite) {
		ctx := context.Background()
		base := Claim(ctx, t, s.gate, &ClaimOpts{Key: "intent-base-0001"}).Claim
		others := []*core.Claim{
			Claim(ctx, t, s.gate, &ClaimOpts{Tenant: "globex", Key: "intent-base-0001"}).Claim,
			Claim(ctx, t, s.gate, &ClaimOpts{Tool: "apply_credit", Key: "intent-base-0001",
				Args: map[string]any{"customer_id": "cus_1", "amount_cents": json.Number("500"), "currency": "usd"}}).Claim,
			Claim(ctx, t, s.gate, &ClaimOpts{Key: "intent-base-0002"}).Claim,
			// Another fingerprint under the same key, in another database (a
			// take-over's key is checked in the take-over case).
			Claim(ctx, t, s.newBundleGate(t), &ClaimOpts{Key: "intent-base-0001",
				Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("501")}}).Claim,
		}
		seen := map[string]bool{base.DownstreamKey: true}
		for i, c := range others {
			require.Equal(t, DownstreamKey(c, 0), c.DownstreamKey, "claim %d", i)
			require.False(t, seen[c.DownstreamKey], "claim %d shares a downstream key: %s", i, c.DownstreamKey)
			seen[c.DownstreamKey] = true
		}

		// Another deployment's secret, another key for the same intent.
		again := s.newBundle(t)
		g, err := core.New(&core.Config{Store: again.Store, Enqueuer: again.Enqueuer, Policies: Policies(),
			Secret: []byte("another deployment's secret, 32 bytes or more"), DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		other := Claim(ctx, t, g, &ClaimOpts{Key: "intent-base-0001"}).Claim
		require.NotEqual(t, base.DownstreamKey, other.DownstreamKey)
	},

	"NoSecretKeysFromTheOperationID": func(t *testing.T, s *suite) {
		ctx := context.Background()
		// A gate without a secret writes no intent key: the downstream key
		// is the operation id's, as every claim's was before migration 00012
		// (which such claims keep).
		plain, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: Policies(), DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		c := Claim(ctx, t, plain, &ClaimOpts{Key: "no-secret-key-001"}).Claim
		require.Equal(t, "idg_"+c.OperationID+"_0", c.DownstreamKey)
		redriven := failAndRedrive(ctx, t, s, c)
		require.Equal(t, "idg_"+c.OperationID+"_1", redriven.DownstreamKey)
	},

	"StoreWritesTheIntentKey": func(t *testing.T, s *suite) {
		ctx := context.Background()
		ik := core.NewIntentKeyer(Secret).Key("acme", "refund_order", "store-intent-0001", "hash-1")
		row := func(key, intentKey string, n int) *core.ClaimInsertParams {
			return &core.ClaimInsertParams{OperationID: uuid.NewString(), TenantID: "acme", Tool: "refund_order",
				IdempotencyKey: key, Args: json.RawMessage(`{}`), ArgsHash: fmt.Sprintf("hash-%d", n), IntentKey: intentKey,
				TTL: time.Hour, Retention: 2 * time.Hour, JobID: int64(2000 + n)}
		}
		one, err := s.Store.ClaimInsert(ctx, row("store-intent-0001", ik, 1))
		require.NoError(t, err)
		require.Equal(t, "idg_"+ik+"_0", one.DownstreamKey)
		none, err := s.Store.ClaimInsert(ctx, row("store-intent-0002", "", 2))
		require.NoError(t, err)
		require.Equal(t, "idg_"+none.OperationID+"_0", none.DownstreamKey)

		ik3 := core.NewIntentKeyer(Secret).Key("acme", "refund_order", "store-intent-0003", "hash-3")
		tx, err := s.Store.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		many, err := tx.ClaimInsertMany(ctx, []*core.ClaimInsertParams{row("store-intent-0003", ik3, 3), row("store-intent-0004", "", 4)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, "idg_"+ik3+"_0", many[0].DownstreamKey)
		require.Equal(t, "idg_"+many[1].OperationID+"_0", many[1].DownstreamKey)
		got, err := s.Store.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: "acme", OperationID: many[0].OperationID})
		require.NoError(t, err)
		require.Equal(t, many[0].DownstreamKey, got.DownstreamKey)
	},
}

// newBundleGate is a gate, with the suite's secret, on another fresh store.
func (s *suite) newBundleGate(t *testing.T) *core.Gate {
	t.Helper()
	b := s.newBundle(t)
	g, err := core.New(&core.Config{Store: b.Store, Enqueuer: b.Enqueuer, Policies: Policies(), Secret: Secret, DBTimeout: 30 * time.Second})
	require.NoError(t, err)
	return g
}

// failAndRedrive leases c, fails it as nothing happened, and re-drives it
// to its next generation.
func failAndRedrive(ctx context.Context, t *testing.T, s *suite, c *core.Claim) *core.Claim {
	t.Helper()
	leased := lease(ctx, t, s.Store, c, c.JobID, time.Minute)
	_, err := s.Store.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: vocab.CodeCardDeclined}})
	require.NoError(t, err)
	next, err := s.Store.ClaimRedrive(ctx, &core.ClaimRedriveParams{ID: c.ID, NextGeneration: true, JobID: c.JobID + 1000})
	require.NoError(t, err)
	return next
}
