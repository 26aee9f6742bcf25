package sqliteengine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The gate's statements: executor implements core.Executor.

// Claim is an alias so that the queries read naturally.
type Claim = core.Claim

// claimRow runs a statement that returns one claim.
func (e executor) claimRow(ctx context.Context, query string, args ...any) (*Claim, error) {
	c, err := scanClaim(e.queryRow(ctx, query, args...))
	return c, translate(err)
}

// claimWrite runs a conditional write that returns the claim it changed,
// or failed when its condition matched no row (see enginesql.Conditional).
func (e executor) claimWrite(ctx context.Context, failed error, query string, args ...any) (*Claim, error) {
	c, err := e.claimRow(ctx, query, args...)
	return enginesql.Conditional(c, err, failed)
}

// audited runs write and then, when it wrote and audit is set, appends the
// audit row (fill, when set, completes it from the written claim), both in
// one transaction: the executor's, or one of its own on the pool.
func (e executor) audited(ctx context.Context, audit *core.AuditInsertParams, fill func(*core.AuditInsertParams, *Claim),
	write func(executor) (*Claim, error)) (*Claim, error) {
	if audit == nil {
		return write(e)
	}
	in := e
	var tx *Tx
	if e.tx == nil {
		var err error
		if tx, err = e.store.begin(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		in = tx.executor
	}
	c, err := write(in)
	if err != nil {
		return c, err
	}
	row := *audit
	if fill != nil {
		fill(&row, c)
	}
	if err := in.AuditInsert(ctx, &row); err != nil {
		return nil, err
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (e executor) ClaimInsert(ctx context.Context, p *core.ClaimInsertParams) (*Claim, error) {
	return e.audited(ctx, p.Audit, nil, func(e executor) (*Claim, error) {
		if p.DuplicateWindow > 0 {
			// The guard first, in the same transaction (SQLite's one
			// writer serializes claims): no row back means it refused.
			// When the claim is then not written, the gate's transaction
			// either takes the key over under this operation or rolls
			// back; a group's row puts it back (ClaimInsertMany).
			return e.guardedInsert(ctx, p)
		}
		return e.claimWrite(ctx, vocab.ErrAlreadyExists, sqlClaimInsert, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey, p.UserID,
			string(p.Args), p.ArgsHash, int64(p.TTL/time.Second), int64(p.Retention/time.Second), p.JobID, p.IntentKey,
			approvalWindow(p.ApprovalWindow), p.ApprovalSummary)
	})
}

// guardedInsert upserts the duplicate guard and, if it let the claim in,
// inserts the claim: vocab.ErrAlreadyExists when either wrote nothing.
func (e executor) guardedInsert(ctx context.Context, p *core.ClaimInsertParams) (*Claim, error) {
	var one int
	err := e.queryRow(ctx, sqlGuardUpsert, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey, p.ArgsHash,
		seconds(p.DuplicateWindow), p.ConfirmDuplicateOf).Scan(&one)
	if err := translate(err); errors.Is(err, vocab.ErrNotFound) {
		return nil, vocab.ErrAlreadyExists
	} else if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrAlreadyExists, sqlClaimInsert, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey, p.UserID,
		string(p.Args), p.ArgsHash, int64(p.TTL/time.Second), int64(p.Retention/time.Second), p.JobID, p.IntentKey,
		approvalWindow(p.ApprovalWindow), p.ApprovalSummary)
}

// guardRestore puts the guard of p's fingerprint back as it was (old, or
// none) when it names p's unwritten claim.
func (e executor) guardRestore(ctx context.Context, p *core.ClaimInsertParams, old *core.FingerprintGuard) error {
	var err error
	if old == nil {
		_, err = e.exec(ctx, `DELETE FROM fingerprint_guards WHERE tenant_id = ?1 AND tool = ?2 AND args_hash = ?3 AND operation_id = ?4`,
			p.TenantID, p.Tool, p.ArgsHash, p.OperationID)
	} else {
		_, err = e.exec(ctx, `UPDATE fingerprint_guards SET operation_id = ?4, idempotency_key = ?5, guarded_until = ?6
			WHERE tenant_id = ?1 AND tool = ?2 AND args_hash = ?3 AND operation_id = ?7`,
			p.TenantID, p.Tool, p.ArgsHash, old.OperationID, old.IdempotencyKey, FormatTime(old.GuardedUntil), p.OperationID)
	}
	return translate(err)
}

func (e executor) FingerprintGuardDelete(ctx context.Context, operationIDs []string) error {
	for _, id := range operationIDs {
		if _, err := e.exec(ctx, `DELETE FROM fingerprint_guards WHERE operation_id = ?1`, id); err != nil {
			return translate(err)
		}
	}
	return nil
}

func (e executor) FingerprintGuardGet(ctx context.Context, p *core.FingerprintGuardGetParams) (*core.FingerprintGuard, error) {
	var g core.FingerprintGuard
	var until string
	if err := e.queryRow(ctx, sqlGuardGet, p.TenantID, p.Tool, p.ArgsHash).Scan(&g.OperationID, &g.IdempotencyKey, &until); err != nil {
		return nil, translate(err)
	}
	t, err := time.Parse(TimeFormat, until)
	if err != nil {
		return nil, fmt.Errorf("sqliteengine: guard's guarded_until %q: %w", until, err)
	}
	g.GuardedUntil = t
	return &g, nil
}

// ClaimInsertMany inserts row by row: SQLite has one writer, and the
// saving is the transaction's one commit, not the statements.
func (e executor) ClaimInsertMany(ctx context.Context, rows []*core.ClaimInsertParams) ([]*Claim, error) {
	out := make([]*Claim, len(rows))
	for i, r := range rows {
		if r.Audit != nil {
			row, audit := *r, *r.Audit // the audit row names the row's operation
			audit.OperationID, audit.JobID = r.OperationID, r.JobID
			row.Audit = &audit
			r = &row
		}
		var old *core.FingerprintGuard
		if r.DuplicateWindow > 0 {
			var err error
			old, err = e.FingerprintGuardGet(ctx, &core.FingerprintGuardGetParams{TenantID: r.TenantID, Tool: r.Tool, ArgsHash: r.ArgsHash})
			if err != nil && !errors.Is(err, vocab.ErrNotFound) {
				return nil, err
			}
		}
		c, err := e.ClaimInsert(ctx, r)
		if errors.Is(err, vocab.ErrAlreadyExists) && r.DuplicateWindow > 0 {
			// A row not written leaves the guard as it was.
			if rerr := e.guardRestore(ctx, r, old); rerr != nil {
				return nil, rerr
			}
		}
		switch {
		case errors.Is(err, vocab.ErrAlreadyExists):
		case err != nil:
			return nil, err
		default:
			out[i] = c
		}
	}
	return out, nil
}

func (e executor) ClaimGetByKey(ctx context.Context, p *core.ClaimGetByKeyParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, nullTime(p.Now))
}

func (e executor) ClaimGetByID(ctx context.Context, p *core.ClaimGetByIDParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByID, p.ID, nullTime(p.Now))
}

