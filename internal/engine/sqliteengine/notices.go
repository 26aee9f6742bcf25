package sqliteengine

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemgate/idemgate/internal/store"
)

// The gathered approval notices' statements (store.ApprovalNotices).
const (
	sqlNoticeLeader = `SELECT leader_operation_id FROM approval_notices WHERE tenant_id = ?1 AND operation_id = ?2`
	sqlNoticeBatch  = `SELECT operation_id FROM approval_notices
WHERE tenant_id = ?1 AND leader_operation_id = ?2 ORDER BY noticed_at, operation_id`
	sqlNoticeLast = `SELECT max(noticed_at) FROM approval_notices WHERE tenant_id = ?1`
	// sqlNoticeList records every waiting operation of the tenant that
	// no notice listed yet as listed by ?2's, oldest first.
	sqlNoticeList = `
INSERT INTO approval_notices (tenant_id, operation_id, leader_operation_id, noticed_at)
SELECT c.tenant_id, c.operation_id, ?2, ?3
FROM idempotency_claims c
WHERE c.tenant_id = ?1 AND c.status = 'awaiting_approval' AND c.approval_expires_at > ?3
	AND NOT EXISTS (SELECT 1 FROM approval_notices n WHERE n.tenant_id = c.tenant_id AND n.operation_id = c.operation_id)
ORDER BY c.created_at, c.id
RETURNING operation_id`
	// sqlNoticePrune forgets what notices listed once their period is
	// over and the operation no longer waits.
	sqlNoticePrune = `
DELETE FROM approval_notices
WHERE tenant_id = ?1 AND noticed_at < ?2
	AND NOT EXISTS (SELECT 1 FROM idempotency_claims c WHERE c.tenant_id = approval_notices.tenant_id
		AND c.operation_id = approval_notices.operation_id AND c.status = 'awaiting_approval')`
)

// ApprovalNoticeReserve implements store.ApprovalNotices, in a write
// transaction (which holds the database's write lock from its start).
func (s *Store) ApprovalNoticeReserve(ctx context.Context, p *store.ApprovalNoticeReserveParams) (*store.ApprovalNoticeBatch, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, translate(err)
	}
	defer func() { _ = tx.Rollback() }()
	var leader string
	err = tx.QueryRowContext(ctx, sqlNoticeLeader, p.TenantID, p.OperationID).Scan(&leader)
	switch {
	case err == nil && leader != p.OperationID:
		return &store.ApprovalNoticeBatch{Gathered: true}, nil
	case err == nil:
		ids, err := noticeIDs(tx.QueryContext(ctx, sqlNoticeBatch, p.TenantID, p.OperationID))
		if err != nil {
			return nil, err
		}
		return &store.ApprovalNoticeBatch{OperationIDs: ids}, translate(tx.Commit())
	case !errors.Is(err, sql.ErrNoRows):
		return nil, translate(err)
	}
	var last sql.NullString
	if err := tx.QueryRowContext(ctx, sqlNoticeLast, p.TenantID).Scan(&last); err != nil {
		return nil, translate(err)
	}
	if last.Valid {
		at, err := time.Parse(TimeFormat, last.String)
		if err != nil {
			return nil, err
		}
		if p.Now.Before(at.Add(p.Period)) {
			return &store.ApprovalNoticeBatch{Due: at.Add(p.Period)}, nil
		}
	}
	if _, err := tx.ExecContext(ctx, sqlNoticePrune, p.TenantID, FormatTime(p.Now.Add(-p.Period))); err != nil {
		return nil, translate(err)
	}
	ids, err := noticeIDs(tx.QueryContext(ctx, sqlNoticeList, p.TenantID, p.OperationID, FormatTime(p.Now)))
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, translate(err)
	}
	return &store.ApprovalNoticeBatch{OperationIDs: ids}, nil
}

// noticeIDs collects a query's operation ids.
func noticeIDs(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, translate(err)
		}
		ids = append(ids, id)
	}
	return ids, translate(rows.Err())
}
