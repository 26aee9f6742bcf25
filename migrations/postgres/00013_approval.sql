-- +goose Up
-- Human approval: a claim that needs a person's approval waits in
-- awaiting_approval, with no job and no lease, until an approver decides
-- or approval_expires_at passes. approval_expires_at is set exactly while
-- the claim waits; a waiting claim never has a job (approving inserts it).
-- The requester is the claim's user_id. See docs/design.md, "Approval".
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_status_check;
ALTER TABLE idempotency_claims ADD CONSTRAINT idempotency_claims_status_check
    CHECK (status IN ('awaiting_approval', 'queued', 'running', 'succeeded', 'failed'));
ALTER TABLE idempotency_claims ADD COLUMN approval_expires_at timestamptz;
ALTER TABLE idempotency_claims ADD CONSTRAINT idempotency_claims_awaiting_deadline
    CHECK ((status = 'awaiting_approval') = (approval_expires_at IS NOT NULL));
ALTER TABLE idempotency_claims ADD CONSTRAINT idempotency_claims_awaiting_no_job
    CHECK (status <> 'awaiting_approval' OR job_id IS NULL);
-- The expiry pass: waiting claims by deadline.
CREATE INDEX idempotency_claims_approval_idx ON idempotency_claims (approval_expires_at)
    WHERE status = 'awaiting_approval';

-- +goose Down
-- Waiting claims cannot be kept: they fail approval_expired first.
UPDATE idempotency_claims SET status = 'failed', approval_expires_at = NULL, updated_at = now(),
    error = '{"code":"approval_expired","message":"the approval feature was removed by a downgrade"}',
    expires_at = now() + make_interval(secs => ttl_seconds)
WHERE status = 'awaiting_approval';
DROP INDEX idempotency_claims_approval_idx;
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_awaiting_no_job;
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_awaiting_deadline;
ALTER TABLE idempotency_claims DROP COLUMN approval_expires_at;
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_status_check;
ALTER TABLE idempotency_claims ADD CONSTRAINT idempotency_claims_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed'));
