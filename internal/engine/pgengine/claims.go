package pgengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The gate's statements: executor implements core.Executor.

// claimRow runs a statement that returns one claim.
func (e executor) claimRow(ctx context.Context, sql string, args ...any) (*Claim, error) {
	c, err := scanClaim(e.q.QueryRow(ctx, sql, args...))
	return c, translate(err)
}

// claimWrite runs a conditional write that returns the claim it changed,
// or failed when its condition matched no row (see enginesql.Conditional).
func (e executor) claimWrite(ctx context.Context, failed error, sql string, args ...any) (*Claim, error) {
	c, err := e.claimRow(ctx, sql, args...)
	return enginesql.Conditional(c, err, failed)
}

// Claim is an alias so that the queries read naturally.
type Claim = core.Claim

// audited picks the statement with the audit row when there is one, and
// appends its parameters.
func audited(audit *core.AuditInsertParams, plain, withAudit string, args ...any) (string, []any) {
	if audit == nil {
		return plain, args
	}
	return withAudit, append(args, enginesql.AuditArgs(audit, nullJSON)...)
}

func (e executor) ClaimInsert(ctx context.Context, p *core.ClaimInsertParams) (*Claim, error) {
	sql, args := audited(p.Audit, sqlClaimInsert, sqlClaimInsertAudited, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey,
		p.UserID, []byte(p.Args), p.ArgsHash, int(p.TTL/time.Second), int(p.Retention/time.Second), p.JobID, p.IntentKey,
		p.ApprovalWindow.Seconds(), p.ApprovalSummary)
	if p.DuplicateWindow > 0 {
		if p.Audit == nil {
			return nil, fmt.Errorf("pgengine: a guarded claim insert needs its audit row")
		}
		sql, args = sqlClaimInsertGuarded, append(args, p.DuplicateWindow.Seconds(), p.ConfirmDuplicateOf)
	}
	return e.claimWrite(ctx, vocab.ErrAlreadyExists, sql, args...)
}

func (e executor) FingerprintGuardDelete(ctx context.Context, operationIDs []string) error {
	if _, err := e.q.Exec(ctx, sqlGuardRepoint, operationIDs); err != nil {
		return translate(err)
	}
	_, err := e.q.Exec(ctx, sqlGuardDelete, operationIDs)
	return translate(err)
}

func (e executor) FingerprintGuardGet(ctx context.Context, p *core.FingerprintGuardGetParams) (*core.FingerprintGuard, error) {
	var g core.FingerprintGuard
	err := e.q.QueryRow(ctx, sqlGuardGet, p.TenantID, p.Tool, p.ArgsHash).Scan(&g.OperationID, &g.IdempotencyKey, &g.GuardedUntil)
	if err != nil {
		return nil, translate(err)
	}
	return &g, nil
}

func (e executor) ClaimGetByKey(ctx context.Context, p *core.ClaimGetByKeyParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, p.Now)
}

func (e executor) ClaimGetByID(ctx context.Context, p *core.ClaimGetByIDParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByID, p.ID, p.Now)
}

func (e executor) ClaimTakeOver(ctx context.Context, p *core.ClaimTakeOverParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimTakeOver, p.ID, p.OperationID, p.UserID, []byte(p.Args), p.ArgsHash,
		int(p.TTL/time.Second), p.Now, int(p.Retention/time.Second), p.JobID, p.IntentKey, p.ApprovalWindow.Seconds(),
		p.ApprovalSummary)
}

func (e executor) ClaimLease(ctx context.Context, p *core.ClaimLeaseParams) (*Claim, error) {
	sql, args := audited(p.Audit, sqlClaimLease, sqlClaimLeaseAudited, p.OperationID, p.JobID, p.Lease.Seconds(), p.Now)
	c, err := e.claimRow(ctx, sql, args...)
	return enginesql.Leased(c, err, e.leaseRead(ctx, p))
}

func (e executor) ClaimLock(ctx context.Context, p *core.ClaimLeaseParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimLock, p.OperationID, p.JobID, p.Now)
	return enginesql.Leased(c, err, e.leaseRead(ctx, p))
}

// leaseRead reads the claim a lease or lock did not match, to tell why.
func (e executor) leaseRead(ctx context.Context, p *core.ClaimLeaseParams) func() (*Claim, error) {
	return func() (*Claim, error) {
		return e.ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: p.TenantID, OperationID: p.OperationID, Now: p.Now})
	}
}

