package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

// The gate's statements: executor implements gate.Executor.

// Claim is an alias so that the queries read naturally.
type Claim = gate.Claim

// claimRow runs a statement that returns one claim.
func (e executor) claimRow(ctx context.Context, query string, args ...any) (*Claim, error) {
	c, err := scanClaim(e.queryRow(ctx, query, args...))
	return c, translate(err)
}

// claimWrite runs a conditional write that returns the claim it changed.
// No row means its condition failed: the error is then failed, the one
// gate.Executor names for the method (domain.ErrAlreadyExists,
// domain.ErrLeaseLost or domain.ErrStateChanged).
func (e executor) claimWrite(ctx context.Context, failed error, query string, args ...any) (*Claim, error) {
	c, err := e.claimRow(ctx, query, args...)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, failed
	}
	return c, err
}

func (e executor) ClaimInsert(ctx context.Context, p *gate.ClaimInsertParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrAlreadyExists, sqlClaimInsert, p.OperationID, p.TenantID, p.Tool, p.IdempotencyKey, p.UserID,
		string(p.Args), p.ArgsHash, int64(p.TTL/time.Second), int64(p.Retention/time.Second))
}

func (e executor) ClaimGetByKey(ctx context.Context, p *gate.ClaimGetByKeyParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, clock(p.Now))
}

func (e executor) ClaimGetByID(ctx context.Context, p *gate.ClaimGetByIDParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByID, p.ID, clock(p.Now))
}

func (e executor) ClaimTakeOver(ctx context.Context, p *gate.ClaimTakeOverParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrStateChanged, sqlClaimTakeOver, p.ID, p.OperationID, p.UserID, string(p.Args), p.ArgsHash,
		int64(p.TTL/time.Second), clock(p.Now), int64(p.Retention/time.Second))
}

func (e executor) ClaimSetJob(ctx context.Context, p *gate.ClaimSetJobParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimSetJob, p.ID, p.JobID)
}

func (e executor) ClaimLease(ctx context.Context, p *gate.ClaimLeaseParams) (*Claim, error) {
	c, err := e.claimRow(ctx, sqlClaimLease, p.ID, p.JobID, seconds(p.Lease), clock(p.Now))
	if !errors.Is(err, domain.ErrNotFound) {
		return c, err
	}
	c, err = e.ClaimGetByID(ctx, &gate.ClaimGetByIDParams{ID: p.ID, Now: p.Now})
	if err != nil {
		return nil, err
	}
	return c, domain.ErrLeaseUnavailable
}

func (e executor) ClaimComplete(ctx context.Context, p *gate.ClaimCompleteParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrLeaseLost, sqlClaimComplete, p.ID, p.Epoch, nullJSON(p.Result), clock(p.Now))
}

func (e executor) ClaimFail(ctx context.Context, p *gate.ClaimFailParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, domain.ErrLeaseLost, sqlClaimFail, p.ID, p.Epoch, string(errJSON), p.LeaseExpiredOnly, clock(p.Now))
}

func (e executor) ClaimRelease(ctx context.Context, p *gate.ClaimReleaseParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.LastError)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, domain.ErrLeaseLost, sqlClaimRelease, p.ID, p.Epoch, string(errJSON))
}

func (e executor) ClaimReclaim(ctx context.Context, p *gate.ClaimReclaimParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrLeaseLost, sqlClaimReclaim, p.ID, p.Epoch, p.JobID, clock(p.Now))
}

func (e executor) ClaimRedrive(ctx context.Context, p *gate.ClaimRedriveParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrStateChanged, sqlClaimRedrive, p.ID, p.NextGeneration, p.JobID)
}

func (e executor) ClaimAbandon(ctx context.Context, p *gate.ClaimAbandonParams) (*Claim, error) {
	errJSON, err := json.Marshal(p.Error)
	if err != nil {
		return nil, err
	}
	return e.claimWrite(ctx, domain.ErrStateChanged, sqlClaimAbandon, p.ID, p.Epoch, p.JobID, string(errJSON), clock(p.Now))
}

