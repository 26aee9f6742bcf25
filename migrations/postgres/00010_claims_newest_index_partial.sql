-- +goose Up
-- Agents' listings (ClaimListNewest) page a tenant's claims on
-- (tenant_id, created_at DESC, id DESC). As a plain index it was also a
-- candidate for the hot path's lookups by (tenant, tool, key): without
-- statistics (a new table, or autovacuum off) the planner costs it the same
-- as the unique index, and a generic plan cached then scans all of the
-- tenant's claims on every call for as long as the connection lives. As a
-- partial index whose predicate only ClaimListNewest states, it serves that
-- query alone. Not CONCURRENTLY: migrations run one at a time under an
-- advisory lock, which concurrent index builds would wait on; the build
-- holds up writes to the claims while it runs.
CREATE INDEX idempotency_claims_tenant_newest_idx
    ON idempotency_claims (tenant_id, created_at DESC, id DESC) WHERE created_at IS NOT NULL;
DROP INDEX idempotency_claims_tenant_created_idx;

-- +goose Down
CREATE INDEX idempotency_claims_tenant_created_idx ON idempotency_claims (tenant_id, created_at DESC, id DESC);
DROP INDEX idempotency_claims_tenant_newest_idx;
