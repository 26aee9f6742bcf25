-- +goose Up
-- The SQLite twin of postgres/00016_approval_notices.sql: one row per
-- waiting operation a gathered approval notice listed.
CREATE TABLE approval_notices (
    tenant_id           TEXT NOT NULL,
    operation_id        TEXT NOT NULL,
    leader_operation_id TEXT NOT NULL,
    noticed_at          TEXT NOT NULL,
    PRIMARY KEY (tenant_id, operation_id)
);
CREATE INDEX approval_notices_tenant_noticed_idx ON approval_notices (tenant_id, noticed_at);

-- +goose Down
DROP TABLE approval_notices;