func (e executor) ClaimListOrphaned(ctx context.Context, p *gate.ClaimListOrphanedParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListOrphaned, p.Limit, clock(p.Now))
}

func (e executor) ClaimListStalled(ctx context.Context, p *gate.ClaimListStalledParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListStalled, p.Limit, clock(p.Now), p.StaleAfter.Seconds())
}

func (e executor) ClaimRepoint(ctx context.Context, p *gate.ClaimRepointParams) (*Claim, error) {
	return e.claimWrite(ctx, domain.ErrStateChanged, sqlClaimRepoint, p.ID, p.Epoch, p.OldJobID, p.NewJobID)
}

func (e executor) ClaimList(ctx context.Context, p *gate.ClaimListParams) ([]*Claim, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	return e.claimRows(ctx, sqlClaimList, p.TenantID, p.Tool, string(p.Status), clock(p.Since), limit)
}

func (e executor) ClaimGetByOperation(ctx context.Context, p *gate.ClaimGetByOperationParams) (*Claim, error) {
	return e.claimRow(ctx, sqlClaimGetByOperation, p.TenantID, p.OperationID)
}

func (e executor) ClaimListNewest(ctx context.Context, p *gate.ClaimListNewestParams) ([]*Claim, error) {
	var (
		after   any
		afterID int64
	)
	if p.After != nil {
		after, afterID = FormatTime(p.After.CreatedAt), p.After.ID
	}
	return e.claimRows(ctx, sqlClaimListNewest, p.TenantID, p.Tool, string(p.Status), after, afterID, max(p.Limit, 1))
}

// JobGet implements gate.Executor. Lock needs nothing more on SQLite: a
// transaction begins IMMEDIATE, holding the database's one write lock, so
// no worker fetches the job before it ends.
func (e executor) JobGet(ctx context.Context, p *gate.JobGetParams) (*gate.Job, error) {
	var (
		j    gate.Job
		next sql.NullString
	)
	if err := e.queryRow(ctx, sqlJobGet, p.ID).Scan(&j.ID, &j.State, &next); err != nil {
		return nil, translate(err)
	}
	if next.Valid {
		t, err := ParseTime(next.String)
		if err != nil {
			return nil, err
		}
		j.NextRunAt = &t
	}
	return &j, nil
}

func (e executor) ClaimListLeaseExpired(ctx context.Context, p *gate.ClaimListLeaseExpiredParams) ([]*Claim, error) {
	return e.claimRows(ctx, sqlClaimListLeaseExpired, p.Limit, clock(p.Now))
}

// claimRows reads every row before returning, so that the (only)
// connection is free again when it returns.
func (e executor) claimRows(ctx context.Context, query string, args ...any) ([]*Claim, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*Claim
	for rows.Next() {
		c, err := scanClaim(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, c)
	}
	return out, translate(rows.Err())
}

