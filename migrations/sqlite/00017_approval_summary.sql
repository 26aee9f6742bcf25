-- +goose Up
-- The SQLite twin of postgres/00017_approval_summary.sql: a claim that
-- waits for approval keeps its tool's summary of the call
-- (gate.Mutation.Review); NULL otherwise.
ALTER TABLE idempotency_claims ADD COLUMN approval_summary TEXT;

-- +goose Down
ALTER TABLE idempotency_claims DROP COLUMN approval_summary;