func (e executor) ClaimTakeOver(ctx context.Context, p *core.ClaimTakeOverParams) (*Claim, error) {
	var out *Claim
	err := e.withTx(ctx, func(e executor) error {
		// The old intent's fingerprint goes into the key's history under
		// the take-over's own condition; the transaction holds SQLite's
		// one write lock, so nothing changes the claim in between.
		h, err := scanHistory(e.queryRow(ctx, sqlClaimTakeOverHistory, p.ID, nullTime(p.Now)))
		if errors.Is(err, sql.ErrNoRows) {
			return vocab.ErrStateChanged
		}
		if err != nil {
			return translate(err)
		}
		c, err := e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimTakeOver, p.ID, p.OperationID, p.UserID, string(p.Args), p.ArgsHash,
			int64(p.TTL/time.Second), nullTime(p.Now), int64(p.Retention/time.Second), p.JobID, p.IntentKey,
			approvalWindow(p.ApprovalWindow), p.ApprovalSummary)
		if err != nil {
			return err
		}
		out = c
		return e.keep(ctx, h, p.Now, "taken over by operation "+p.OperationID+"; the fingerprint stays in the key's history until ")
	})
	return out, err
}

func (e executor) ClaimLease(ctx context.Context, p *core.ClaimLeaseParams) (*Claim, error) {
	return e.audited(ctx, p.Audit, enginesql.FillLeaseAudit, func(e executor) (*Claim, error) {
		c, err := e.claimRow(ctx, sqlClaimLease, p.OperationID, p.JobID, seconds(p.Lease), nullTime(p.Now))
		return enginesql.Leased(c, err, e.leaseRead(ctx, p))
	})
}

