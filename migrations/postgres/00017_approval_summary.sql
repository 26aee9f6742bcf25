-- +goose Up
-- A claim that waits for approval keeps its tool's summary of the call
-- (gate.Mutation.Review), written with the claim from a read transaction
-- begun as the call started waiting: what the approver sees besides the
-- arguments (a refund's currency, the order's total and what is already
-- refunded). NULL for a claim that never waited or a tool without one.
-- See docs/design.md, "Human approval".
ALTER TABLE idempotency_claims ADD COLUMN approval_summary text;

-- +goose Down
ALTER TABLE idempotency_claims DROP COLUMN approval_summary;
