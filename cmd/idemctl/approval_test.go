package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// awaitClaim claims a refund of tenant that awaits approval for window;
// its requester is support-bot.
func (b *opBundle) awaitClaim(t *testing.T, tenant, key string, window time.Duration) *core.Claim {
	t.Helper()
	c := coretest.Claim(t.Context(), t, b.ops.Gate, &coretest.ClaimOpts{Tenant: tenant, Key: key, ApprovalWindow: window}).Claim
	require.Equal(t, vocab.StatusAwaitingApproval, c.Status)
	return c
}

// token creates a token of acme for user with scopes through idemctl and
// returns its id.
func (b *opBundle) token(t *testing.T, user, scopes string) string {
	t.Helper()
	res := idemctl(t.Context(), t, b.dbURL, "token", "create", "--tenant", "acme", "--user", user, "--scopes", scopes)
	require.Equal(t, exitOK, res.code, res.stderr)
	id := regexp.MustCompile(`tok_[0-9a-f]{16}`).FindString(res.stderr)
	require.NotEmpty(t, id)
	return id
}

// deniedRows counts the denied audit rows of key.
func (b *opBundle) deniedRows(t *testing.T, key string) int {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1 AND decision = 'denied'`, key)
}

// decideArgs are the arguments of approval approve (or deny) of c by as.
func decideArgs(verb string, c *core.Claim, as, hash string, more ...string) []string {
	return append([]string{"approval", verb, "--tenant", c.TenantID, "--id", c.OperationID, "--as", as, "--args-hash", hash}, more...)
}

func TestApprovalList(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		first := b.awaitClaim(t, "acme", "appr-first-00001", time.Hour)
		second := b.awaitClaim(t, "acme", "appr-second-0001", 2*time.Hour)
		b.awaitClaim(t, "globex", "appr-other-00001", time.Hour)
		b.claim(t, "acme", "appr-queued-0001", vocab.StatusQueued, "")

		res := idemctl(ctx, t, b.dbURL, "approval", "list", "--tenant", "acme")
		require.Equal(t, exitOK, res.code, res.stderr)
		lines := jsonLines(t, res.stdout)
		require.Len(t, lines, 2)
		require.Equal(t, first.OperationID, lines[0]["operation_id"], "oldest first")
		require.Equal(t, second.OperationID, lines[1]["operation_id"])
		require.ElementsMatch(t, []string{"operation_id", "tool", "idempotency_key", "args", "args_hash", "requested_by",
			"requested_at", "approval_expires_at"}, keys(lines[0]))
		require.Equal(t, "refund_order", lines[0]["tool"])
		require.Equal(t, "appr-first-00001", lines[0]["idempotency_key"])
		require.Equal(t, map[string]any{"order_id": "ord_9f2", "amount_cents": float64(500)}, lines[0]["args"])
		require.Equal(t, first.ArgsHash, lines[0]["args_hash"])
		require.Equal(t, "support-bot", lines[0]["requested_by"])
		expires, err := time.Parse(time.RFC3339Nano, lines[0]["approval_expires_at"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(time.Hour), expires, time.Minute)

		res = idemctl(ctx, t, b.dbURL, "approval", "list", "--tenant", "acme", "--limit", "1")
		require.Equal(t, exitOK, res.code, res.stderr)
		lines = jsonLines(t, res.stdout)
		require.Len(t, lines, 1)
		require.Equal(t, first.OperationID, lines[0]["operation_id"], "the oldest")

		// Across pages: the oldest, oldest first.
		for _, tt := range []struct {
			limit int
			want  []string
		}{{1, []string{first.OperationID}}, {2, []string{first.OperationID, second.OperationID}}, {5, []string{first.OperationID, second.OperationID}}} {
			claims, err := listAwaiting(ctx, b.ops.Gate.Store(), "acme", tt.limit, 1)
			require.NoError(t, err)
			var got []string
			for _, c := range claims {
				got = append(got, c.OperationID)
			}
			require.Equal(t, tt.want, got, "limit %d", tt.limit)
		}

		res = idemctl(ctx, t, b.dbURL, "approval", "list", "--tenant", "initech")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Empty(t, res.stdout)
	})
}

func TestApprovalDecide(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		refund := b.awaitClaim(t, "acme", "appr-refund-0001", time.Hour)
		b.token(t, "finance-lead", "approvals:decide")
		b.token(t, "support-bot", "billing:refund,approvals:decide")
		b.token(t, "clerk", "billing:refund")
		revoked := b.token(t, "ex-lead", "approvals:decide")
		require.Equal(t, exitOK, idemctl(ctx, t, b.dbURL, "token", "revoke", revoked).code)
		expired := b.token(t, "old-lead", "approvals:decide")
		b.db.Exec(t, `UPDATE api_tokens SET expires_at = $1 WHERE id = $2`, b.db.Time(time.Now().Add(-time.Minute)), expired)

		// Refused, each with exit 3, a message naming the flag and a
		// denied audit row; the claim is unchanged.
		before := b.claimRow(t, refund.ID)
		for _, tt := range []struct {
			name string
			args []string
			want string
		}{
			{"Self", decideArgs("approve", refund, "support-bot", refund.ArgsHash), `--as: "support-bot" requested the operation`},
			{"OtherFingerprint", decideArgs("approve", refund, "finance-lead", "0123abcd"), "--args-hash: 0123abcd is not the fingerprint"},
			{"NoScope", decideArgs("approve", refund, "clerk", refund.ArgsHash), `--as: "clerk" holds no live token of tenant "acme" with scope approvals:decide`},
			{"RevokedToken", decideArgs("deny", refund, "ex-lead", refund.ArgsHash), `--as: "ex-lead" holds no live token`},
			{"ExpiredToken", decideArgs("approve", refund, "old-lead", refund.ArgsHash), `--as: "old-lead" holds no live token`},
			{"Stranger", decideArgs("approve", refund, "nobody", refund.ArgsHash), `--as: "nobody" holds no live token`},
		} {
			res := idemctl(ctx, t, b.dbURL, tt.args...)
			require.Equal(t, exitRefused, res.code, "%s: %s", tt.name, res.stderr)
			require.Contains(t, res.stderr, tt.want, tt.name)
			require.Empty(t, res.stdout, tt.name)
			require.Equal(t, before, b.claimRow(t, refund.ID), tt.name)
		}
		require.Equal(t, 6, b.deniedRows(t, refund.IdempotencyKey))

		// Approved by another person with the scope: queued, its job enqueued.
		res := idemctl(ctx, t, b.dbURL, decideArgs("approve", refund, "finance-lead", refund.ArgsHash, "--reason", "customer called")...)
		require.Equal(t, exitOK, res.code, res.stderr)
		var op map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
		require.Equal(t, refund.OperationID, op["operation_id"])
		require.Equal(t, "queued", op["status"])
		jobID, ok := op["job_id"].(float64)
		require.True(t, ok, "job_id set: %s", res.stdout)
		require.Equal(t, "available", b.jobState(t, int64(jobID)))

		// A second decision is refused and changes nothing.
		before = b.claimRow(t, refund.ID)
		res = idemctl(ctx, t, b.dbURL, decideArgs("approve", refund, "finance-lead", refund.ArgsHash)...)
		require.Equal(t, exitRefused, res.code, res.stderr)
		require.Contains(t, res.stderr, "--id: operation "+refund.OperationID+" is queued, not awaiting approval")
		require.Equal(t, before, b.claimRow(t, refund.ID))
		require.Equal(t, 7, b.deniedRows(t, refund.IdempotencyKey))

		requireApprovalTrail(t, b, refund)
		requireDeny(t, b)
		requireExpired(t, b)

		res = idemctl(ctx, t, b.dbURL, "approval", "approve", "--tenant", "acme", "--id", "00000000-0000-4000-8000-000000000001",
			"--as", "finance-lead", "--args-hash", refund.ArgsHash)
		require.Equal(t, exitFailure, res.code, res.stderr)
		require.Contains(t, res.stderr, `--id: no operation 00000000-0000-4000-8000-000000000001 in tenant "acme"`)
		res = idemctl(ctx, t, b.dbURL, "approval", "approve", "--tenant", "globex", "--id", refund.OperationID,
			"--as", "finance-lead", "--args-hash", refund.ArgsHash)
		require.Equal(t, exitFailure, res.code, "another tenant's operation is not found: %s", res.stderr)
	})
}

// opGet runs op get of c and decodes it.
func opGet(t *testing.T, b *opBundle, c *core.Claim) map[string]any {
	t.Helper()
	res := idemctl(t.Context(), t, b.dbURL, "op", "get", "--tenant", c.TenantID, "--tool", c.Tool, "--key", c.IdempotencyKey)
	require.Equal(t, exitOK, res.code, res.stderr)
	var op map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
	return op
}

// requireApprovalTrail checks op get's approval summary of the approved
// refund: who asked, who approved with their note, and the refusals.
func requireApprovalTrail(t *testing.T, b *opBundle, refund *core.Claim) {
	t.Helper()
	trail, ok := opGet(t, b, refund)["approval"].(map[string]any)
	require.True(t, ok, "op get has an approval object")
	require.Equal(t, "support-bot", trail["requested_by"])
	require.Equal(t, "approved", trail["decision"])
	require.Equal(t, "finance-lead", trail["decided_by"])
	require.Equal(t, "customer called", trail["reason"])
	require.NotEmpty(t, trail["requested_at"])
	require.NotEmpty(t, trail["decided_at"])
	require.NotContains(t, trail, "approval_expires_at", "decided")
	refused := trail["refused"].([]any)
	require.Len(t, refused, 7)
	self := refused[0].(map[string]any)
	require.Equal(t, "support-bot", self["by"])
	require.Contains(t, self["reason"], "approve refused: ")
	require.Contains(t, refused[2].(map[string]any)["reason"], "holds no live token")
	require.Equal(t, "finance-lead", refused[6].(map[string]any)["by"], "the second approval")

	// An operation that never awaited approval has none.
	plain := b.claim(t, "acme", "appr-plain-00001", vocab.StatusQueued, "")
	require.NotContains(t, opGet(t, b, plain), "approval")
}

// requireDeny denies a waiting refund: failed approval_denied, in op get's
// summary with the note; a waiting one shows its window.
func requireDeny(t *testing.T, b *opBundle) {
	t.Helper()
	c := b.awaitClaim(t, "acme", "appr-deny-000001", time.Hour)
	trail := opGet(t, b, c)["approval"].(map[string]any)
	require.Equal(t, "support-bot", trail["requested_by"])
	require.NotEmpty(t, trail["approval_expires_at"], "still waiting")
	require.NotContains(t, trail, "decision")

	res := idemctl(t.Context(), t, b.dbURL, decideArgs("deny", c, "finance-lead", c.ArgsHash, "--reason", "too large")...)
	require.Equal(t, exitOK, res.code, res.stderr)
	var op map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
	require.Equal(t, "failed", op["status"])
	require.Equal(t, "approval_denied", op["error"].(map[string]any)["code"])
	require.NotContains(t, op, "job_id")

	trail = opGet(t, b, c)["approval"].(map[string]any)
	require.Equal(t, "denied", trail["decision"])
	require.Equal(t, "finance-lead", trail["decided_by"])
	require.Equal(t, "too large", trail["reason"])
	require.NotContains(t, trail, "refused")
}

// requireExpired: a decision after the window is refused; once the reaper
// expires it, op get says expired.
func requireExpired(t *testing.T, b *opBundle) {
	t.Helper()
	ctx := context.Background()
	c := b.awaitClaim(t, "acme", "appr-late-000001", time.Hour)
	b.setClaimTime(t, "approval_expires_at", c.ID, time.Now().Add(-time.Minute))
	res := idemctl(t.Context(), t, b.dbURL, decideArgs("approve", c, "finance-lead", c.ArgsHash)...)
	require.Equal(t, exitRefused, res.code, res.stderr)
	require.Contains(t, res.stderr, "--id: the approval window of operation "+c.OperationID+" has ended")

	n, err := b.ops.Gate.ExpireApprovals(ctx, &core.ExpireApprovalsParams{})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	trail := opGet(t, b, c)["approval"].(map[string]any)
	require.Equal(t, "expired", trail["decision"])
	require.Equal(t, core.WorkerUser, trail["decided_by"])
	require.Len(t, trail["refused"], 1)
}

func TestApprovalUsage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	id := "00000000-0000-4000-8000-000000000001"
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"ListNoTenant", []string{"approval", "list"}, "--tenant is required"},
		{"ListBadLimit", []string{"approval", "list", "--tenant", "acme", "--limit", "0"}, "--limit:"},
		{"NoTenant", []string{"approval", "approve", "--id", id, "--as", "u", "--args-hash", "h"}, "--tenant is required"},
		{"NoID", []string{"approval", "approve", "--tenant", "acme", "--as", "u", "--args-hash", "h"}, "--id is required"},
		{"NoAs", []string{"approval", "deny", "--tenant", "acme", "--id", id, "--args-hash", "h"}, "--as is required"},
		{"NoArgsHash", []string{"approval", "approve", "--tenant", "acme", "--id", id, "--as", "u"}, "--args-hash is required"},
		{"BadID", []string{"approval", "approve", "--tenant", "acme", "--id", "op-1", "--as", "u", "--args-hash", "h"}, `--id: "op-1" is not an operation id`},
		{"BadAs", []string{"approval", "approve", "--tenant", "acme", "--id", id, "--as", " a", "--args-hash", "h"}, "--as:"},
		{"BadTenant", []string{"approval", "deny", "--tenant", " a", "--id", id, "--as", "u", "--args-hash", "h"}, "--tenant:"},
		{"MultilineReason", []string{"approval", "deny", "--tenant", "acme", "--id", id, "--as", "u", "--args-hash", "h", "--reason", "a\nb"}, "--reason:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Usage errors come before the database is opened.
			res := idemctl(ctx, t, "postgres://127.0.0.1:1/nowhere", tt.args...)
			require.Equal(t, exitUsage, res.code, res.stderr)
			require.Contains(t, res.stderr, tt.wantErr)
			require.Empty(t, res.stdout)
		})
	}
}
