-- +goose Up
-- The SQLite twin of postgres/00001_init.sql: the same tables, constraints
-- and indexes in SQLite's dialect. Where SQLite lacks a type:
--   * timestamps are TEXT in RFC 3339 UTC with milliseconds, exactly
--     'YYYY-MM-DDTHH:MM:SS.SSSZ' (strftime('%Y-%m-%dT%H:%M:%fZ', ...)); one
--     fixed width makes text order time order, and every timestamp column
--     checks the shape so that nothing else can be stored and mis-compared;
--   * JSON is TEXT checked with json_valid; uuids are TEXT checked for their
--     canonical lowercase shape; hashes are BLOBs; text[] is a JSON array;
--   * identity columns are INTEGER PRIMARY KEY AUTOINCREMENT, so that, like a
--     Postgres identity, an id is never reused after a delete.
-- Tables are STRICT, so a value of the wrong type is an error as in Postgres.
-- There is no NOTIFY trigger: SQLite has no LISTEN, and waiters poll.
CREATE TABLE idempotency_claims (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id     TEXT    NOT NULL UNIQUE
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    tenant_id        TEXT    NOT NULL,
    tool             TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    user_id          TEXT    NOT NULL DEFAULT '',
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    args_hash        TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TEXT
        CHECK (lease_expires_at IS NULL OR lease_expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    attempts         INTEGER NOT NULL DEFAULT 0,
    job_id           INTEGER,
    generation       INTEGER NOT NULL DEFAULT 0,
    downstream_key   TEXT    GENERATED ALWAYS AS ('idg_' || operation_id || '_' || generation) STORED,
    ttl_seconds      INTEGER NOT NULL CHECK (ttl_seconds BETWEEN 60 AND 604800),
    result           TEXT    CHECK (result IS NULL OR json_valid(result)),
    error            TEXT    CHECK (error IS NULL OR json_valid(error)),
    last_error       TEXT    CHECK (last_error IS NULL OR json_valid(last_error)),
    first_called_at  TEXT
        CHECK (first_called_at IS NULL OR first_called_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    updated_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (updated_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    expires_at       TEXT
        CHECK (expires_at IS NULL OR expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    CONSTRAINT idempotency_claims_identity UNIQUE (tenant_id, tool, idempotency_key),
    CONSTRAINT idempotency_claims_terminal_expires CHECK ((status IN ('succeeded', 'failed')) = (expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_running_leased CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
) STRICT;

-- The reaper's scan: running claims by lease end.
CREATE INDEX idempotency_claims_lease_idx ON idempotency_claims (lease_expires_at) WHERE status = 'running';
-- The pruner's scan: terminal claims by expiry.
CREATE INDEX idempotency_claims_expires_idx ON idempotency_claims (expires_at) WHERE expires_at IS NOT NULL;
-- The reaper's check of claims whose job ended: in-flight claims by job.
CREATE INDEX idempotency_claims_inflight_job_idx ON idempotency_claims (job_id) WHERE status IN ('queued', 'running');
-- Operators' listings: by tenant and status, newest first.
CREATE INDEX idempotency_claims_tenant_status_idx ON idempotency_claims (tenant_id, status, updated_at);

-- Every attempt, append-only.
CREATE TABLE audit_events (
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
                                                         'started', 'succeeded', 'failed', 'reclaimed', 'redriven')),
    reason          TEXT    NOT NULL DEFAULT '',
    args_hash       TEXT    NOT NULL DEFAULT '',
    args            TEXT    CHECK (args IS NULL OR json_valid(args)),
    result          TEXT    CHECK (result IS NULL OR json_valid(result)),
    duration_ms     REAL
) STRICT;
CREATE INDEX audit_events_key_idx ON audit_events (tenant_id, tool, idempotency_key);

-- SQLite has no TRUNCATE: an unqualified DELETE is a DELETE, and this
-- trigger stops it too.
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

-- Bearer tokens, stored only as a SHA-256 hash of the secret. scopes is a
-- JSON array of strings.
CREATE TABLE api_tokens (
    id         TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    scopes     TEXT NOT NULL CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
    token_hash BLOB NOT NULL UNIQUE,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    expires_at TEXT
        CHECK (expires_at IS NULL OR expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    revoked_at TEXT
        CHECK (revoked_at IS NULL OR revoked_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z')
) STRICT;
CREATE INDEX api_tokens_tenant_idx ON api_tokens (tenant_id);

-- The built-in tools' tables (orders, refunds, customers, ledger_entries,
-- users, seats, seat_resets, password_reset_tokens) were created here until
-- they moved to the built-ins' own migrations (internal/tools/migrations),
-- which create them IF NOT EXISTS: databases migrated before keep theirs.

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE audit_events;
DROP TABLE idempotency_claims;
