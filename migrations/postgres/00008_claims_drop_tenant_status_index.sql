-- +goose Up
-- Every claim transition changed a column of this index (status, updated_at),
-- so every new claim version added an entry to it, and no query of the hot
-- path reads it: operators' listings (ClaimList) narrow by tenant on
-- idempotency_claims_tenant_created_idx and sort what they keep. One index
-- entry fewer per claim version.
DROP INDEX idempotency_claims_tenant_status_idx;

-- +goose Down
CREATE INDEX idempotency_claims_tenant_status_idx ON idempotency_claims (tenant_id, status, updated_at);