func (e executor) ClaimComplete(ctx context.Context, p *core.ClaimCompleteParams) (*Claim, error) {
	sql, args := claimCompleteSQL(p)
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sql, args...)
}

// claimCompleteSQL is ClaimComplete's statement and arguments.
func claimCompleteSQL(p *core.ClaimCompleteParams) (string, []any) {
	plain, withAudit := sqlClaimComplete, sqlClaimCompleteAudited
	if p.Locked {
		plain, withAudit = sqlClaimCompleteLocked, sqlClaimCompleteLockedAudited
	}
	return audited(p.Audit, plain, withAudit, p.ID, p.Epoch, nullJSON(p.Result), p.Now)
}

// PipelineLock implements core.Pipeliner: the completion, the savepoint
// and the lock in one batch, which pgx sends in one round trip.
func (t *Tx) PipelineLock(ctx context.Context, complete *core.ClaimCompleteParams, savepoint bool, lock *core.ClaimLeaseParams) (completed, locked *Claim, err error) {
	if complete == nil && !savepoint {
		locked, err = t.ClaimLock(ctx, lock)
		return nil, locked, err
	}
	b := &pgx.Batch{}
	if complete != nil {
		sql, args := claimCompleteSQL(complete)
		b.Queue(sql, args...)
	}
	if savepoint {
		b.Queue(sqlSavepoint)
	}
	b.Queue(sqlClaimLock, lock.OperationID, lock.JobID, lock.Now)
	br := t.tx.SendBatch(ctx, b)
	completed, locked, err = readPipelineLock(br, complete != nil, savepoint)
	if cerr := br.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("%w: %w", core.ErrTxBroken, translate(cerr))
	}
	if err != nil {
		return completed, nil, err
	}
	if locked == nil { // matched no row: read the claim to tell why
		locked, err = enginesql.Leased(nil, vocab.ErrNotFound, t.leaseRead(ctx, lock))
	}
	return completed, locked, err
}

// readPipelineLock reads PipelineLock's results in order; locked is nil
// when the lock matched no row.
func readPipelineLock(br pgx.BatchResults, complete, savepoint bool) (completed, locked *Claim, err error) {
	if complete {
		c, err := scanClaim(br.QueryRow())
		if c, err = enginesql.Conditional(c, translate(err), vocab.ErrLeaseLost); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", core.ErrTxBroken, err)
		}
		completed = c
	}
	if savepoint {
		if _, err := br.Exec(); err != nil {
			return completed, nil, fmt.Errorf("%w: %w", core.ErrTxBroken, translate(err))
		}
	}
	locked, err = scanClaim(br.QueryRow())
	if err = translate(err); errors.Is(err, vocab.ErrNotFound) {
		return completed, nil, nil
	}
	return completed, locked, err
}

func (e executor) ClaimFail(ctx context.Context, p *core.ClaimFailParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimFail, p.ID, p.Epoch, errJSON, p.LeaseExpiredOnly, p.Now)
}

func (e executor) ClaimRelease(ctx context.Context, p *core.ClaimReleaseParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.LastError)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimRelease, p.ID, p.Epoch, errJSON)
}

func (e executor) ClaimReclaim(ctx context.Context, p *core.ClaimReclaimParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrLeaseLost, sqlClaimReclaim, p.ID, p.Epoch, p.JobID, p.Now)
}

func (e executor) ClaimSettle(ctx context.Context, p *core.ClaimSettleParams) (*Claim, error) {
	var errJSON, result []byte
	if p.Error != nil {
		var err error
		if errJSON, err = json.Marshal(p.Error); err != nil {
			return nil, err
		}
	} else {
		result = p.Result
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimSettle, p.ID, p.Epoch, result, errJSON, p.Now)
}

func (e executor) ClaimRedrive(ctx context.Context, p *core.ClaimRedriveParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimRedrive, p.ID, p.NextGeneration, p.JobID)
}

func (e executor) ClaimAbandon(ctx context.Context, p *core.ClaimAbandonParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimAbandon, p.ID, p.Epoch, p.JobID, errJSON, p.Now)
}

func (e executor) ClaimApprove(ctx context.Context, p *core.ClaimApproveParams) (*Claim, error) {
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimApprove, p.ID, p.ArgsHash, p.JobID, p.Now)
}