func (e executor) ClaimArchiveExpired(ctx context.Context, p *gate.ClaimArchiveExpiredParams) (int, error) {
	if _, err := e.exec(ctx, sqlClaimArchiveTombstones, p.Limit, clock(p.Now)); err != nil {
		return 0, translate(err)
	}
	res, err := e.exec(ctx, sqlClaimArchiveDelete, p.Limit, clock(p.Now))
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

func (e executor) TombstoneGetByKey(ctx context.Context, p *gate.TombstoneGetByKeyParams) (*gate.Tombstone, error) {
	var (
		t                  gate.Tombstone
		expired, retainTil string
	)
	err := e.queryRow(ctx, sqlTombstoneGetByKey, p.TenantID, p.Tool, p.IdempotencyKey, clock(p.Now)).Scan(&t.TenantID, &t.Tool,
		&t.IdempotencyKey, &t.ArgsHash, &t.OperationID, &t.Status, &t.ErrorCode, &expired, &retainTil)
	if err != nil {
		return nil, translate(err)
	}
	if t.ExpiredAt, err = ParseTime(expired); err != nil {
		return nil, err
	}
	if t.RetainUntil, err = ParseTime(retainTil); err != nil {
		return nil, err
	}
	return &t, nil
}

func (e executor) TombstoneDeleteExpired(ctx context.Context, p *gate.TombstoneDeleteExpiredParams) (int, error) {
	res, err := e.exec(ctx, sqlTombstoneDeleteExpired, p.Limit, clock(p.Now))
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

func (e executor) AuditInsert(ctx context.Context, p *gate.AuditInsertParams) error {
	var opID, jobID any
	if p.OperationID != "" {
		opID = p.OperationID
	}
	if p.JobID != 0 {
		jobID = p.JobID
	}
	_, err := e.exec(ctx, sqlAuditInsert, p.TenantID, p.UserID, p.TokenID, p.RequestID, p.Tool,
		p.IdempotencyKey, opID, jobID, string(p.Decision), p.Reason, p.ArgsHash, nullJSON(p.Args),
		nullJSON(p.Result), float64(p.Duration)/float64(time.Millisecond), p.ClientRequestID)
	return translate(err)
}

func (e executor) AuditListByKey(ctx context.Context, p *gate.AuditListByKeyParams) ([]*gate.AuditEvent, error) {
	rows, err := e.query(ctx, sqlAuditListByKey, p.TenantID, p.Tool, p.IdempotencyKey)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*gate.AuditEvent
	for rows.Next() {
		var (
			ev         gate.AuditEvent
			createdAt  string
			decision   string
			args, res  []byte
			durationMS float64
		)
		if err := rows.Scan(&ev.ID, &createdAt, &ev.TenantID, &ev.UserID, &ev.TokenID, &ev.RequestID, &ev.ClientRequestID, &ev.Tool,
			&ev.IdempotencyKey, &ev.OperationID, &ev.JobID, &decision, &ev.Reason, &ev.ArgsHash, &args, &res,
			&durationMS); err != nil {
			return nil, translate(err)
		}
		if ev.CreatedAt, err = ParseTime(createdAt); err != nil {
			return nil, err
		}
		ev.Decision = domain.Decision(decision)
		ev.Args, ev.Result = args, res
		ev.Duration = time.Duration(durationMS * float64(time.Millisecond))
		out = append(out, &ev)
	}
	return out, translate(rows.Err())
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

func scanClaim(row scanner) (*Claim, error) {
	var (
		c                                        Claim
		status                                   string
		ttlSeconds                               int64
		args, result, errJSON, lastErr           []byte
		leaseExpiresAt, firstCalledAt, expiresAt sql.NullString
		createdAt, updatedAt                     string
	)
	if err := row.Scan(&c.ID, &c.OperationID, &c.TenantID, &c.Tool, &c.IdempotencyKey, &c.UserID, &args,
		&c.ArgsHash, &status, &c.Epoch, &leaseExpiresAt, &c.Attempts, &c.JobID, &c.Generation, &c.DownstreamKey,
		&ttlSeconds, &result, &errJSON, &lastErr, &firstCalledAt, &createdAt, &updatedAt, &expiresAt,
		&c.Expired, &c.LeaseLive); err != nil {
		return nil, err
	}
	c.Args = args
	c.Status = domain.Status(status)
	c.TTL = time.Duration(ttlSeconds) * time.Second
	if len(result) > 0 {
		c.Result = result
	}
	var err error
	if c.Error, err = decodeErrorInfo(errJSON); err != nil {
		return nil, err
	}
	if c.LastError, err = decodeErrorInfo(lastErr); err != nil {
		return nil, err
	}
	if c.CreatedAt, err = ParseTime(createdAt); err != nil {
		return nil, err
	}
	if c.UpdatedAt, err = ParseTime(updatedAt); err != nil {
		return nil, err
	}
	if c.LeaseExpiresAt, err = ParseNullTime(leaseExpiresAt); err != nil {
		return nil, err
	}
	if c.FirstCalledAt, err = ParseNullTime(firstCalledAt); err != nil {
		return nil, err
	}
	if c.ExpiresAt, err = ParseNullTime(expiresAt); err != nil {
		return nil, err
	}
	return &c, nil
}

func decodeErrorInfo(b []byte) (*domain.ErrorInfo, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var info domain.ErrorInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("sqlitestore: stored error: %w", err)
	}
	return &info, nil
}

// nullJSON passes an empty document as SQL NULL, and any other as TEXT.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
