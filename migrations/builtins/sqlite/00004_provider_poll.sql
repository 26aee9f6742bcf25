-- +goose Up
-- The periodic list of Stripe's refunds (see the Postgres file): events
-- of source poll, and the list's cursor. SQLite cannot change a CHECK, so
-- provider_events is rebuilt.
CREATE TABLE provider_events_new (
    event_id      TEXT    PRIMARY KEY,
    type          TEXT    NOT NULL,
    source        TEXT    NOT NULL CHECK (source IN ('webhook', 'poll')),
    event_created INTEGER NOT NULL,
    received_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
INSERT INTO provider_events_new (event_id, type, source, event_created, received_at)
    SELECT event_id, type, source, event_created, received_at FROM provider_events;
DROP TABLE provider_events;
ALTER TABLE provider_events_new RENAME TO provider_events;

CREATE TABLE IF NOT EXISTS provider_cursors (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- +goose Down
DROP TABLE provider_cursors;
CREATE TABLE provider_events_old (
    event_id      TEXT    PRIMARY KEY,
    type          TEXT    NOT NULL,
    source        TEXT    NOT NULL CHECK (source IN ('webhook')),
    event_created INTEGER NOT NULL,
    received_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
INSERT INTO provider_events_old (event_id, type, source, event_created, received_at)
    SELECT event_id, type, source, event_created, received_at FROM provider_events WHERE source = 'webhook';
DROP TABLE provider_events;
ALTER TABLE provider_events_old RENAME TO provider_events;