func (e executor) ClaimLock(ctx context.Context, p *core.ClaimLeaseParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimLock, p.OperationID, p.JobID, nullTime(p.Now))
	return enginesql.Leased(c, err, e.leaseRead(ctx, p))
}

// leaseRead reads the claim a lease or lock did not match, to tell why.
func (e executor) leaseRead(ctx context.Context, p *core.ClaimLeaseParams) func() (*Claim, error) {
	return func() (*Claim, error) {
		return e.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: p.TenantID, OperationID: p.OperationID, Now: p.Now})
	}
}

func (e executor) ClaimComplete(ctx context.Context, p *core.ClaimCompleteParams) (*Claim, error) {
	query := sqlClaimComplete
	if p.Locked {
		query = sqlClaimCompleteLocked
	}
	return e.audited(ctx, p.Audit, nil, func(e executor) (*Claim, error) {
		return e.claimWrite(ctx, vocab.ErrLeaseLost, query, p.ID, p.Epoch, nullJSON(p.Result), nullTime(p.Now))
	})
}

func (e executor) ClaimFail(ctx context.Context, p *core.ClaimFailParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimFail, p.ID, p.Epoch, string(errJSON), p.LeaseExpiredOnly, nullTime(p.Now))
}

func (e executor) ClaimRelease(ctx context.Context, p *core.ClaimReleaseParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.LastError)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimRelease, p.ID, p.Epoch, string(errJSON))
}

func (e executor) ClaimReclaim(ctx context.Context, p *core.ClaimReclaimParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimReclaim, p.ID, p.Epoch, p.JobID, nullTime(p.Now))
}

func (e executor) ClaimSettle(ctx context.Context, p *core.ClaimSettleParams) (*Claim, error) {
	var errJSON, result any
	if p.Error != nil {
		b, err := json.Marshal(p.Error)
		if err != nil {
			return nil, err
		}
		errJSON = string(b)
	} else {
		result = nullJSON(p.Result)
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimSettle, p.ID, p.Epoch, result, errJSON, nullTime(p.Now))
}

func (e executor) ClaimRedrive(ctx context.Context, p *core.ClaimRedriveParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimRedrive, p.ID, p.NextGeneration, p.JobID)
}

func (e executor) ClaimAbandon(ctx context.Context, p *core.ClaimAbandonParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimAbandon, p.ID, p.Epoch, p.JobID, string(errJSON), nullTime(p.Now))
}

// approvalWindow is a claim's approval window as a strftime modifier, ""
// for a claim that does not wait.
func approvalWindow(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return seconds(d)
}

func (e executor) ClaimApprove(ctx context.Context, p *core.ClaimApproveParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimApprove, p.ID, p.ArgsHash, p.JobID, nullTime(p.Now))
}

func (e executor) ClaimDecline(ctx context.Context, p *core.ClaimDeclineParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimDecline, p.ID, string(errJSON), p.Expired, nullTime(p.Now))
}

func (e executor) ClaimListApprovalExpired(ctx context.Context, p *core.ClaimListApprovalExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListApprovalExpired, p.Limit, nullTime(p.Now))
}

func (e executor) ApprovalPendingCount(ctx context.Context, p *core.ApprovalPendingCountParams) (int, error) {
	var n int
	err := e.queryRow(ctx, sqlApprovalPendingCount, p.TenantID, nullTime(p.Now)).Scan(&n)
	return n, translate(err)
}

func (e executor) ClaimListOrphaned(ctx context.Context, p *core.ClaimListOrphanedParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListOrphaned, p.Limit, nullTime(p.Now))
}

func (e executor) ClaimListStalled(ctx context.Context, p *core.ClaimListStalledParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListStalled, p.Limit, nullTime(p.Now), p.StaleAfter.Seconds())
}

func (e executor) ClaimRepoint(ctx context.Context, p *core.ClaimRepointParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimRepoint, p.ID, p.Epoch, p.OldJobID, p.NewJobID)
}

