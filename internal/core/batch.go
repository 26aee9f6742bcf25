package core

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/groups"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Group commit: the new claims of concurrent calls are written together,
// one transaction for many calls (their jobs in one River InsertManyTx,
// the claims and their accepted audit rows in one statement, one commit).
// A call joins the next group while the one before it commits; nobody
// waits for a group to fill. Each call gets its own outcome: a row whose
// key was taken meanwhile (or earlier in the same group, or refused by a
// tombstone) has its job deleted in the same transaction, and its call
// claims on its own, as does every call of a group whose transaction
// failed, so that no call ever fails by another's row.

// DefaultMaxClaimBatch is the default Config.MaxClaimBatch.
const DefaultMaxClaimBatch = 64

// claimGroups is how many group transactions run at once: one commits
// while the next forms and writes.
const claimGroups = 2

// claimReq is one call waiting for its group.
type claimReq struct {
	ctx       context.Context
	params    *ClaimParams
	policy    *Policy
	auditArgs json.RawMessage
	start     time.Time
	// done is closed when the group has ended; claim is then the call's
	// new claim, or nil: the call claims on its own.
	done  chan struct{}
	claim *Claim
}

// batcher groups the new claims of concurrent calls.
type batcher struct {
	g      *Gate
	enq    BatchEnqueuer
	groups groups.Queue[*claimReq]
}

func newBatcher(g *Gate, enq BatchEnqueuer, max int) *batcher {
	b := &batcher{g: g, enq: enq}
	b.groups = groups.Queue[*claimReq]{Max: max, Runners: claimGroups, Do: b.commit}
	return b
}

// claim writes the call's new claim in the next group and returns it, or
// nil when the call must claim on its own. It fails only when ctx ends.
func (b *batcher) claim(ctx context.Context, params *ClaimParams, policy *Policy, auditArgs json.RawMessage, start time.Time) (*Claim, error) {
	req := &claimReq{ctx: ctx, params: params, policy: policy, auditArgs: auditArgs, start: start, done: make(chan struct{})}
	b.groups.Add(req)
	select {
	case <-req.done:
		return req.claim, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", vocab.ErrUnavailable, ctx.Err())
	}
}

// commit writes the group's claims in one transaction and sets the claim
// of each call whose row was written, then wakes the group's calls. On any
// error nothing is kept and every call claims on its own.
func (b *batcher) commit(group []*claimReq) {
	defer func() {
		for _, r := range group {
			close(r.done)
		}
	}()
	live := group[:0:0]
	for _, r := range group {
		if r.ctx.Err() == nil { // a call that has gone is not claimed for
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	// The same order everywhere: two groups that share keys lock them in
	// one order, and cannot deadlock.
	slices.SortFunc(live, func(x, y *claimReq) int {
		return cmp.Or(cmp.Compare(x.params.Actor.TenantID, y.params.Actor.TenantID),
			cmp.Compare(x.params.Intent.Tool, y.params.Intent.Tool), cmp.Compare(x.params.Intent.Key, y.params.Intent.Key))
	})
	claims, err := b.write(live)
	if err != nil {
		b.g.logger.Warn("gate: a group of new claims failed; each of its calls claims on its own",
			"calls", len(live), "error", err)
		return
	}
	for i, r := range live {
		if r.claim = claims[i]; r.claim != nil {
			b.g.observe(EventInsert)
		}
	}
}

// write runs the group's transaction: jobs, claims with their audit rows,
// the jobs of rows not written deleted, commit.
func (b *batcher) write(group []*claimReq) ([]*Claim, error) {
	// No call's cancellation ends the group's transaction. Its spans (River's
	// insert) hang under the first call's trace, which is not sampled
	// (sampled calls claim on their own), so that a sampler that follows
	// the parent records no orphan trace per group.
	parent := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(group[0].ctx))
	ctx, cancel := context.WithTimeout(parent, b.g.timeout)
	defer cancel()
	tx, err := b.g.store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	refs := make([]*Claim, len(group))
	for i, r := range group {
		refs[i] = &Claim{OperationID: newOperationID(), TenantID: r.params.Actor.TenantID,
			Tool: r.params.Intent.Tool, IdempotencyKey: r.params.Intent.Key}
	}
	jobIDs, err := b.enq.JobInsertMany(ctx, tx, refs)
	if err != nil {
		return nil, fmt.Errorf("gate: insert jobs: %w", err)
	}
	rows := make([]*ClaimInsertParams, len(group))
	for i, r := range group {
		in := r.params.Intent
		ev := callAudit(r.ctx, r.params, r.auditArgs, r.start, vocab.DecisionAccepted, "")
		ev.OperationID, ev.JobID = refs[i].OperationID, jobIDs[i]
		rows[i] = &ClaimInsertParams{
			OperationID: refs[i].OperationID, TenantID: r.params.Actor.TenantID, Tool: in.Tool, IdempotencyKey: in.Key,
			UserID: r.params.Actor.UserID, Args: in.Canonical, ArgsHash: in.ArgsHash,
			IntentKey: b.g.intentKey(r.params), TTL: r.policy.TTL, Retention: r.policy.retention(), JobID: jobIDs[i], Audit: ev,
			DuplicateWindow: r.policy.DuplicateWindow, ConfirmDuplicateOf: in.ConfirmDuplicateOf,
		}
		if in.ConfirmDuplicateOf != "" {
			ev.Reason = "confirmed as a new intent beside operation " + in.ConfirmDuplicateOf
		}
	}
	claims, err := tx.ClaimInsertMany(ctx, rows)
	if err != nil {
		return nil, err
	}
	if len(claims) != len(rows) {
		return nil, fmt.Errorf("gate: %d claims for %d rows", len(claims), len(rows))
	}
	var orphans []int64
	var unguarded []string
	for i, c := range claims {
		if c == nil {
			orphans = append(orphans, jobIDs[i])
			if rows[i].DuplicateWindow > 0 {
				unguarded = append(unguarded, rows[i].OperationID)
			}
		}
	}
	if len(unguarded) > 0 {
		// A row whose guard was upserted but whose key was taken
		// meanwhile: its guard would name an operation that never was.
		if err := tx.FingerprintGuardDelete(ctx, unguarded); err != nil {
			return nil, err
		}
	}
	if len(orphans) > 0 {
		if err := b.enq.JobDeleteMany(ctx, tx, orphans); err != nil {
			return nil, fmt.Errorf("gate: delete the jobs of claims not written: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return claims, nil
}
