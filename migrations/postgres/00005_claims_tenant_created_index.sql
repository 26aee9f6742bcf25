-- +goose Up
-- list_operations and tasks/list page a tenant's operations newest first by
-- (created_at, id), which no claim transition changes: the index does not
-- stop Postgres from updating claims in place (HOT).
CREATE INDEX idempotency_claims_tenant_created_idx ON idempotency_claims (tenant_id, created_at DESC, id DESC);

-- +goose Down
DROP INDEX idempotency_claims_tenant_created_idx;
