-- +goose Up
-- A key's history: one row per fingerprint that ran under a
-- (tenant, tool, key) within its retention, not one row per key. A second
-- take-over (A, then B, then A again) used to overwrite A's row with B's,
-- and A ran again. Rows written before this migration keep what they knew
-- (the key's last fingerprint). SQLite cannot change a primary key or a
-- CHECK in place: both tables are rebuilt (SQLite's documented procedure).
CREATE TABLE idempotency_tombstones_new (
    tenant_id       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    args_hash       TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('succeeded', 'failed')),
    error_code      TEXT,
    expired_at      TEXT NOT NULL,
    retain_until    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, tool, idempotency_key, args_hash)
) STRICT;
INSERT INTO idempotency_tombstones_new SELECT tenant_id, tool, idempotency_key, args_hash, operation_id, status,
    error_code, expired_at, retain_until FROM idempotency_tombstones;
DROP TABLE idempotency_tombstones;
ALTER TABLE idempotency_tombstones_new RENAME TO idempotency_tombstones;
CREATE INDEX idempotency_tombstones_retain_idx ON idempotency_tombstones (retain_until);

-- Archiving a claim into the history, and forgetting a history row after
-- its retention, are events an operator can see in the audit trail.
CREATE TABLE audit_events_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    tenant_id       TEXT    NOT NULL,
    user_id         TEXT    NOT NULL DEFAULT '',
    token_id        TEXT    NOT NULL DEFAULT '',
    request_id      TEXT    NOT NULL DEFAULT '',
    tool            TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL DEFAULT '',
    operation_id    TEXT
        CHECK (operation_id IS NULL OR operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    job_id          INTEGER,
    decision        TEXT    NOT NULL CHECK (decision IN ('accepted', 'replayed', 'conflict', 'in_flight', 'denied',
                                                         'started', 'succeeded', 'failed', 'reclaimed', 'redriven',
                                                         'archived', 'forgotten')),
    reason          TEXT    NOT NULL DEFAULT '',
    args_hash       TEXT    NOT NULL DEFAULT '',
    args            TEXT    CHECK (args IS NULL OR json_valid(args)),
    result          TEXT    CHECK (result IS NULL OR json_valid(result)),
    duration_ms     REAL,
    client_request_id TEXT NOT NULL DEFAULT '',
    trace_id        TEXT
        CHECK (trace_id IS NULL OR (length(trace_id) = 32 AND trace_id NOT GLOB '*[^0-9a-f]*'))
) STRICT;
INSERT INTO audit_events_new (id, created_at, tenant_id, user_id, token_id, request_id, tool, idempotency_key,
    operation_id, job_id, decision, reason, args_hash, args, result, duration_ms, client_request_id, trace_id)
SELECT id, created_at, tenant_id, user_id, token_id, request_id, tool, idempotency_key,
    operation_id, job_id, decision, reason, args_hash, args, result, duration_ms, client_request_id, trace_id
FROM audit_events;
DROP TABLE audit_events;
ALTER TABLE audit_events_new RENAME TO audit_events;
CREATE INDEX audit_events_key_idx ON audit_events (tenant_id, tool, idempotency_key);
-- +goose StatementBegin
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
-- +goose StatementEnd

-- +goose Down
-- The audit table keeps its wider CHECK (rows may say archived or
-- forgotten); the history goes back to one row per key, its newest.
CREATE TABLE idempotency_tombstones_old (
    tenant_id       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    args_hash       TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('succeeded', 'failed')),
    error_code      TEXT,
    expired_at      TEXT NOT NULL,
    retain_until    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, tool, idempotency_key)
) STRICT;
INSERT INTO idempotency_tombstones_old SELECT tenant_id, tool, idempotency_key, args_hash, operation_id, status,
    error_code, expired_at, retain_until FROM idempotency_tombstones WHERE true ORDER BY expired_at
    ON CONFLICT (tenant_id, tool, idempotency_key) DO UPDATE SET args_hash = excluded.args_hash,
    operation_id = excluded.operation_id, status = excluded.status, error_code = excluded.error_code,
    expired_at = excluded.expired_at, retain_until = excluded.retain_until;
DROP TABLE idempotency_tombstones;
ALTER TABLE idempotency_tombstones_old RENAME TO idempotency_tombstones;
CREATE INDEX idempotency_tombstones_retain_idx ON idempotency_tombstones (retain_until);