func (e executor) ClaimList(ctx context.Context, p *core.ClaimListParams) ([]*Claim, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if p.ArgName != "" && !core.ValidArgName(p.ArgName) {
		return nil, fmt.Errorf("sqliteengine: argument name %q is not [a-z0-9_]{1,64}", p.ArgName)
	}
	return e.claimRows(ctx, sqlClaimList, p.TenantID, p.Tool, string(p.Status), nullTime(p.Since), limit, p.ArgName, p.ArgValue)
}

func (e executor) ClaimGetByOperation(ctx context.Context, p *core.ClaimGetByOperationParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByOperation, p.TenantID, p.OperationID, nullTime(p.Now))
}

func (e executor) ClaimListNewest(ctx context.Context, p *core.ClaimListNewestParams) ([]*Claim, error) {
	var (
		after   any
		afterID int64
	)
	if p.After != nil {
		after, afterID = FormatTime(p.After.CreatedAt), p.After.ID
	}
	if p.ArgName != "" && !core.ValidArgName(p.ArgName) {
		return nil, fmt.Errorf("sqliteengine: argument name %q is not [a-z0-9_]{1,64}", p.ArgName)
	}
	return e.claimRows(ctx, sqlClaimListNewest, p.TenantID, p.Tool, string(p.Status), after, afterID, max(p.Limit, 1), p.ArgName, p.ArgValue)
}

// JobGet implements core.Executor. Lock needs nothing more on SQLite: a
// transaction begins IMMEDIATE, holding the database's one write lock, so
// no worker fetches the job before it ends.
func (e executor) JobGet(ctx context.Context, p *core.JobGetParams) (*core.Job, error) {
	var j core.Job
	if err := e.queryRow(ctx, sqlJobGet, p.ID).Scan(&j.ID, &j.State, times{}.NullTime(&j.NextRunAt), &j.CancelRequested); err != nil {
		return nil, translate(err)
	}
	return &j, nil
}

func (e executor) ClaimListTerminal(ctx context.Context, p *core.ClaimListTerminalParams) ([]int64, error) {
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return nil, err
	}
	rows, err := e.query(ctx, sqlClaimListTerminal, string(ids))
	return list(rows, err, func(row enginesql.Row) (int64, error) {
		var id int64
		return id, row.Scan(&id)
	})
}

func (e executor) ClaimListLeaseExpired(ctx context.Context, p *core.ClaimListLeaseExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListLeaseExpired, p.Limit, nullTime(p.Now))
}

// claimRows runs a statement that returns claims.
func (e executor) claimRows(ctx context.Context, query string, args ...any) ([]*Claim, error) {
	rows, err := e.query(ctx, query, args...)
	return list(rows, err, scanClaim)
}

func (e executor) ClaimArchiveExpired(ctx context.Context, p *core.ClaimArchiveExpiredParams) (int, error) {
	n := 0
	err := e.withTx(ctx, func(e executor) error {
		// One statement deletes the batch under one clock reading and
		// returns it: the rows kept below are exactly the claims deleted.
		rows, err := e.query(ctx, sqlClaimArchiveDelete, p.Limit, nullTime(p.Now))
		hs, err := list(rows, err, scanHistory)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if err := e.keep(ctx, h, p.Now, "replay window ended; the fingerprint stays in the key's history until "); err != nil {
				return err
			}
		}
		n = len(hs)
		return nil
	})
	return n, err
}

func (e executor) TombstoneGetByKey(ctx context.Context, p *core.TombstoneGetByKeyParams) (*core.Tombstone, error) {
	t, err := enginesql.ScanTombstone(e.queryRow(ctx, sqlTombstoneGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, p.ArgsHash,
		nullTime(p.Now)), times{})
	return t, translate(err)
}

func (e executor) TombstoneDeleteExpired(ctx context.Context, p *core.TombstoneDeleteExpiredParams) (int, error) {
	n := 0
	err := e.withTx(ctx, func(e executor) error {
		rows, err := e.query(ctx, sqlTombstoneDeleteExpired, p.Limit, nullTime(p.Now))
		gone, err := list(rows, err, func(row enginesql.Row) (*core.AuditInsertParams, error) {
			var status, code string
			ev := &core.AuditInsertParams{UserID: core.WorkerUser, Decision: vocab.DecisionForgotten,
				Reason: "retention ended; the fingerprint may run again under this key"}
			if err := row.Scan(&ev.TenantID, &ev.Tool, &ev.IdempotencyKey, &ev.ArgsHash, &ev.OperationID, &status, &code); err != nil {
				return nil, err
			}
			ev.Result = outcomeSummary(status, code)
			return ev, nil
		})
		if err != nil {
			return err
		}
		n = len(gone)
		if err := e.AuditInsertMany(ctx, gone); err != nil {
			return err
		}
		if _, err := e.exec(ctx, sqlTombstonePurge, p.Limit, nullTime(p.Now)); err != nil {
			return translate(err)
		}
		_, err = e.exec(ctx, sqlGuardPrune, p.Limit, nullTime(p.Now))
		return translate(err)
	})
	return n, err
}

