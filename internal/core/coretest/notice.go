package coretest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// noticer is the suite's enqueuer that is also a core.ApprovalNoticer: for
// a claim awaiting approval it inserts one more job in the gate's
// transaction (visible in JobCount only if that commits) and records the
// claim. It keeps the suite's group commit (a BatchEnqueuer).
type noticer struct {
	core.BatchEnqueuer
	mu   sync.Mutex
	told []*core.Claim
	fail error
}

// ApprovalNoticeInsert implements core.ApprovalNoticer.
func (n *noticer) ApprovalNoticeInsert(ctx context.Context, tx core.Tx, c *core.Claim) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return n.fail
	}
	if _, err := n.JobInsert(ctx, tx, c); err != nil {
		return err
	}
	n.told = append(n.told, c)
	return nil
}

// claims returns the claims told of so far.
func (n *noticer) claims() []*core.Claim {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*core.Claim(nil), n.told...)
}

var noticeTests = map[string]func(t *testing.T, s *suite){
	"ApprovalNoticeInTheClaimingTransaction": func(t *testing.T, s *suite) {
		ctx := context.Background()
		enq, ok := s.Enqueuer.(core.BatchEnqueuer)
		require.True(t, ok, "the suite's enqueuer groups commits")
		n := &noticer{BatchEnqueuer: enq}
		g, err := core.New(&core.Config{Store: s.Store, Enqueuer: n, Policies: Policies(), Secret: Secret, DBTimeout: 30 * time.Second})
		require.NoError(t, err)
		jobs := s.JobCount(ctx)

		// A claim that needs no approval notices nobody (group commit or not).
		plain := Claim(ctx, t, g, &ClaimOpts{Key: "notice-plain-001"})
		require.Equal(t, vocab.StatusQueued, plain.Claim.Status)
		require.Empty(t, n.claims())
		require.Equal(t, jobs+1, s.JobCount(ctx))

		// A claim awaiting approval: one notice, committed with it.
		c := Claim(ctx, t, g, &ClaimOpts{Key: "notice-await-001", ApprovalWindow: time.Hour})
		require.Equal(t, vocab.StatusAwaitingApproval, c.Claim.Status)
		told := n.claims()
		require.Len(t, told, 1)
		require.Equal(t, c.Claim.OperationID, told[0].OperationID)
		require.Equal(t, vocab.StatusAwaitingApproval, told[0].Status)
		require.NotNil(t, told[0].ApprovalExpiresAt)
		require.Equal(t, c.Claim.ArgsHash, told[0].ArgsHash)
		require.JSONEq(t, string(c.Claim.Args), string(told[0].Args))
		require.Equal(t, jobs+2, s.JobCount(ctx), "the notice's job, and no claim job")

		// Retries of the same intent answer the waiting claim: no notice.
		for range 3 {
			retry := Claim(ctx, t, g, &ClaimOpts{Key: "notice-await-001", ApprovalWindow: time.Hour})
			require.Equal(t, vocab.OutcomeInFlight, retry.Outcome)
		}
		require.Len(t, n.claims(), 1)
		require.Equal(t, jobs+2, s.JobCount(ctx))

		// A notice that cannot be inserted fails the call: no claim, no job.
		claims := s.ClaimCount(ctx)
		n.mu.Lock()
		n.fail = errors.New("gatetest: notice refused")
		n.mu.Unlock()
		_, err = claim(ctx, g, &ClaimOpts{Key: "notice-fail-0001", ApprovalWindow: time.Hour})
		require.ErrorContains(t, err, "notice refused")
		require.Equal(t, claims, s.ClaimCount(ctx), "the claim rolled back with its notice")
		require.Equal(t, jobs+2, s.JobCount(ctx))
		n.mu.Lock()
		n.fail = nil
		n.mu.Unlock()

		// A waiting take-over of an ended claim: one notice, for the new
		// operation.
		first := Claim(ctx, t, g, &ClaimOpts{Key: "notice-takeover1"})
		leased := lease(ctx, t, s.Store, first.Claim, first.Claim.JobID, time.Minute)
		_, err = s.Store.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{}`),
			Now: ptr(time.Now().Add(-2 * moneyTTL))})
		require.NoError(t, err)
		jobs = s.JobCount(ctx)
		to := Claim(ctx, t, g, &ClaimOpts{Key: "notice-takeover1", ApprovalWindow: time.Hour,
			Args: map[string]any{"order_id": "ord_9f2", "amount_cents": json.Number("900")}})
		require.Equal(t, vocab.StatusAwaitingApproval, to.Claim.Status)
		require.Equal(t, first.Claim.ID, to.Claim.ID, "taken over")
		told = n.claims()
		require.Len(t, told, 2)
		require.Equal(t, to.Claim.OperationID, told[1].OperationID)
		require.Equal(t, vocab.StatusAwaitingApproval, told[1].Status)
		require.Equal(t, jobs+1, s.JobCount(ctx))
	},
}
