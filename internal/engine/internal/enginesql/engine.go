// Package enginesql holds what idemgate's two SQL drivers, pgengine and
// sqliteengine, share besides their SQL and their driver: the scan of
// the gate's rows in the column order both select, the translation of
// driver errors to domain's sentinels (Errors), the outcomes the gate's
// contract gives conditional claim writes (Conditional, Leased), and
// package store's seeding procedure and token checks.
//
// It imports no driver: a row is anything with Scan, and time, the one
// column type the engines store differently, goes through the engine's
// Times.
package enginesql

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Row is one row to scan: pgx.Row, pgx.Rows, *sql.Row or *sql.Rows.
type Row interface {
	Scan(dest ...any) error
}

// Rows is what pgx.Rows and *sql.Rows have in common, but Close.
type Rows interface {
	Row
	Next() bool
	Err() error
}

// Collect scans every row of rows with scan; the caller closes rows. No
// row is a nil slice.
func Collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Times gives the scan destination of a time column: Postgres scans
// timestamptz into the time itself, SQLite parses its stored text.
type Times interface {
	Time(dst *time.Time) any
	// NullTime leaves dst nil for NULL.
	NullTime(dst **time.Time) any
}

// ScanClaim scans a claim row: the columns every engine's claimColumns
// select, in this order, then expired and lease_live.
func ScanClaim(row Row, t Times) (*core.Claim, error) {
	var (
		c                              core.Claim
		status                         string
		ttlSeconds                     int64
		args, result, errJSON, lastErr []byte
		summary                        *string
	)
	if err := row.Scan(&c.ID, &c.OperationID, &c.TenantID, &c.Tool, &c.IdempotencyKey, &c.UserID, &args,
		&c.ArgsHash, &status, &c.Epoch, t.NullTime(&c.LeaseExpiresAt), &c.Attempts, &c.JobID, &c.Generation,
		&c.DownstreamKey, &ttlSeconds, &result, &errJSON, &lastErr, t.NullTime(&c.FirstCalledAt),
		t.Time(&c.CreatedAt), t.Time(&c.UpdatedAt), t.NullTime(&c.ExpiresAt), t.NullTime(&c.ApprovalExpiresAt),
		&summary, &c.Expired, &c.LeaseLive); err != nil {
		return nil, err
	}
	c.Args = args
	c.Status = vocab.Status(status)
	c.TTL = time.Duration(ttlSeconds) * time.Second
	if summary != nil {
		c.ApprovalSummary = *summary
	}
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
	return &c, nil
}

func decodeErrorInfo(b []byte) (*vocab.ErrorInfo, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var info vocab.ErrorInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("stored error: %w", err)
	}
	return &info, nil
}

// ScanTombstone scans a tombstone row: tenant_id, tool, idempotency_key,
// args_hash, operation_id, status, error_code (never NULL), expired_at,
// retain_until.
func ScanTombstone(row Row, t Times) (*core.Tombstone, error) {
	var ts core.Tombstone
	if err := row.Scan(&ts.TenantID, &ts.Tool, &ts.IdempotencyKey, &ts.ArgsHash, &ts.OperationID, &ts.Status,
		&ts.ErrorCode, t.Time(&ts.ExpiredAt), t.Time(&ts.RetainUntil)); err != nil {
		return nil, err
	}
	return &ts, nil
}

// ScanAuditEvent scans an audit row: id, created_at, tenant_id, user_id,
// token_id, request_id, client_request_id, tool, idempotency_key,
// operation_id and job_id (never NULL), decision, reason, args_hash, args,
// result, duration_ms and trace_id (never NULL).
func ScanAuditEvent(row Row, t Times) (*core.AuditEvent, error) {
	var (
		ev         core.AuditEvent
		decision   string
		args, res  []byte
		durationMS float64
	)
	if err := row.Scan(&ev.ID, t.Time(&ev.CreatedAt), &ev.TenantID, &ev.UserID, &ev.TokenID, &ev.RequestID,
		&ev.ClientRequestID, &ev.Tool, &ev.IdempotencyKey, &ev.OperationID, &ev.JobID, &decision, &ev.Reason,
		&ev.ArgsHash, &args, &res, &durationMS, &ev.TraceID); err != nil {
		return nil, err
	}
	ev.Decision = vocab.Decision(decision)
	ev.Args, ev.Result = args, res
	ev.Duration = time.Duration(durationMS * float64(time.Millisecond))
	return &ev, nil
}

// AuditArgs are the parameters of an audit insert, in the order both
// engines' statements take them: tenant, user, token, request id, tool,
// key, operation id and job id (NULL when unset), decision, reason, args
// hash, args and result (through jsonArg), duration in milliseconds,
// client request id, trace id (NULL when unset).
func AuditArgs(p *core.AuditInsertParams, jsonArg func(json.RawMessage) any) []any {
	var opID, jobID, traceID any
	if p.TraceID != "" {
		traceID = p.TraceID
	}
	if p.OperationID != "" {
		opID = p.OperationID
	}
	if p.JobID != 0 {
		jobID = p.JobID
	}
	return []any{p.TenantID, p.UserID, p.TokenID, p.RequestID, p.Tool, p.IdempotencyKey, opID, jobID,
		string(p.Decision), p.Reason, p.ArgsHash, jsonArg(p.Args), jsonArg(p.Result),
		float64(p.Duration) / float64(time.Millisecond), p.ClientRequestID, traceID}
}

// InOrder pairs the claims a ClaimInsertMany wrote with its rows, by
// operation id: out[i] is rows[i]'s claim, nil where none was written.
func InOrder(rows []*core.ClaimInsertParams, written []*core.Claim) []*core.Claim {
	byOperation := make(map[string]*core.Claim, len(written))
	for _, c := range written {
		byOperation[c.OperationID] = c
	}
	out := make([]*core.Claim, len(rows))
	for i, r := range rows {
		out[i] = byOperation[r.OperationID]
	}
	return out
}