// historyRow is what a key's history keeps of a claim (historyColumns).
type historyRow struct {
	tenantID, tool, key, argsHash, operationID string
	jobID                                      int64
	status, errorCode, expiredAt, retainUntil  string
	incarnation                                int64
}

func scanHistory(row enginesql.Row) (*historyRow, error) {
	var h historyRow
	if err := row.Scan(&h.tenantID, &h.tool, &h.key, &h.argsHash, &h.operationID, &h.jobID, &h.status, &h.errorCode,
		&h.expiredAt, &h.retainUntil, &h.incarnation); err != nil {
		return nil, err
	}
	return &h, nil
}

// keep writes h into its key's history with an archived audit row whose
// reason is reason followed by the end of h's retention.
func (e executor) keep(ctx context.Context, h *historyRow, now *time.Time, reason string) error {
	if _, err := e.exec(ctx, sqlHistoryUpsert, h.tenantID, h.tool, h.key, h.argsHash, h.operationID, h.status, h.errorCode,
		h.expiredAt, h.retainUntil, nullTime(now), h.incarnation); err != nil {
		return translate(err)
	}
	return e.AuditInsert(ctx, &core.AuditInsertParams{
		TenantID: h.tenantID, UserID: core.WorkerUser, Tool: h.tool, IdempotencyKey: h.key, OperationID: h.operationID,
		JobID: h.jobID, Decision: vocab.DecisionArchived, Reason: reason + h.retainUntil, ArgsHash: h.argsHash,
		Result: outcomeSummary(h.status, h.errorCode),
	})
}

// outcomeSummary is what an audit row keeps of an outcome: its status and
// error code.
func outcomeSummary(status, code string) json.RawMessage {
	m := map[string]string{"status": status}
	if code != "" {
		m["error_code"] = code
	}
	b, _ := json.Marshal(m)
	return b
}

// withTx runs fn in the executor's transaction, or in one of its own on
// the pool.
func (e executor) withTx(ctx context.Context, fn func(e executor) error) error {
	if e.tx != nil {
		return fn(e)
	}
	tx, err := e.store.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx.executor); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (e executor) AuditInsert(ctx context.Context, p *core.AuditInsertParams) error {
	_, err := e.exec(ctx, sqlAuditInsert, enginesql.AuditArgs(p, nullJSON)...)
	return translate(err)
}

func (e executor) AuditInsertMany(ctx context.Context, rows []*core.AuditInsertParams) error {
	if len(rows) == 1 || e.tx != nil {
		for _, r := range rows {
			if err := e.AuditInsert(ctx, r); err != nil {
				return err
			}
		}
		return nil
	}
	tx, err := e.store.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.AuditInsertMany(ctx, rows); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (e executor) AuditListByKey(ctx context.Context, p *core.AuditListByKeyParams) ([]*core.AuditEvent, error) {
	rows, err := e.query(ctx, sqlAuditListByKey, p.TenantID, p.Tool, p.IdempotencyKey)
	return list(rows, err, scanAuditEvent)
}

func scanClaim(row enginesql.Row) (*Claim, error) { return enginesql.ScanClaim(row, times{}) }

func scanAuditEvent(row enginesql.Row) (*core.AuditEvent, error) {
	return enginesql.ScanAuditEvent(row, times{})
}

// list scans every row with scan, and closes rows: the connection, SQLite's
// only one, is free again when it returns. err is the query's error.
func list[T any](rows *sql.Rows, err error, scan func(enginesql.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out, err := enginesql.Collect(rows, scan)
	return out, translate(err)
}

// nullJSON passes an empty document as SQL NULL, and any other as TEXT.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
