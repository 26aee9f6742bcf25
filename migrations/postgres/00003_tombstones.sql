-- +goose Up
-- After a claim's replay window (its TTL) ends, a compact tombstone keeps
-- the intent for the tool's retention: the same key with the same
-- fingerprint is refused (idempotency_key_expired), never run again.
ALTER TABLE idempotency_claims ADD COLUMN retention_seconds integer NOT NULL DEFAULT 2592000
    CHECK (retention_seconds BETWEEN 0 AND 31536000);

CREATE TABLE idempotency_tombstones (
    tenant_id       text        NOT NULL,
    tool            text        NOT NULL,
    idempotency_key text        NOT NULL,
    args_hash       text        NOT NULL,
    operation_id    uuid        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
    error_code      text,
    expired_at      timestamptz NOT NULL,
    retain_until    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, tool, idempotency_key)
);
CREATE INDEX idempotency_tombstones_retain_idx ON idempotency_tombstones (retain_until);

-- +goose Down
DROP TABLE idempotency_tombstones;
ALTER TABLE idempotency_claims DROP COLUMN retention_seconds;
