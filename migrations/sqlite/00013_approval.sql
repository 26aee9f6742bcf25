-- +goose Up
-- The SQLite twin of postgres/00013_approval.sql: a claim that needs a
-- person's approval waits in awaiting_approval, with no job and no lease,
-- until an approver decides or approval_expires_at passes (set exactly
-- while it waits). The requester is the claim's user_id. SQLite cannot
-- change a CHECK in place: the table is rebuilt (SQLite's documented
-- procedure), with the same columns, constraints and indexes.
CREATE TABLE idempotency_claims_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id     TEXT    NOT NULL UNIQUE
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    tenant_id        TEXT    NOT NULL,
    tool             TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    user_id          TEXT    NOT NULL DEFAULT '',
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    args_hash        TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('awaiting_approval', 'queued', 'running', 'succeeded', 'failed')),
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TEXT
        CHECK (lease_expires_at IS NULL OR lease_expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    attempts         INTEGER NOT NULL DEFAULT 0,
    job_id           INTEGER,
    generation       INTEGER NOT NULL DEFAULT 0,
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
    retention_seconds INTEGER NOT NULL DEFAULT 2592000
    CHECK (retention_seconds BETWEEN 0 AND 31536000),
    intent_key TEXT
    CHECK (intent_key IS NULL OR (length(intent_key) = 32 AND intent_key NOT GLOB '*[^0-9a-f]*')),
    downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id) || '_' || generation) VIRTUAL,
    approval_expires_at TEXT
        CHECK (approval_expires_at IS NULL OR approval_expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    CONSTRAINT idempotency_claims_identity UNIQUE (tenant_id, tool, idempotency_key),
    CONSTRAINT idempotency_claims_terminal_expires CHECK ((status IN ('succeeded', 'failed')) = (expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_running_leased CHECK ((status = 'running') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_awaiting_deadline CHECK ((status = 'awaiting_approval') = (approval_expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_awaiting_no_job CHECK (status <> 'awaiting_approval' OR job_id IS NULL)
) STRICT;
INSERT INTO idempotency_claims_new (id, operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status, epoch, lease_expires_at, attempts, job_id, generation, ttl_seconds, result, error, last_error, first_called_at, created_at, updated_at, expires_at, retention_seconds, intent_key)
SELECT id, operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status, epoch, lease_expires_at, attempts, job_id, generation, ttl_seconds, result, error, last_error, first_called_at, created_at, updated_at, expires_at, retention_seconds, intent_key FROM idempotency_claims;
-- Ids are never reused: the new table continues the old one's sequence.
DELETE FROM sqlite_sequence WHERE name = 'idempotency_claims_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'idempotency_claims_new', seq FROM sqlite_sequence WHERE name = 'idempotency_claims';
DROP TABLE idempotency_claims;
ALTER TABLE idempotency_claims_new RENAME TO idempotency_claims;
CREATE INDEX idempotency_claims_lease_idx ON idempotency_claims (lease_expires_at) WHERE status = 'running';
CREATE INDEX idempotency_claims_expires_idx ON idempotency_claims (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idempotency_claims_inflight_job_idx ON idempotency_claims (job_id) WHERE status IN ('queued', 'running');
CREATE INDEX idempotency_claims_tenant_created_idx ON idempotency_claims (tenant_id, created_at DESC, id DESC);
-- The expiry pass: waiting claims by deadline.
CREATE INDEX idempotency_claims_approval_idx ON idempotency_claims (approval_expires_at)
    WHERE status = 'awaiting_approval';

-- +goose Down
-- Waiting claims cannot be kept: they fail approval_expired first.
UPDATE idempotency_claims SET status = 'failed', approval_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    error = '{"code":"approval_expired","message":"the approval feature was removed by a downgrade"}',
    expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || ttl_seconds || ' seconds')
WHERE status = 'awaiting_approval';
CREATE TABLE idempotency_claims_old (
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
    retention_seconds INTEGER NOT NULL DEFAULT 2592000
    CHECK (retention_seconds BETWEEN 0 AND 31536000),
    intent_key TEXT
    CHECK (intent_key IS NULL OR (length(intent_key) = 32 AND intent_key NOT GLOB '*[^0-9a-f]*')),
    downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id) || '_' || generation) VIRTUAL,
    CONSTRAINT idempotency_claims_identity UNIQUE (tenant_id, tool, idempotency_key),
    CONSTRAINT idempotency_claims_terminal_expires CHECK ((status IN ('succeeded', 'failed')) = (expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_running_leased CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
) STRICT;
INSERT INTO idempotency_claims_old (id, operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status, epoch, lease_expires_at, attempts, job_id, generation, ttl_seconds, result, error, last_error, first_called_at, created_at, updated_at, expires_at, retention_seconds, intent_key)
SELECT id, operation_id, tenant_id, tool, idempotency_key, user_id, args, args_hash, status, epoch, lease_expires_at, attempts, job_id, generation, ttl_seconds, result, error, last_error, first_called_at, created_at, updated_at, expires_at, retention_seconds, intent_key FROM idempotency_claims;
-- Ids are never reused: the new table continues the old one's sequence.
DELETE FROM sqlite_sequence WHERE name = 'idempotency_claims_old';
INSERT INTO sqlite_sequence (name, seq) SELECT 'idempotency_claims_old', seq FROM sqlite_sequence WHERE name = 'idempotency_claims';
DROP TABLE idempotency_claims;
ALTER TABLE idempotency_claims_old RENAME TO idempotency_claims;
CREATE INDEX idempotency_claims_lease_idx ON idempotency_claims (lease_expires_at) WHERE status = 'running';
CREATE INDEX idempotency_claims_expires_idx ON idempotency_claims (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idempotency_claims_inflight_job_idx ON idempotency_claims (job_id) WHERE status IN ('queued', 'running');
CREATE INDEX idempotency_claims_tenant_created_idx ON idempotency_claims (tenant_id, created_at DESC, id DESC);