func (e executor) ClaimDecline(ctx context.Context, p *core.ClaimDeclineParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, vocab.ErrStateChanged, sqlClaimDecline, p.ID, errJSON, p.Expired, p.Now)
}

func (e executor) ClaimListApprovalExpired(ctx context.Context, p *core.ClaimListApprovalExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListApprovalExpired, p.Limit, p.Now)
}

func (e executor) ApprovalPendingCount(ctx context.Context, p *core.ApprovalPendingCountParams) (int, error) {
	if _, err := e.q.Exec(ctx, sqlApprovalLock, p.TenantID); err != nil {
		return 0, translate(err)
	}
	var n int
	err := e.q.QueryRow(ctx, sqlApprovalPendingCount, p.TenantID, p.Now).Scan(&n)
	return n, translate(err)
}

func (e executor) ClaimListOrphaned(ctx context.Context, p *core.ClaimListOrphanedParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListOrphaned, p.Limit, p.Now)
}

func (e executor) ClaimListStalled(ctx context.Context, p *core.ClaimListStalledParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListStalled, p.Limit, p.Now, p.StaleAfter.Seconds())
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
		return nil, fmt.Errorf("pgengine: argument name %q is not [a-z0-9_]{1,64}", p.ArgName)
	}
	return e.claimRows(ctx, sqlClaimList, p.TenantID, p.Tool, string(p.Status), p.Since, limit, p.ArgName, p.ArgValue)
}

func (e executor) ClaimGetByOperation(ctx context.Context, p *core.ClaimGetByOperationParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByOperation, p.TenantID, p.OperationID, p.Now)
}

func (e executor) ClaimListNewest(ctx context.Context, p *core.ClaimListNewestParams) ([]*Claim, error) {
	var (
		after   *time.Time
		afterID int64
	)
	if p.After != nil {
		after, afterID = &p.After.CreatedAt, p.After.ID
	}
	if p.ArgName != "" && !core.ValidArgName(p.ArgName) {
		return nil, fmt.Errorf("pgengine: argument name %q is not [a-z0-9_]{1,64}", p.ArgName)
	}
	return e.claimRows(ctx, sqlClaimListNewest, p.TenantID, p.Tool, string(p.Status), after, afterID, max(p.Limit, 1), p.ArgName, p.ArgValue)
}

func (e executor) JobGet(ctx context.Context, p *core.JobGetParams) (*core.Job, error) {
	query := sqlJobGet
	if p.Lock {
		query = sqlJobGetLocked
	}
	var j core.Job
	if err := e.q.QueryRow(ctx, query, p.ID).Scan(&j.ID, &j.State, &j.NextRunAt, &j.CancelRequested); err != nil {
		return nil, translate(err)
	}
	return &j, nil
}

func (e executor) ClaimListTerminal(ctx context.Context, p *core.ClaimListTerminalParams) ([]int64, error) {
	rows, err := e.q.Query(ctx, sqlClaimListTerminal, p.IDs)
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, translate(err)
}

func (e executor) ClaimListLeaseExpired(ctx context.Context, p *core.ClaimListLeaseExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListLeaseExpired, p.Limit, p.Now)
}

// claimRows runs a statement that returns claims.
func (e executor) claimRows(ctx context.Context, sql string, args ...any) ([]*Claim, error) {
	return list(ctx, e.q, scanClaim, sql, args...)
}

func (e executor) ClaimArchiveExpired(ctx context.Context, p *core.ClaimArchiveExpiredParams) (int, error) {
	tag, err := e.q.Exec(ctx, sqlClaimArchiveExpired, p.Limit, p.Now)
	if err != nil {
		return 0, translate(err)
	}
	return int(tag.RowsAffected()), nil
}

func (e executor) TombstoneGetByKey(ctx context.Context, p *core.TombstoneGetByKeyParams) (*core.Tombstone, error) {
	t, err := enginesql.ScanTombstone(e.q.QueryRow(ctx, sqlTombstoneGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, p.ArgsHash, p.Now), times{})
	return t, translate(err)
}

func (e executor) TombstoneDeleteExpired(ctx context.Context, p *core.TombstoneDeleteExpiredParams) (int, error) {
	tag, err := e.q.Exec(ctx, sqlTombstoneDeleteExpired, p.Limit, p.Now)
	if err != nil {
		return 0, translate(err)
	}
	return int(tag.RowsAffected()), nil
}

