package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	idemgateapp "github.com/idemgate/idemgate/app"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
	"github.com/idemgate/idemgate/internal/pgtest"
)

type opBundle struct {
	dbURL string
	pool  *pgxpool.Pool
	ops   *idemgateapp.Ops
}

func setupOp(t *testing.T) *opBundle {
	t.Helper()
	dbURL, pool := pgtest.NewDB(t)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	o, err := idemgateapp.NewOps(cfg, pool, nil)
	require.NoError(t, err)
	return &opBundle{dbURL: dbURL, pool: pool, ops: o}
}

// claim makes a claim through the gate (with its River job) and brings it
// to status: queued, running, succeeded, or failed with code (its job
// cancelled, as the worker does).
func (b *opBundle) claim(t *testing.T, tenant, key string, status domain.Status, code domain.Code) *gate.Claim {
	t.Helper()
	ctx := context.Background()
	c := gatetest.Claim(ctx, t, b.ops.Gate, &gatetest.ClaimOpts{Tenant: tenant, Key: key}).Claim
	if status == domain.StatusQueued {
		return c
	}
	s := b.ops.Gate.Store()
	leased, err := s.ClaimLease(ctx, &gate.ClaimLeaseParams{ID: c.ID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	switch status {
	case domain.StatusRunning:
		return leased
	case domain.StatusSucceeded:
		done, err := s.ClaimComplete(ctx, &gate.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_1"}`)})
		require.NoError(t, err)
		return done
	}
	failed, err := s.ClaimFail(ctx, &gate.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: domain.ErrorInfo{Code: code, Message: string(code)}})
	require.NoError(t, err)
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.ops.Jobs.JobCancelTx(ctx, tx, c.JobID))
	require.NoError(t, tx.Commit(ctx))
	return failed
}

// claimRow is a claim's whole row, for before/after comparisons.
func claimRow(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var row string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT row_to_json(c)::text FROM idempotency_claims c WHERE id = $1`, id).Scan(&row))
	return row
}

func jobState(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var state string
	err := pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&state)
	if err != nil {
		return ""
	}
	return state
}

func TestOpGetAndList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t)
	failed := b.claim(t, "acme", "op-failed-00001", domain.StatusFailed, domain.CodeCardDeclined)
	succeeded := b.claim(t, "acme", "op-succeeded-01", domain.StatusSucceeded, "")
	b.claim(t, "acme", "op-queued-00001", domain.StatusQueued, "")
	b.claim(t, "globex", "op-failed-00001", domain.StatusFailed, domain.CodeOutcomeUnknown)

	res := idemctl(ctx, t, b.dbURL, "op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "op-failed-00001")
	require.Equal(t, exitOK, res.code, res.stderr)
	var op map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
	require.Equal(t, failed.OperationID, op["operation_id"])
	require.Equal(t, "acme", op["tenant_id"])
	require.Equal(t, "refund_order", op["tool"])
	require.Equal(t, "op-failed-00001", op["idempotency_key"])
	require.Equal(t, "failed", op["status"])
	require.Equal(t, float64(0), op["generation"])
	require.Equal(t, "idg_"+failed.OperationID+"_0", op["downstream_key"])
	require.Equal(t, float64(1), op["epoch"])
	require.Equal(t, float64(failed.JobID), op["job_id"])
	require.Equal(t, map[string]any{"code": "card_declined", "message": "card_declined"}, op["error"])
	require.Contains(t, op, "last_error")
	audit := op["audit"].([]any)
	require.NotEmpty(t, audit)
	first := audit[0].(map[string]any)
	require.Equal(t, "accepted", first["decision"])
	require.Equal(t, "support-bot", first["user_id"])
	require.Equal(t, failed.OperationID, first["operation_id"])

	res = idemctl(ctx, t, b.dbURL, "op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "no-such-key-001")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `no operation refund_order/no-such-key-001 in tenant "acme"`)
	require.Empty(t, res.stdout)

	// list: the tenant's operations, newest first, filtered.
	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 3)
	require.Equal(t, "op-queued-00001", lines[0]["idempotency_key"])
	for _, l := range lines {
		require.Equal(t, "acme", l["tenant_id"])
		require.NotContains(t, l, "audit")
	}

	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--status", "failed", "--tool", "refund_order", "--since", "1h")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Len(t, lines, 1)
	require.Equal(t, failed.OperationID, lines[0]["operation_id"])

	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--status", "succeeded", "--since", time.Now().Add(-time.Hour).Format(time.RFC3339))
	require.Equal(t, exitOK, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Len(t, lines, 1)
	require.Equal(t, succeeded.OperationID, lines[0]["operation_id"])

	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--limit", "2")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Len(t, jsonLines(t, res.stdout), 2)

	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--tool", "apply_credit")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stdout)
}

func TestOpRedriveOne(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t)
	declined := b.claim(t, "acme", "op-declined-0001", domain.StatusFailed, domain.CodeCardDeclined)
	succeeded := b.claim(t, "acme", "op-succeeded-01", domain.StatusSucceeded, "")
	queued := b.claim(t, "acme", "op-queued-00001", domain.StatusQueued, "")
	require.Equal(t, "cancelled", jobState(t, b.pool, declined.JobID))

	// --dry-run: says what it would do and changes nothing.
	before := claimRow(t, b.pool, declined.ID)
	res := idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001",
		"--reason", "card fixed", "--operator", "alice", "--dry-run")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 1)
	require.Equal(t, map[string]any{
		"operation_id": declined.OperationID, "tool": "refund_order", "key": "op-declined-0001", "action": "would_redrive",
		"status": "failed", "next_generation": true, "fresh_job": true, "reason": "card fixed",
	}, lines[0], "its job was cancelled: a fresh one would run it")
	require.Equal(t, before, claimRow(t, b.pool, declined.ID))
	require.Equal(t, "cancelled", jobState(t, b.pool, declined.JobID))

	// Refused: succeeded (exit 3, with the refused line), and queued.
	for _, c := range []*gate.Claim{succeeded, queued} {
		before := claimRow(t, b.pool, c.ID)
		res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", c.IdempotencyKey, "--reason", "try")
		require.Equal(t, exitRefused, res.code, res.stderr)
		lines = jsonLines(t, res.stdout)
		require.Len(t, lines, 1)
		require.Equal(t, "refused", lines[0]["action"])
		require.Equal(t, string(c.Status), lines[0]["status"])
		require.Equal(t, before, claimRow(t, b.pool, c.ID))
	}
	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", succeeded.IdempotencyKey, "--reason", "try")
	require.Contains(t, res.stderr, "the operation succeeded; re-driving it is refused")

	// The re-drive: next generation (card declined: nothing happened), a
	// fresh job (the old one's cancellation was requested), a redriven audit
	// row naming the operator.
	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001",
		"--reason", "card fixed", "--operator", "alice")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Len(t, lines, 1)
	fresh, ok := lines[0]["job_id"].(float64)
	require.True(t, ok, "the line names the fresh job")
	require.NotEqual(t, float64(declined.JobID), fresh)
	require.Equal(t, map[string]any{
		"operation_id": declined.OperationID, "tool": "refund_order", "key": "op-declined-0001", "action": "redriven",
		"status": "queued", "next_generation": true, "fresh_job": true, "job_id": fresh,
		"downstream_key": "idg_" + declined.OperationID + "_1", "reason": "card fixed",
	}, lines[0])
	require.Equal(t, "available", jobState(t, b.pool, int64(fresh)))
	require.Equal(t, "cancelled", jobState(t, b.pool, declined.JobID))

	res = idemctl(ctx, t, b.dbURL, "op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001")
	require.Equal(t, exitOK, res.code, res.stderr)
	var op struct {
		Status        string `json:"status"`
		Generation    int    `json:"generation"`
		DownstreamKey string `json:"downstream_key"`
		Audit         []struct {
			Decision string `json:"decision"`
			UserID   string `json:"user_id"`
			Reason   string `json:"reason"`
		} `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &op))
	require.Equal(t, "queued", op.Status)
	require.Equal(t, 1, op.Generation)
	last := op.Audit[len(op.Audit)-1]
	require.Equal(t, "redriven", last.Decision)
	require.Equal(t, "alice", last.UserID)
	require.Contains(t, last.Reason, "card fixed")

	// Not failed any more: a second re-drive is refused.
	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001", "--reason", "again")
	require.Equal(t, exitRefused, res.code, res.stderr)
	require.Contains(t, res.stderr, "not failed")

	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "no-such-key-001", "--reason", "r")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, "no operation refund_order/no-such-key-001")
}

