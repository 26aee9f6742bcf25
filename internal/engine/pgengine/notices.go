package pgengine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/store"
)

// The gathered approval notices' statements (store.ApprovalNotices).
const (
	sqlNoticeLock   = `SELECT pg_advisory_xact_lock(hashtextextended('idemgate.approval_notice/' || $1, 0))`
	sqlNoticeLeader = `SELECT leader_operation_id::text FROM approval_notices WHERE tenant_id = $1 AND operation_id = $2::uuid`
	sqlNoticeBatch  = `SELECT operation_id::text FROM approval_notices
WHERE tenant_id = $1 AND leader_operation_id = $2::uuid ORDER BY noticed_at, operation_id`
	sqlNoticeLast = `SELECT max(noticed_at) FROM approval_notices WHERE tenant_id = $1`
	// sqlNoticeList records every waiting operation of the tenant that
	// no notice listed yet as listed by $2's, oldest first.
	sqlNoticeList = `
INSERT INTO approval_notices (tenant_id, operation_id, leader_operation_id, noticed_at)
SELECT c.tenant_id, c.operation_id, $2::uuid, $3
FROM idempotency_claims c
WHERE c.tenant_id = $1 AND c.status = 'awaiting_approval' AND c.approval_expires_at > $3
	AND NOT EXISTS (SELECT 1 FROM approval_notices n WHERE n.tenant_id = c.tenant_id AND n.operation_id = c.operation_id)
ORDER BY c.created_at, c.id
RETURNING operation_id::text`
	// sqlNoticePrune forgets what notices listed once their period is
	// over and the operation no longer waits.
	sqlNoticePrune = `
DELETE FROM approval_notices n
WHERE n.tenant_id = $1 AND n.noticed_at < $2
	AND NOT EXISTS (SELECT 1 FROM idempotency_claims c WHERE c.tenant_id = n.tenant_id
		AND c.operation_id = n.operation_id AND c.status = 'awaiting_approval')`
)

// ApprovalNoticeReserve implements store.ApprovalNotices, in a transaction
// that holds the tenant's notice lock (an advisory transaction lock).
func (s *Store) ApprovalNoticeReserve(ctx context.Context, p *store.ApprovalNoticeReserveParams) (*store.ApprovalNoticeBatch, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, sqlNoticeLock, p.TenantID); err != nil {
		return nil, translate(err)
	}
	var leader string
	err = tx.QueryRow(ctx, sqlNoticeLeader, p.TenantID, p.OperationID).Scan(&leader)
	switch {
	case err == nil && leader != p.OperationID:
		return &store.ApprovalNoticeBatch{Gathered: true}, nil
	case err == nil:
		ids, err := noticeIDs(tx.Query(ctx, sqlNoticeBatch, p.TenantID, p.OperationID))
		if err != nil {
			return nil, err
		}
		return &store.ApprovalNoticeBatch{OperationIDs: ids}, tx.Commit(ctx)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, translate(err)
	}
	var last *time.Time
	if err := tx.QueryRow(ctx, sqlNoticeLast, p.TenantID).Scan(&last); err != nil {
		return nil, translate(err)
	}
	if last != nil && p.Now.Before(last.Add(p.Period)) {
		return &store.ApprovalNoticeBatch{Due: last.Add(p.Period)}, nil
	}
	if _, err := tx.Exec(ctx, sqlNoticePrune, p.TenantID, p.Now.Add(-p.Period)); err != nil {
		return nil, translate(err)
	}
	ids, err := noticeIDs(tx.Query(ctx, sqlNoticeList, p.TenantID, p.OperationID, p.Now))
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, translate(err)
	}
	return &store.ApprovalNoticeBatch{OperationIDs: ids}, nil
}

// noticeIDs collects a query's operation ids.
func noticeIDs(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, translate(err)
}
