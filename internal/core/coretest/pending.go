package coretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

var pendingTests = map[string]func(t *testing.T, s *suite){
	// The red-team finding: a burst of calls above the approval threshold
	// filled the approvers' queue without bound. Concurrent calls that
	// would wait never leave more than the cap waiting; the rest are
	// refused with approvals_pending_limit, nothing claimed, one denied
	// audit row each.
	"ApprovalsPendingCappedPerTenant": func(t *testing.T, s *suite) {
		ctx := context.Background()
		const maxPending, calls = 5, 40
		g, err := core.New(&core.Config{Store: s.Store, Enqueuer: s.Enqueuer, Policies: Policies(), Secret: Secret,
			DBTimeout: 30 * time.Second, MaxPendingApprovals: maxPending})
		require.NoError(t, err)
		claims := s.ClaimCount(ctx)

		type result struct {
			key string
			res *core.ClaimResult
			err error
		}
		results := make([]result, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				key := fmt.Sprintf("pending-cap-%03d", i)
				res, err := claim(ctx, g, &ClaimOpts{Key: key, ApprovalWindow: time.Hour})
				results[i] = result{key: key, res: res, err: err}
			})
		}
		wg.Wait()
		var waiting []*core.Claim
		var refused []string
		for _, r := range results {
			var derr *vocab.Error
			switch {
			case r.err == nil:
				require.Equal(t, vocab.StatusAwaitingApproval, r.res.Claim.Status, r.key)
				waiting = append(waiting, r.res.Claim)
			case errors.As(r.err, &derr) && derr.Code == vocab.CodeApprovalsPendingLimit:
				require.Contains(t, derr.Message, fmt.Sprintf("%d calls of this tenant already await", maxPending), r.key)
				require.Contains(t, derr.Message, fmt.Sprintf("the most allowed (%d)", maxPending), r.key)
				refused = append(refused, r.key)
			default:
				t.Fatalf("%s: %v", r.key, r.err)
			}
		}
		require.Len(t, waiting, maxPending, "never more than the cap waiting")
		require.Len(t, refused, calls-maxPending)
		require.Equal(t, claims+maxPending, s.ClaimCount(ctx), "a refused call claims nothing")
		n, err := s.Store.ApprovalPendingCount(ctx, &core.ApprovalPendingCountParams{TenantID: "acme"})
		require.NoError(t, err)
		require.Equal(t, maxPending, n)
		events := audit(ctx, t, s.Store, "acme", "refund_order", refused[0])
		require.Equal(t, []vocab.Decision{vocab.DecisionDenied}, decisions(events))
		require.Contains(t, events[0].Reason, string(vocab.CodeApprovalsPendingLimit))

		// A call that needs no approval, and another tenant's, are not
		// capped; a retry of a waiting call answers it.
		plain := Claim(ctx, t, g, &ClaimOpts{Key: "pending-cap-plain"})
		require.Equal(t, vocab.StatusQueued, plain.Claim.Status)
		other := Claim(ctx, t, g, &ClaimOpts{Tenant: "globex", Key: "pending-cap-globex", ApprovalWindow: time.Hour})
		require.Equal(t, vocab.StatusAwaitingApproval, other.Claim.Status)
		retry := Claim(ctx, t, g, &ClaimOpts{Key: waiting[0].IdempotencyKey, ApprovalWindow: time.Hour})
		require.Equal(t, vocab.OutcomeInFlight, retry.Outcome)

		// A decision makes room: the refused call's retry now waits.
		_, err = s.Store.ClaimDecline(ctx, &core.ClaimDeclineParams{ID: waiting[0].ID,
			Error: vocab.ErrorInfo{Code: vocab.CodeApprovalDenied, Message: "no"}})
		require.NoError(t, err)
		again := Claim(ctx, t, g, &ClaimOpts{Key: refused[0], ApprovalWindow: time.Hour})
		require.Equal(t, vocab.StatusAwaitingApproval, again.Claim.Status)
		_, err = claim(ctx, g, &ClaimOpts{Key: refused[1], ApprovalWindow: time.Hour})
		require.Equal(t, vocab.CodeApprovalsPendingLimit, vocab.CodeOf(err))

		// Claims whose window ended no longer count.
		n, err = s.Store.ApprovalPendingCount(ctx, &core.ApprovalPendingCountParams{TenantID: "acme", Now: ptr(time.Now().Add(2 * time.Hour))})
		require.NoError(t, err)
		require.Zero(t, n)
	},
}
