-- +goose Up
-- One row per (tenant, tool, key): the idempotency claim. See docs/design.md, "The gate".
CREATE TABLE idempotency_claims (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id     uuid        NOT NULL UNIQUE,
    tenant_id        text        NOT NULL,
    tool             text        NOT NULL,
    idempotency_key  text        NOT NULL,
    user_id          text        NOT NULL DEFAULT '',
    args             jsonb       NOT NULL,
    args_hash        text        NOT NULL,
    status           text        NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    epoch            bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    attempts         integer     NOT NULL DEFAULT 0,
    job_id           bigint,
    generation       integer     NOT NULL DEFAULT 0,
    downstream_key   text        GENERATED ALWAYS AS ('idg_' || operation_id::text || '_' || generation::text) STORED,
    ttl_seconds      integer     NOT NULL CHECK (ttl_seconds BETWEEN 60 AND 604800),
    result           jsonb,
    error            jsonb,
    last_error       jsonb,
    first_called_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    CONSTRAINT idempotency_claims_identity UNIQUE (tenant_id, tool, idempotency_key),
    CONSTRAINT idempotency_claims_terminal_expires CHECK ((status IN ('succeeded', 'failed')) = (expires_at IS NOT NULL)),
    CONSTRAINT idempotency_claims_running_leased CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

-- The reaper's scan: running claims by lease end.
CREATE INDEX idempotency_claims_lease_idx ON idempotency_claims (lease_expires_at) WHERE status = 'running';
-- The pruner's scan: terminal claims by expiry.
CREATE INDEX idempotency_claims_expires_idx ON idempotency_claims (expires_at) WHERE expires_at IS NOT NULL;
-- The reaper's check of claims whose job ended: in-flight claims by job.
CREATE INDEX idempotency_claims_inflight_job_idx ON idempotency_claims (job_id) WHERE status IN ('queued', 'running');
-- Operators' listings: by tenant and status, newest first.
CREATE INDEX idempotency_claims_tenant_status_idx ON idempotency_claims (tenant_id, status, updated_at);

-- Waiters LISTEN on idemgate_claim_terminal: one notification with the claim
-- id per transition into a terminal status, sent when the change commits.
-- +goose StatementBegin
CREATE FUNCTION idempotency_claims_notify_terminal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('idemgate_claim_terminal', NEW.id::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER idempotency_claims_notify_terminal AFTER UPDATE OF status ON idempotency_claims
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION idempotency_claims_notify_terminal();

-- Every attempt, append-only.
CREATE TABLE audit_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    tenant_id       text        NOT NULL,
    user_id         text        NOT NULL DEFAULT '',
    token_id        text        NOT NULL DEFAULT '',
    request_id      text        NOT NULL DEFAULT '',
    tool            text        NOT NULL,
    idempotency_key text        NOT NULL DEFAULT '',
    operation_id    uuid,
    job_id          bigint,
    decision        text        NOT NULL CHECK (decision IN ('accepted', 'replayed', 'conflict', 'in_flight', 'denied',
                                                             'started', 'succeeded', 'failed', 'reclaimed', 'redriven')),
    reason          text        NOT NULL DEFAULT '',
    args_hash       text        NOT NULL DEFAULT '',
    args            jsonb,
    result          jsonb,
    duration_ms     double precision
);
CREATE INDEX audit_events_key_idx ON audit_events (tenant_id, tool, idempotency_key);

-- +goose StatementBegin
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

-- Bearer tokens, stored only as a SHA-256 hash of the secret.
CREATE TABLE api_tokens (
    id         text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    user_id    text        NOT NULL,
    scopes     text[]      NOT NULL,
    token_hash bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX api_tokens_tenant_idx ON api_tokens (tenant_id);

-- The built-in tools' tables (orders, refunds, customers, ledger_entries,
-- users, seats, seat_resets, password_reset_tokens) were created here until
-- they moved to the built-ins' own migrations (internal/tools/migrations),
-- which create them IF NOT EXISTS: databases migrated before keep theirs.

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE audit_events;
DROP FUNCTION audit_events_append_only();
DROP TABLE idempotency_claims;
DROP FUNCTION idempotency_claims_notify_terminal();
