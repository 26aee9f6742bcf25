-- +goose Up
-- Gathered approval notices: one row per waiting operation a notice
-- listed, naming the notice (its leader operation, whose job sent it) and
-- when. A tenant's approvers get at most one notice per period; the
-- operations that wait meanwhile are gathered into the next one. Rows of
-- operations that no longer wait are pruned once their period is over.
CREATE TABLE approval_notices (
    tenant_id           text        NOT NULL,
    operation_id        uuid        NOT NULL,
    leader_operation_id uuid        NOT NULL,
    noticed_at          timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, operation_id)
);
CREATE INDEX approval_notices_tenant_noticed_idx ON approval_notices (tenant_id, noticed_at);

-- +goose Down
DROP TABLE approval_notices;
