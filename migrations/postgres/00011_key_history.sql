-- +goose Up
-- A key's history: one row per fingerprint that ran under a
-- (tenant, tool, key) within its retention, not one row per key. A second
-- take-over (A, then B, then A again) used to overwrite A's row with B's,
-- and A ran again. Rows written before this migration keep what they knew
-- (the key's last fingerprint).
ALTER TABLE idempotency_tombstones DROP CONSTRAINT idempotency_tombstones_pkey;
ALTER TABLE idempotency_tombstones ADD PRIMARY KEY (tenant_id, tool, idempotency_key, args_hash);

-- Archiving a claim into the history, and forgetting a history row after
-- its retention, are events an operator can see in the audit trail.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check CHECK (decision IN ('accepted', 'replayed',
    'conflict', 'in_flight', 'denied', 'started', 'succeeded', 'failed', 'reclaimed', 'redriven', 'archived', 'forgotten'));

-- +goose Down
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check CHECK (decision IN ('accepted', 'replayed',
    'conflict', 'in_flight', 'denied', 'started', 'succeeded', 'failed', 'reclaimed', 'redriven')) NOT VALID;
DELETE FROM idempotency_tombstones t USING idempotency_tombstones n
WHERE t.tenant_id = n.tenant_id AND t.tool = n.tool AND t.idempotency_key = n.idempotency_key
    AND t.expired_at < n.expired_at;
ALTER TABLE idempotency_tombstones DROP CONSTRAINT idempotency_tombstones_pkey;
ALTER TABLE idempotency_tombstones ADD PRIMARY KEY (tenant_id, tool, idempotency_key);