func TestOpRedriveSet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t)
	unknown := b.claim(t, "acme", "op-unknown-00001", domain.StatusFailed, domain.CodeOutcomeUnknown)
	declined := b.claim(t, "acme", "op-declined-0001", domain.StatusFailed, domain.CodeCardDeclined)
	cleaned := b.claim(t, "acme", "op-cleaned-00001", domain.StatusFailed, domain.CodeRetriesExhausted)
	// River cleaned this one's job: the re-drive inserts a fresh one.
	_, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, cleaned.JobID)
	require.NoError(t, err)
	succeeded := b.claim(t, "acme", "op-succeeded-01", domain.StatusSucceeded, "")
	old := b.claim(t, "acme", "op-old-failed-01", domain.StatusFailed, domain.CodeOutcomeUnknown)
	_, err = b.pool.Exec(ctx, `UPDATE idempotency_claims SET updated_at = now() - interval '3 hours' WHERE id = $1`, old.ID)
	require.NoError(t, err)
	other := b.claim(t, "globex", "op-unknown-00001", domain.StatusFailed, domain.CodeOutcomeUnknown)

	untouched := map[int64]string{}
	for _, c := range []*gate.Claim{unknown, declined, cleaned, succeeded, old, other} {
		untouched[c.ID] = claimRow(t, b.pool, c.ID)
	}
	args := []string{"op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--status", "failed", "--since", "1h",
		"--reason", "stripe outage over", "--operator", "bob"}

	res := idemctl(ctx, t, b.dbURL, append(args, "--dry-run")...)
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 3)
	byKey := map[string]map[string]any{}
	for _, l := range lines {
		require.Equal(t, "would_redrive", l["action"])
		byKey[l["key"].(string)] = l
	}
	require.Equal(t, false, byKey["op-unknown-00001"]["next_generation"], "an unknown outcome keeps the downstream key")
	require.Equal(t, true, byKey["op-declined-0001"]["next_generation"])
	require.Equal(t, true, byKey["op-cleaned-00001"]["fresh_job"])
	require.Equal(t, true, byKey["op-unknown-00001"]["fresh_job"], "its job's cancellation was requested")
	for id, row := range untouched {
		require.Equal(t, row, claimRow(t, b.pool, id), "a dry run changes nothing")
	}

	res = idemctl(ctx, t, b.dbURL, args...)
	require.Equal(t, exitOK, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Len(t, lines, 3)
	byKey = map[string]map[string]any{}
	for _, l := range lines {
		require.Equal(t, "redriven", l["action"])
		require.Equal(t, "queued", l["status"])
		byKey[l["key"].(string)] = l
	}
	require.Equal(t, "idg_"+unknown.OperationID+"_0", byKey["op-unknown-00001"]["downstream_key"])
	require.Equal(t, "idg_"+declined.OperationID+"_1", byKey["op-declined-0001"]["downstream_key"])
	fresh := int64(byKey["op-cleaned-00001"]["job_id"].(float64))
	require.NotEqual(t, cleaned.JobID, fresh)
	require.Equal(t, "available", jobState(t, b.pool, fresh))
	require.Equal(t, "available", jobState(t, b.pool, int64(byKey["op-unknown-00001"]["job_id"].(float64))))
	for _, c := range []*gate.Claim{succeeded, old, other} {
		require.Equal(t, untouched[c.ID], claimRow(t, b.pool, c.ID), "%s/%s is outside the set", c.TenantID, c.IdempotencyKey)
	}

	// Nothing failed is left in the window.
	res = idemctl(ctx, t, b.dbURL, args...)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stdout)
}

