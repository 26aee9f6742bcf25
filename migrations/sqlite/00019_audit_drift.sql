-- +goose Up
-- A refund at the provider that no operation explains (a drift record of
-- the built-in refunds) is an event an operator can see in the audit
-- trail: decision drift.
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
                                                         'archived', 'forgotten', 'drift')),
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
-- The audit table keeps its wider CHECK (rows may say drift).
SELECT 1;
