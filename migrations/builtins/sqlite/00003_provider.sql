-- +goose Up
-- The provider's side of refund_order: what Stripe reported about refunds
-- (signed webhooks), applied once per event, and
-- the refunds no operation explains. See the Postgres file for each
-- table's meaning.
CREATE TABLE IF NOT EXISTS provider_events (
    event_id      TEXT    PRIMARY KEY,
    type          TEXT    NOT NULL,
    source        TEXT    NOT NULL CHECK (source IN ('webhook')),
    event_created INTEGER NOT NULL,
    received_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE TABLE IF NOT EXISTS provider_refunds (
    refund_id      TEXT    PRIMARY KEY,
    charge_id      TEXT    NOT NULL,
    tenant_id      TEXT,
    order_id       TEXT,
    operation_id   TEXT,
    amount_cents   INTEGER NOT NULL,
    currency       TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    status_rank    INTEGER NOT NULL,
    status_at      INTEGER NOT NULL,
    failure_reason TEXT    NOT NULL DEFAULT '',
    refund_created INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS provider_refunds_charge_idx ON provider_refunds (charge_id);

CREATE TABLE IF NOT EXISTS refund_drift (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    kind           TEXT    NOT NULL,
    tenant_id      TEXT    NOT NULL DEFAULT '',
    order_id       TEXT    NOT NULL DEFAULT '',
    charge_id      TEXT    NOT NULL,
    refund_id      TEXT    NOT NULL,
    operation_id   TEXT    NOT NULL DEFAULT '',
    amount_cents   INTEGER NOT NULL,
    currency       TEXT    NOT NULL,
    refund_created INTEGER NOT NULL,
    detail         TEXT    NOT NULL DEFAULT '',
    detected_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (refund_id, kind)
) STRICT;
CREATE INDEX IF NOT EXISTS refund_drift_order_idx ON refund_drift (tenant_id, order_id);

CREATE INDEX IF NOT EXISTS orders_charge_idx ON orders (charge_id);


-- +goose Down
DROP INDEX orders_charge_idx;
DROP TABLE refund_drift;
DROP TABLE provider_refunds;
DROP TABLE provider_events;
