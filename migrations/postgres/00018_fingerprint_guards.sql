-- +goose Up
-- The duplicate guard: per (tenant, tool, fingerprint) of a guarded tool
-- (gate.Policy.DuplicateWindow), the intent that last claimed those
-- arguments, its key, and until when a call with the same arguments under
-- another key is held as a possible duplicate of it. The claiming
-- statement upserts its row under this primary key, so two such calls at
-- once cannot both pass; rows past their window whose operation no longer
-- waits or runs are pruned with the key history.
CREATE TABLE fingerprint_guards (
    tenant_id       text        NOT NULL,
    tool            text        NOT NULL,
    args_hash       text        NOT NULL,
    operation_id    uuid        NOT NULL,
    idempotency_key text        NOT NULL,
    guarded_until   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, tool, args_hash)
);
CREATE INDEX fingerprint_guards_until_idx ON fingerprint_guards (guarded_until);

-- +goose Down
DROP TABLE fingerprint_guards;
