package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// opBundle is a fresh database on one engine and the operators' parts on
// it (on SQLite, a connection of its own: idemctl opens another, as a
// second process would).
type opBundle struct {
	dbURL string
	db    *enginetest.DB
	ops   *idemgateapp.Ops
}

func setupOp(t *testing.T, engine string) *opBundle {
	t.Helper()
	d := enginetest.New(t, engine, nil)
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // the tests claim the same refund under many keys, on purpose
	cfg.DatabaseURL = d.URL
	var o *idemgateapp.Ops
	var err error
	if d.Pool != nil {
		o, err = idemgateapp.NewOps(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil)
	} else {
		o, err = idemgateapp.NewOps(cfg, sqliteengine.NewDriver(d.SQL), nil)
	}
	require.NoError(t, err)
	return &opBundle{dbURL: d.URL, db: d, ops: o}
}

// claim makes a claim through the gate (with its River job) and brings it
// to status: queued, running, succeeded, or failed with code (its job
// cancelled, as the worker does).
func (b *opBundle) claim(t *testing.T, tenant, key string, status vocab.Status, code vocab.Code) *core.Claim {
	t.Helper()
	ctx := context.Background()
	c := coretest.Claim(ctx, t, b.ops.Gate, &coretest.ClaimOpts{Tenant: tenant, Key: key}).Claim
	if status == vocab.StatusQueued {
		return c
	}
	s := b.ops.Gate.Store()
	leased, err := s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	switch status {
	case vocab.StatusRunning:
		return leased
	case vocab.StatusSucceeded:
		done, err := s.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"refund_id":"re_1"}`)})
		require.NoError(t, err)
		return done
	}
	failed, err := s.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: leased.Epoch, Error: vocab.ErrorInfo{Code: code, Message: string(code)}})
	require.NoError(t, err)
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.ops.Jobs.JobCancelTx(ctx, tx, c.JobID))
	require.NoError(t, tx.Commit(ctx))
	return failed
}

// claimRow is a claim's whole row, for before/after comparisons.
func (b *opBundle) claimRow(t *testing.T, id int64) string {
	t.Helper()
	rows := b.db.Rows(t, `SELECT * FROM idempotency_claims WHERE id = $1`, id)
	require.Len(t, rows, 1)
	return rows[0]
}

// jobState is the River job's state, or "" when River no longer has it.
func (b *opBundle) jobState(t *testing.T, id int64) string {
	t.Helper()
	return strings.Join(b.db.Rows(t, `SELECT CAST(state AS TEXT) FROM river_job WHERE id = $1`, id), "")
}

// setClaimTime sets a claim's time column to at.
func (b *opBundle) setClaimTime(t *testing.T, column string, id int64, at time.Time) {
	t.Helper()
	b.db.Exec(t, `UPDATE idempotency_claims SET `+column+` = $1 WHERE id = $2`, b.db.Time(at), id)
}

func TestOpGetAndList(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOp(t, engine)
		failed := b.claim(t, "acme", "op-failed-00001", vocab.StatusFailed, vocab.CodeCardDeclined)
		succeeded := b.claim(t, "acme", "op-succeeded-01", vocab.StatusSucceeded, "")
		b.claim(t, "acme", "op-queued-00001", vocab.StatusQueued, "")
		b.claim(t, "globex", "op-failed-00001", vocab.StatusFailed, vocab.CodeOutcomeUnknown)
		requireOpGet(t, b, failed)
		requireOpList(t, b, failed, succeeded)
	})
}

// requireOpGet checks op get of the failed claim, and of an unknown key.
func requireOpGet(t *testing.T, b *opBundle, failed *core.Claim) {
	ctx := t.Context()
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
}

// requireOpList checks op list: the tenant's operations, newest first,
// filtered.
func requireOpList(t *testing.T, b *opBundle, failed, succeeded *core.Claim) {
	ctx := t.Context()
	res := idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme")
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

	// By argument, with the canonical arguments in every line: the three
	// refunds of acme's order, none of another order.
	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--arg", "order_id=ord_9f2")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Len(t, lines, 3)
	for _, l := range lines {
		require.Equal(t, "ord_9f2", l["args"].(map[string]any)["order_id"], "%v", l)
	}
	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acme", "--arg", "order_id=ord_other")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stdout)

	// A tenant that has nothing here is an error, not an empty list.
	res = idemctl(ctx, t, b.dbURL, "op", "list", "--tenant", "acmee")
	require.Equal(t, exitFailure, res.code, res.stdout)
	require.Contains(t, res.stderr, `no tenant "acmee" here`)
}

func TestOpRedriveOne(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		declined := b.claim(t, "acme", "op-declined-0001", vocab.StatusFailed, vocab.CodeCardDeclined)
		succeeded := b.claim(t, "acme", "op-succeeded-01", vocab.StatusSucceeded, "")
		queued := b.claim(t, "acme", "op-queued-00001", vocab.StatusQueued, "")
		require.Equal(t, "cancelled", b.jobState(t, declined.JobID))

		// --dry-run: says what it would do and changes nothing.
		before := b.claimRow(t, declined.ID)
		res := idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001",
			"--reason", "card fixed", "--operator", "alice", "--dry-run")
		require.Equal(t, exitOK, res.code, res.stderr)
		lines := jsonLines(t, res.stdout)
		require.Len(t, lines, 1)
		require.Equal(t, map[string]any{
			"operation_id": declined.OperationID, "tool": "refund_order", "key": "op-declined-0001", "action": "would_redrive",
			"status": "failed", "next_generation": true, "fresh_job": true, "reason": "card fixed",
		}, lines[0], "its job was cancelled: a fresh one would run it")
		require.Equal(t, before, b.claimRow(t, declined.ID))
		require.Equal(t, "cancelled", b.jobState(t, declined.JobID))

		// Refused: succeeded (exit 3, with the refused line), and queued.
		for _, c := range []*core.Claim{succeeded, queued} {
			before := b.claimRow(t, c.ID)
			res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", c.IdempotencyKey, "--reason", "try")
			require.Equal(t, exitRefused, res.code, res.stderr)
			lines = jsonLines(t, res.stdout)
			require.Len(t, lines, 1)
			require.Equal(t, "refused", lines[0]["action"])
			require.Equal(t, string(c.Status), lines[0]["status"])
			require.Equal(t, before, b.claimRow(t, c.ID))
		}
		res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", succeeded.IdempotencyKey, "--reason", "try")
		require.Contains(t, res.stderr, "the operation succeeded; re-driving it is refused")

		requireRedriveDeclined(t, b, declined)
	})
}

// requireRedriveDeclined re-drives the declined claim: next generation (card
// declined: nothing happened), a fresh job (the old one's cancellation was
// requested), a redriven audit row naming the operator; then a second
// re-drive is refused.
func requireRedriveDeclined(t *testing.T, b *opBundle, declined *core.Claim) {
	ctx := t.Context()
	res := idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001",
		"--reason", "card fixed", "--operator", "alice")
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 1)
	fresh, ok := lines[0]["job_id"].(float64)
	require.True(t, ok, "the line names the fresh job")
	require.NotEqual(t, float64(declined.JobID), fresh)
	require.Equal(t, map[string]any{
		"operation_id": declined.OperationID, "tool": "refund_order", "key": "op-declined-0001", "action": "redriven",
		"status": "queued", "next_generation": true, "fresh_job": true, "job_id": fresh,
		"downstream_key": "idg_" + declined.OperationID + "_1", "reason": "card fixed",
	}, lines[0])
	require.Equal(t, "available", b.jobState(t, int64(fresh)))
	require.Equal(t, "cancelled", b.jobState(t, declined.JobID))

	res = idemctl(ctx, t, b.dbURL, "op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001")
	require.Equal(t, exitOK, res.code, res.stderr)
	var op struct {
		Status     string `json:"status"`
		Generation int    `json:"generation"`
		Audit      []struct {
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
	require.Contains(t, last.Reason, "redriven by alice via idemctl: card fixed", "the person and the channel")

	// Not failed any more: a second re-drive is refused.
	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-declined-0001", "--reason", "again")
	require.Equal(t, exitRefused, res.code, res.stderr)
	require.Contains(t, res.stderr, "not failed")

	res = idemctl(ctx, t, b.dbURL, "op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "no-such-key-001", "--reason", "r")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, "no operation refund_order/no-such-key-001")
}

// redriveSet is the claims of TestOpRedriveSet.
type redriveSet struct {
	unknown, declined, cleaned, succeeded, old, other *core.Claim
}

func TestOpRedriveSet(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		s := &redriveSet{
			unknown:  b.claim(t, "acme", "op-unknown-00001", vocab.StatusFailed, vocab.CodeOutcomeUnknown),
			declined: b.claim(t, "acme", "op-declined-0001", vocab.StatusFailed, vocab.CodeCardDeclined),
			cleaned:  b.claim(t, "acme", "op-cleaned-00001", vocab.StatusFailed, vocab.CodeRetriesExhausted),
		}
		// River cleaned this one's job: the re-drive inserts a fresh one.
		b.db.Exec(t, `DELETE FROM river_job WHERE id = $1`, s.cleaned.JobID)
		s.succeeded = b.claim(t, "acme", "op-succeeded-01", vocab.StatusSucceeded, "")
		s.old = b.claim(t, "acme", "op-old-failed-01", vocab.StatusFailed, vocab.CodeOutcomeUnknown)
		b.setClaimTime(t, "updated_at", s.old.ID, time.Now().Add(-3*time.Hour))
		s.other = b.claim(t, "globex", "op-unknown-00001", vocab.StatusFailed, vocab.CodeOutcomeUnknown)

		untouched := map[int64]string{}
		for _, c := range []*core.Claim{s.unknown, s.declined, s.cleaned, s.succeeded, s.old, s.other} {
			untouched[c.ID] = b.claimRow(t, c.ID)
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
			require.Equal(t, row, b.claimRow(t, id), "a dry run changes nothing")
		}
		requireRedriveSet(t, b, s, args, untouched)
	})
}

// requireRedriveSet re-drives the set for real: the tenant's failed
// refunds of the last hour, and nothing else.
func requireRedriveSet(t *testing.T, b *opBundle, s *redriveSet, args []string, untouched map[int64]string) {
	ctx := t.Context()
	res := idemctl(ctx, t, b.dbURL, args...)
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 3)
	byKey := map[string]map[string]any{}
	for _, l := range lines {
		require.Equal(t, "redriven", l["action"])
		require.Equal(t, "queued", l["status"])
		byKey[l["key"].(string)] = l
	}
	require.Equal(t, "idg_"+s.unknown.OperationID+"_0", byKey["op-unknown-00001"]["downstream_key"])
	require.Equal(t, "idg_"+s.declined.OperationID+"_1", byKey["op-declined-0001"]["downstream_key"])
	fresh := int64(byKey["op-cleaned-00001"]["job_id"].(float64))
	require.NotEqual(t, s.cleaned.JobID, fresh)
	require.Equal(t, "available", b.jobState(t, fresh))
	require.Equal(t, "available", b.jobState(t, int64(byKey["op-unknown-00001"]["job_id"].(float64))))
	for _, c := range []*core.Claim{s.succeeded, s.old, s.other} {
		require.Equal(t, untouched[c.ID], b.claimRow(t, c.ID), "%s/%s is outside the set", c.TenantID, c.IdempotencyKey)
	}

	// Nothing failed is left in the window.
	res = idemctl(ctx, t, b.dbURL, args...)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stdout)
}

func TestOpUsage(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		redrive := []string{"op", "redrive", "--tenant", "acme", "--tool", "refund_order"}
		for _, tt := range []struct {
			name    string
			args    []string
			wantErr string
		}{
			{"GetNoTenant", []string{"op", "get", "--tool", "refund_order", "--key", "k"}, "--tenant is required"},
			{"GetNoKey", []string{"op", "get", "--tenant", "acme", "--tool", "refund_order"}, "--key is required"},
			{"GetBadTenant", []string{"op", "get", "--tenant", " a", "--tool", "refund_order", "--key", "k"}, "--tenant:"},
			{"ListNoTenant", []string{"op", "list"}, "--tenant is required"},
			{"ListBadStatus", []string{"op", "list", "--tenant", "acme", "--status", "done"}, `--status: "done" is not`},
			{"ListBadSince", []string{"op", "list", "--tenant", "acme", "--since", "yesterday"}, "--since:"},
			{"ListNegativeSince", []string{"op", "list", "--tenant", "acme", "--since", "-1h"}, "--since: -1h must be positive"},
			{"ListBadLimit", []string{"op", "list", "--tenant", "acme", "--limit", "0"}, "--limit:"},
			{"ListBadArg", []string{"op", "list", "--tenant", "acme", "--arg", "order_id"}, "--arg: want NAME=VALUE"},
			{"ListBadArgName", []string{"op", "list", "--tenant", "acme", "--arg", "Order-Id=x"}, "--arg: want NAME=VALUE"},
			{"RedriveNoReason", append(redrive, "--key", "k"), "--reason is required"},
			{"RedriveNoTool", []string{"op", "redrive", "--tenant", "acme", "--key", "k", "--reason", "r"}, "--tool is required"},
			{"RedriveNeither", append(redrive, "--reason", "r"), "give --key K"},
			{"RedriveBoth", append(redrive, "--key", "k", "--status", "failed", "--since", "1h", "--reason", "r"), "not both"},
			{"RedriveSucceededSet", append(redrive, "--status", "succeeded", "--since", "1h", "--reason", "r"), "only failed operations"},
			{"RedriveSetNoSince", append(redrive, "--status", "failed", "--reason", "r"), "--since is required"},
			{"RedriveLimitWithKey", append(redrive, "--key", "k", "--limit", "5", "--reason", "r"), "--limit applies to a set"},
			{"RedriveBadOperator", append(redrive, "--key", "k", "--reason", "r", "--operator", " alice"), "--operator:"},
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
	})
}

func TestPrune(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		var expired []*core.Claim
		for _, key := range []string{"prune-succeeded-1", "prune-succeeded-2"} {
			expired = append(expired, b.claim(t, "acme", key, vocab.StatusSucceeded, ""))
		}
		expired = append(expired, b.claim(t, "acme", "prune-failed-0001", vocab.StatusFailed, vocab.CodeCardDeclined))
		var left []string
		for _, c := range []*core.Claim{
			b.claim(t, "acme", "prune-live-00001", vocab.StatusSucceeded, ""),
			b.claim(t, "acme", "prune-queued-001", vocab.StatusQueued, ""),
			b.claim(t, "acme", "prune-running-01", vocab.StatusRunning, ""),
		} {
			left = append(left, strconv.FormatInt(c.ID, 10))
		}
		for _, c := range expired {
			b.setClaimTime(t, "expires_at", c.ID, time.Now().Add(-time.Minute))
		}

		res := idemctl(ctx, t, b.dbURL, "prune")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.JSONEq(t, `{"deleted": 3}`, res.stdout)
		require.Equal(t, left, b.db.Rows(t, `SELECT id FROM idempotency_claims ORDER BY id`))
		require.Equal(t, 6+3, b.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key LIKE 'prune-%'`),
			"the audit trail is kept, and says which claims were archived")
		require.Equal(t, 3, b.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key LIKE 'prune-%' AND decision = 'archived'`))

		res = idemctl(ctx, t, b.dbURL, "prune")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.JSONEq(t, `{"deleted": 0}`, res.stdout)
	})
}

// On SQLite, idemctl runs beside the api as a second process: op get reads
// while the api holds the write lock (WAL), and prune waits for the lock.
func TestOpCommandsWaitForTheSQLiteWriteLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupOp(t, config.DriverSQLite)
	c := b.claim(t, "acme", "lock-succeeded-01", vocab.StatusSucceeded, "")
	b.setClaimTime(t, "expires_at", c.ID, time.Now().Add(-time.Minute))

	// Another process's transaction: BEGIN IMMEDIATE takes the write lock.
	holder, err := sqlitetest.Open(t, b.db.Path).BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	res := idemctl(ctx, t, b.dbURL, "op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "lock-succeeded-01")
	require.Equal(t, exitOK, res.code, res.stderr)

	done := make(chan cliResult, 1)
	go func() { done <- idemctl(ctx, t, b.dbURL, "prune") }()
	select {
	case res := <-done:
		t.Fatalf("prune ended while another process held the write lock: %+v", res)
	case <-time.After(300 * time.Millisecond): // time for prune to reach the lock; it may take longer
	}
	require.NoError(t, holder.Rollback())
	res = <-done
	require.Equal(t, exitOK, res.code, res.stderr)
	require.JSONEq(t, `{"deleted": 1}`, res.stdout)
}

func TestOpCommandsRefuseAMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.db")
	for _, args := range [][]string{
		{"op", "get", "--tenant", "acme", "--tool", "refund_order", "--key", "k"},
		{"op", "list", "--tenant", "acme"},
		{"op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "k", "--reason", "r"},
		{"prune"},
	} {
		res := idemctl(t.Context(), t, "sqlite:"+path, args...)
		require.Equal(t, exitFailure, res.code, res.stderr)
		require.Contains(t, res.stderr, "no SQLite database at "+path)
		require.NoFileExists(t, path, "not created")
	}
}

// TestOpRedriveRefusesCancelled: an operation its agent cancelled is
// final; op redrive refuses it singly (exit 3), lists it as refused in a
// dry run and in a set, and writes a denied audit row for each real
// refusal, nothing else.
func TestOpRedriveRefusesCancelled(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		ctx := t.Context()
		b := setupOp(t, engine)
		queued := b.claim(t, "acme", "op-cancelled-001", vocab.StatusQueued, "")
		_, err := b.ops.Gate.Cancel(ctx, &core.CancelParams{TenantID: "acme", OperationID: queued.OperationID, UserID: "support-bot"}, b.ops.Jobs)
		require.NoError(t, err)
		before := b.claimRow(t, queued.ID)
		denied := func() int {
			return b.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = 'op-cancelled-001' AND decision = 'denied'`)
		}

		for _, dry := range []bool{true, false} {
			args := []string{"op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--key", "op-cancelled-001",
				"--reason", "retry failed ones", "--operator", "alice"}
			if dry {
				args = append(args, "--dry-run")
			}
			res := idemctl(ctx, t, b.dbURL, args...)
			require.Equal(t, exitRefused, res.code, res.stderr)
			lines := jsonLines(t, res.stdout)
			require.Len(t, lines, 1)
			require.Equal(t, "refused", lines[0]["action"], "dry run %v", dry)
			require.Contains(t, lines[0]["reason"], "cancelled by its owner")
			require.Contains(t, res.stderr, "cancelled by its owner")
		}
		require.Equal(t, 1, denied(), "the real refusal is audited, the dry run writes nothing")

		set := []string{"op", "redrive", "--tenant", "acme", "--tool", "refund_order", "--status", "failed", "--since", "1h",
			"--reason", "retry failed ones", "--operator", "alice"}
		for _, dry := range []bool{true, false} {
			args := set
			if dry {
				args = append(slices.Clone(set), "--dry-run")
			}
			res := idemctl(ctx, t, b.dbURL, args...)
			require.Equal(t, exitOK, res.code, res.stderr)
			lines := jsonLines(t, res.stdout)
			require.Len(t, lines, 1)
			require.Equal(t, "refused", lines[0]["action"], "never would_redrive (dry run %v)", dry)
		}
		require.Equal(t, 2, denied())
		require.Equal(t, before, b.claimRow(t, queued.ID), "still failed, cancelled")
		require.Equal(t, "cancelled", b.jobState(t, queued.JobID))
	})
}
