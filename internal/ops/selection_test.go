package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"

	"github.com/stretchr/testify/require"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/vocab"
)

// selectionBundle is a fresh database on one engine with the operators'
// parts on it, as idemctl assembles them.
type selectionBundle struct {
	db  *enginetest.DB
	ops *idemgateapp.Ops
}

func setupSelection(t *testing.T, engine string) *selectionBundle {
	t.Helper()
	d := enginetest.New(t, engine, nil)
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // the same refund claimed under many keys, on purpose
	cfg.DatabaseURL = d.URL
	var o *idemgateapp.Ops
	var err error
	if d.Pool != nil {
		o, err = idemgateapp.NewOps(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil)
	} else {
		o, err = idemgateapp.NewOps(cfg, sqliteengine.NewDriver(d.SQL), nil)
	}
	require.NoError(t, err)
	return &selectionBundle{db: d, ops: o}
}

// claim makes a refund claim with its job, succeeded or failed with code
// (its job cancelled, as the worker does).
func (b *selectionBundle) claim(t *testing.T, key string, code vocab.Code) *core.Claim {
	t.Helper()
	ctx := context.Background()
	c := coretest.Claim(ctx, t, b.ops.Gate, &coretest.ClaimOpts{Key: key}).Claim
	s := b.ops.Gate.Store()
	c, err := s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	if code == "" {
		c, err = s.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{"refund_id":"re_1"}`)})
		require.NoError(t, err)
		return c
	}
	failed, err := s.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: vocab.ErrorInfo{Code: code, Message: string(code)}})
	require.NoError(t, err)
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.ops.Jobs.JobCancelTx(ctx, tx, c.JobID))
	require.NoError(t, tx.Commit(ctx))
	return failed
}

// redrive runs RedriveSelection and collects the lines it emitted.
func (b *selectionBundle) redrive(t *testing.T, p *ops.RedriveSelectionParams) ([]*ops.RedriveLine, *ops.RedriveSelectionResult, error) {
	t.Helper()
	var lines []*ops.RedriveLine
	res, err := b.ops.Redriver.RedriveSelection(t.Context(), p, func(l *ops.RedriveLine) error {
		lines = append(lines, l)
		return nil
	})
	return lines, res, err
}

func TestRedriveSelection(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupSelection(t, engine)
		declined := b.claim(t, "sel-declined-001", vocab.CodeCardDeclined)
		unknown := b.claim(t, "sel-unknown-0001", vocab.CodeOutcomeUnknown)
		succeeded := b.claim(t, "sel-succeeded-01", "")
		one := func(key string, dryRun bool) *ops.RedriveSelectionParams {
			return &ops.RedriveSelectionParams{TenantID: "acme", Tool: "refund_order", Key: key,
				Operator: "alice", Reason: "card fixed", DryRun: dryRun}
		}

		t.Run("DryRunChangesNothing", func(t *testing.T) {
			lines, res, err := b.redrive(t, one(declined.IdempotencyKey, true))
			require.NoError(t, err)
			require.Len(t, lines, 1)
			require.Same(t, lines[0], res.Line)
			require.Nil(t, res.Set)
			require.Equal(t, ops.ActionWouldRedrive, res.Line.Action)
			require.Equal(t, vocab.StatusFailed, res.Line.Status)
			require.True(t, res.Line.NextGeneration, "card declined: nothing happened")
			c, err := b.ops.Gate.Store().ClaimGetByKey(t.Context(), &core.ClaimGetByKeyParams{
				TenantID: "acme", Tool: "refund_order", IdempotencyKey: declined.IdempotencyKey})
			require.NoError(t, err)
			require.Equal(t, vocab.StatusFailed, c.Status)
		})

		t.Run("RefusedIsEmittedAndNamed", func(t *testing.T) {
			lines, res, err := b.redrive(t, one(succeeded.IdempotencyKey, false))
			require.True(t, ops.Refused(err), "%v", err)
			require.ErrorIs(t, err, core.ErrRedriveSucceeded)
			require.ErrorContains(t, err, "refund_order/sel-succeeded-01 is succeeded: ")
			require.Len(t, lines, 1)
			require.Equal(t, ops.ActionRefused, res.Line.Action)
		})

		t.Run("UnknownEmitsNothing", func(t *testing.T) {
			lines, _, err := b.redrive(t, one("sel-no-such-key", false))
			require.ErrorIs(t, err, vocab.ErrNotFound)
			require.Empty(t, lines)
		})

		// The set: the two failed ones, newest first; the succeeded one is
		// not in it. Then the window holds nothing failed.
		limit := 5
		set := &ops.RedriveSelectionParams{TenantID: "acme", Tool: "refund_order", Status: vocab.StatusFailed,
			Since: time.Now().Add(-time.Hour), Limit: &limit, Operator: "bob", Reason: "stripe outage over"}
		lines, res, err := b.redrive(t, set)
		require.NoError(t, err)
		require.Nil(t, res.Line)
		require.Equal(t, &ops.RedriveSetResult{Matched: 2, Redriven: 2}, res.Set)
		require.Len(t, lines, 2)
		keys := []string{lines[0].Key, lines[1].Key}
		require.ElementsMatch(t, []string{declined.IdempotencyKey, unknown.IdempotencyKey}, keys)
		for _, l := range lines {
			require.Equal(t, ops.ActionRedriven, l.Action)
			require.Equal(t, vocab.StatusQueued, l.Status)
		}
		lines, res, err = b.redrive(t, set)
		require.NoError(t, err)
		require.Empty(t, lines)
		require.Equal(t, &ops.RedriveSetResult{}, res.Set)
	})
}

// TestRedriveNotApproved: an operation denied by an approver, or whose
// approval window ended, is refused as final (a refused line, Refused),
// and a set re-drive counts it refused and goes on; one awaiting approval
// is refused as not failed.
func TestRedriveNotApproved(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupSelection(t, engine)
		ctx := t.Context()
		g := b.ops.Gate
		await := func(key string) *core.Claim {
			t.Helper()
			res := coretest.Claim(ctx, t, g, &coretest.ClaimOpts{Key: key, ApprovalWindow: time.Hour})
			require.Equal(t, vocab.StatusAwaitingApproval, res.Claim.Status)
			return res.Claim
		}
		expired := await("sel-expired-0001")
		later := time.Now().Add(2 * time.Hour)
		n, err := g.ExpireApprovals(ctx, &core.ExpireApprovalsParams{Now: &later})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		denied := await("sel-denied-00001")
		_, err = g.Deny(ctx, &core.DecideParams{Approver: vocab.Actor{TenantID: "acme", UserID: "finance-lead"},
			OperationID: denied.OperationID, ArgsHash: denied.ArgsHash})
		require.NoError(t, err)
		waiting := await("sel-waiting-0001")
		declined := b.claim(t, "sel-declined-002", vocab.CodeCardDeclined)
		one := func(key string) *ops.RedriveSelectionParams {
			return &ops.RedriveSelectionParams{TenantID: "acme", Tool: "refund_order", Key: key, Operator: "alice", Reason: "r"}
		}

		for _, c := range []*core.Claim{denied, expired} {
			lines, res, err := b.redrive(t, one(c.IdempotencyKey))
			require.True(t, ops.Refused(err), "%s: %v", c.IdempotencyKey, err)
			require.ErrorIs(t, err, core.ErrRedriveApproval)
			require.Len(t, lines, 1)
			require.Equal(t, ops.ActionRefused, res.Line.Action)
			require.Equal(t, vocab.StatusFailed, res.Line.Status)
		}
		lines, res, err := b.redrive(t, one(waiting.IdempotencyKey))
		require.True(t, ops.Refused(err), "%v", err)
		require.ErrorIs(t, err, core.ErrRedriveNotFailed)
		require.Len(t, lines, 1)
		require.Equal(t, vocab.StatusAwaitingApproval, res.Line.Status)

		limit := 10
		lines, res, err = b.redrive(t, &ops.RedriveSelectionParams{TenantID: "acme", Tool: "refund_order",
			Status: vocab.StatusFailed, Since: time.Now().Add(-time.Hour), Limit: &limit, Operator: "bob", Reason: "r"})
		require.NoError(t, err)
		require.Equal(t, &ops.RedriveSetResult{Matched: 3, Redriven: 1, Refused: 2}, res.Set)
		require.Len(t, lines, 3)
		for _, l := range lines {
			want := ops.ActionRefused
			if l.Key == declined.IdempotencyKey {
				want = ops.ActionRedriven
			}
			require.Equal(t, want, l.Action, l.Key)
		}
	})
}

func TestRedriveSelectionValidate(t *testing.T) {
	t.Parallel()
	zero, many, five := 0, ops.MaxRedriveLimit+1, 5
	since := time.Now().Add(-time.Hour)
	for _, tt := range []struct {
		name    string
		change  func(p *ops.RedriveSelectionParams)
		wantErr error
		param   string
	}{
		{name: "Key"},
		{name: "Set", change: func(p *ops.RedriveSelectionParams) {
			p.Key, p.Status, p.Since, p.Limit = "", vocab.StatusFailed, since, &five
		}},
		{name: "NoTenant", change: func(p *ops.RedriveSelectionParams) { p.TenantID = "" }, param: "tenant"},
		{name: "NoReason", change: func(p *ops.RedriveSelectionParams) { p.Reason = "" }, param: "reason"},
		{name: "BadOperator", change: func(p *ops.RedriveSelectionParams) { p.Operator = "a\nb" }, param: "operator"},
		{name: "KeyAndSet", change: func(p *ops.RedriveSelectionParams) { p.Status = vocab.StatusFailed }, wantErr: ops.ErrSelectionKeyAndSet},
		{name: "Neither", change: func(p *ops.RedriveSelectionParams) { p.Key = "" }, wantErr: ops.ErrSelectionEmpty},
		{name: "SucceededSet", change: func(p *ops.RedriveSelectionParams) {
			p.Key, p.Status, p.Since = "", vocab.StatusSucceeded, since
		}, wantErr: ops.ErrSelectionNotFailed},
		{name: "SetNoSince", change: func(p *ops.RedriveSelectionParams) { p.Key, p.Status = "", vocab.StatusFailed }, wantErr: ops.ErrSelectionNoSince},
		{name: "LimitWithKey", change: func(p *ops.RedriveSelectionParams) { p.Limit = &five }, wantErr: ops.ErrSelectionLimitWithKey},
		{name: "ZeroLimit", change: func(p *ops.RedriveSelectionParams) {
			p.Key, p.Status, p.Since, p.Limit = "", vocab.StatusFailed, since, &zero
		}, param: "limit"},
		{name: "LimitTooLarge", change: func(p *ops.RedriveSelectionParams) {
			p.Key, p.Status, p.Since, p.Limit = "", vocab.StatusFailed, since, &many
		}, param: "limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &ops.RedriveSelectionParams{TenantID: "acme", Tool: "refund_order", Key: "k", Operator: "alice", Reason: "r"}
			if tt.change != nil {
				tt.change(p)
			}
			err := p.Validate()
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
			case tt.param != "":
				var pe *ops.ParamError
				require.True(t, errors.As(err, &pe), "%v", err)
				require.Equal(t, tt.param, pe.Param)
			default:
				require.NoError(t, err)
			}
		})
	}
}