func TestOpUsage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t)
	redrive := []string{"op", "redrive", "--tenant", "acme", "--tool", "refund_order"}
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"GetNoTenant", []string{"op", "get", "--tool", "refund_order", "--key", "k"}, "--tenant is required"},
		{"GetNoKey", []string{"op", "get", "--tenant", "acme", "--tool", "refund_order"}, "--key is required"},
		{"GetBadTenant", []string{"op", "get", "--tenant", "a b", "--tool", "refund_order", "--key", "k"}, "--tenant:"},
		{"ListNoTenant", []string{"op", "list"}, "--tenant is required"},
		{"ListBadStatus", []string{"op", "list", "--tenant", "acme", "--status", "done"}, `--status: "done" is not`},
		{"ListBadSince", []string{"op", "list", "--tenant", "acme", "--since", "yesterday"}, "--since:"},
		{"ListNegativeSince", []string{"op", "list", "--tenant", "acme", "--since", "-1h"}, "--since: -1h must be positive"},
		{"ListBadLimit", []string{"op", "list", "--tenant", "acme", "--limit", "0"}, "--limit:"},
		{"RedriveNoReason", append(redrive, "--key", "k"), "--reason is required"},
		{"RedriveNoTool", []string{"op", "redrive", "--tenant", "acme", "--key", "k", "--reason", "r"}, "--tool is required"},
		{"RedriveNeither", append(redrive, "--reason", "r"), "give --key K"},
		{"RedriveBoth", append(redrive, "--key", "k", "--status", "failed", "--since", "1h", "--reason", "r"), "not both"},
		{"RedriveSucceededSet", append(redrive, "--status", "succeeded", "--since", "1h", "--reason", "r"), "only failed operations"},
		{"RedriveSetNoSince", append(redrive, "--status", "failed", "--reason", "r"), "--since is required"},
		{"RedriveLimitWithKey", append(redrive, "--key", "k", "--limit", "5", "--reason", "r"), "--limit applies to a set"},
		{"RedriveBadOperator", append(redrive, "--key", "k", "--reason", "r", "--operator", "a b"), "--operator:"},
		{"RedriveMultilineReason", append(redrive, "--key", "k", "--reason", "a\nb"), "--reason: reason must be printable"},
		{"PruneBadBatches", []string{"prune", "--max-batches", "0"}, "--max-batches: must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := idemctl(ctx, t, b.dbURL, tt.args...)
			require.Equal(t, exitUsage, res.code, res.stderr)
			require.Contains(t, res.stderr, tt.wantErr)
			require.Empty(t, res.stdout)
		})
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t)
	var expired []*gate.Claim
	for _, key := range []string{"prune-succeeded-1", "prune-succeeded-2"} {
		expired = append(expired, b.claim(t, "acme", key, domain.StatusSucceeded, ""))
	}
	expired = append(expired, b.claim(t, "acme", "prune-failed-0001", domain.StatusFailed, domain.CodeCardDeclined))
	live := b.claim(t, "acme", "prune-live-00001", domain.StatusSucceeded, "")
	queued := b.claim(t, "acme", "prune-queued-001", domain.StatusQueued, "")
	running := b.claim(t, "acme", "prune-running-01", domain.StatusRunning, "")
	for _, c := range expired {
		_, err := b.pool.Exec(ctx, `UPDATE idempotency_claims SET expires_at = now() - interval '1 minute' WHERE id = $1`, c.ID)
		require.NoError(t, err)
	}

	res := idemctl(ctx, t, b.dbURL, "prune")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.JSONEq(t, `{"deleted": 3}`, res.stdout)
	var left []int64
	rows, err := b.pool.Query(ctx, `SELECT id FROM idempotency_claims ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{live.ID, queued.ID, running.ID}, left)
	var audit int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE idempotency_key LIKE 'prune-%'`).Scan(&audit))
	require.Equal(t, 6, audit, "the audit trail is kept")

	res = idemctl(ctx, t, b.dbURL, "prune")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.JSONEq(t, `{"deleted": 0}`, res.stdout)
}

func TestOpCommandsRefuseSQLite(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "k"},
		{"op", "list", "--tenant", "acme"},
		{"op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "k", "--reason", "r"},
		{"prune"},
	} {
		res := idemctl(t.Context(), t, "sqlite:idemgate.db", args...)
		require.Equal(t, exitUsage, res.code)
		require.Contains(t, res.stderr, "this command needs Postgres")
	}
}