func (e executor) AuditInsert(ctx context.Context, p *core.AuditInsertParams) error {
	_, err := e.q.Exec(ctx, sqlAuditInsert, enginesql.AuditArgs(p, nullJSON)...)
	return translate(err)
}

func (e executor) AuditInsertMany(ctx context.Context, rows []*core.AuditInsertParams) error {
	if len(rows) == 1 {
		return e.AuditInsert(ctx, rows[0])
	}
	_, err := e.q.Exec(ctx, sqlAuditInsertMany, auditArrays(rows)...)
	return translate(err)
}

// auditArrays are the parameters of rows as one array per column, in
// enginesql.AuditArgs's order.
func auditArrays(rows []*core.AuditInsertParams) []any {
	var (
		text    [10][]string // every column but the nullable and numeric ones
		opIDs   = make([]*string, len(rows))
		jobIDs  = make([]*int64, len(rows))
		docs    [2][]*string // args, result
		ms      = make([]float64, len(rows))
		traceID = make([]*string, len(rows))
	)
	some := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	for i, r := range rows {
		for j, v := range []string{r.TenantID, r.UserID, r.TokenID, r.RequestID, r.Tool, r.IdempotencyKey,
			string(r.Decision), r.Reason, r.ArgsHash, r.ClientRequestID} {
			text[j] = append(text[j], v)
		}
		opIDs[i], traceID[i] = some(r.OperationID), some(r.TraceID)
		if r.JobID != 0 {
			jobIDs[i] = &r.JobID
		}
		docs[0] = append(docs[0], some(string(r.Args)))
		docs[1] = append(docs[1], some(string(r.Result)))
		ms[i] = float64(r.Duration) / float64(time.Millisecond)
	}
	return []any{text[0], text[1], text[2], text[3], text[4], text[5], opIDs, jobIDs,
		text[6], text[7], text[8], docs[0], docs[1], ms, text[9], traceID}
}

func (e executor) ClaimInsertMany(ctx context.Context, rows []*core.ClaimInsertParams) ([]*Claim, error) {
	var (
		text    [7][]string // operation id, tenant, tool, key, user, args, fingerprint
		ttl     = make([]int32, len(rows))
		retain  = make([]int32, len(rows))
		jobIDs  = make([]int64, len(rows))
		audits  = make([]*core.AuditInsertParams, 0, len(rows))
		intent  = make([]string, len(rows))
		window  = make([]float64, len(rows))
		confirm = make([]string, len(rows))
	)
	for i, r := range rows {
		for j, v := range []string{r.OperationID, r.TenantID, r.Tool, r.IdempotencyKey, r.UserID, string(r.Args), r.ArgsHash} {
			text[j] = append(text[j], v)
		}
		ttl[i], retain[i], jobIDs[i] = int32(r.TTL/time.Second), int32(r.Retention/time.Second), r.JobID
		intent[i], window[i], confirm[i] = r.IntentKey, r.DuplicateWindow.Seconds(), r.ConfirmDuplicateOf
		if r.Audit != nil {
			a := *r.Audit // the row's own operation: the statement pairs them by it
			a.OperationID, a.JobID = r.OperationID, r.JobID
			audits = append(audits, &a)
		}
	}
	args := append([]any{text[0], text[1], text[2], text[3], text[4], text[5], text[6], ttl, retain, jobIDs},
		auditArrays(audits)...)
	args = append(args, intent, window, confirm)
	written, err := list(ctx, e.q, scanClaim, sqlClaimInsertMany, args...)
	if err != nil {
		return nil, err
	}
	return enginesql.InOrder(rows, written), nil
}

func (e executor) AuditListByKey(ctx context.Context, p *core.AuditListByKeyParams) ([]*core.AuditEvent, error) {
	return list(ctx, e.q, scanAuditEvent, sqlAuditListByKey, p.TenantID, p.Tool, p.IdempotencyKey)
}

// times scans timestamptz columns as pgx reads them.
type times struct{}

func (times) Time(dst *time.Time) any { return dst }

func (times) NullTime(dst **time.Time) any { return dst }

func scanClaim(row enginesql.Row) (*Claim, error) { return enginesql.ScanClaim(row, times{}) }

func scanAuditEvent(row enginesql.Row) (*core.AuditEvent, error) {
	return enginesql.ScanAuditEvent(row, times{})
}

// nullJSON passes an empty document as SQL NULL.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}
