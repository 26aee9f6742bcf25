-- +goose Up
-- The SQLite twin of postgres/00018_fingerprint_guards.sql: per (tenant,
-- tool, fingerprint) of a guarded tool, the intent that last claimed those
-- arguments and until when another key's call with them is held.
CREATE TABLE fingerprint_guards (
    tenant_id       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    args_hash       TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    guarded_until   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, tool, args_hash)
);
CREATE INDEX fingerprint_guards_until_idx ON fingerprint_guards (guarded_until);

-- +goose Down
DROP TABLE fingerprint_guards;
