-- +goose Up
-- A refund at the provider that no operation explains (a drift record of
-- the built-in refunds) is an event an operator can see in the audit
-- trail: decision drift.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check CHECK (decision IN ('accepted', 'replayed',
    'conflict', 'in_flight', 'denied', 'started', 'succeeded', 'failed', 'reclaimed', 'redriven', 'archived', 'forgotten',
    'drift'));

-- +goose Down
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check CHECK (decision IN ('accepted', 'replayed',
    'conflict', 'in_flight', 'denied', 'started', 'succeeded', 'failed', 'reclaimed', 'redriven', 'archived', 'forgotten')) NOT VALID;
