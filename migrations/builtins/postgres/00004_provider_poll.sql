-- +goose Up
-- The periodic list of Stripe's refunds, which catches what a missed
-- webhook would have said: its rows in provider_events are named by the
-- refund and the status it read (poll_<refund>_<status>), and its cursor
-- is kept here.
ALTER TABLE provider_events DROP CONSTRAINT IF EXISTS provider_events_source_check;
ALTER TABLE provider_events ADD CONSTRAINT provider_events_source_check CHECK (source IN ('webhook', 'poll'));

-- Where the periodic list of Stripe's refunds got to: the newest refund
-- it read (name stripe_refunds).
CREATE TABLE IF NOT EXISTS provider_cursors (
    name       text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE provider_cursors;
DELETE FROM provider_events WHERE source = 'poll';
ALTER TABLE provider_events DROP CONSTRAINT provider_events_source_check;
ALTER TABLE provider_events ADD CONSTRAINT provider_events_source_check CHECK (source IN ('webhook'));
