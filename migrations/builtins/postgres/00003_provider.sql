-- +goose Up
-- The provider's side of refund_order: what Stripe reported about refunds
-- (signed webhooks), applied once per event, and
-- the refunds no operation explains.

-- One row per Stripe event applied (or acknowledged and ignored): the
-- event id is the key, so a redelivery or a concurrent delivery of the
-- same event finds it and changes nothing.
CREATE TABLE IF NOT EXISTS provider_events (
    event_id      text   PRIMARY KEY,
    type          text   NOT NULL,
    source        text   NOT NULL CHECK (source IN ('webhook')),
    event_created bigint NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now()
);

-- Each refund Stripe reported, with its status and the creation time (unix
-- seconds) of the event that set it: an earlier event never overwrites a
-- later status (status_rank breaks ties within a second: pending before a
-- final status).
CREATE TABLE IF NOT EXISTS provider_refunds (
    refund_id      text   PRIMARY KEY,
    charge_id      text   NOT NULL,
    tenant_id      text,
    order_id       text,
    operation_id   text,
    amount_cents   bigint NOT NULL,
    currency       text   NOT NULL,
    status         text   NOT NULL,
    status_rank    int    NOT NULL,
    status_at      bigint NOT NULL,
    failure_reason text   NOT NULL DEFAULT '',
    refund_created bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS provider_refunds_charge_idx ON provider_refunds (charge_id);

-- A refund at Stripe that no operation explains (kind): made outside
-- idemgate (unexplained), a second refund of one operation
-- (second_for_operation), or one whose operation failed definitively
-- (operation_failed).
CREATE TABLE IF NOT EXISTS refund_drift (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           text   NOT NULL,
    tenant_id      text   NOT NULL DEFAULT '',
    order_id       text   NOT NULL DEFAULT '',
    charge_id      text   NOT NULL,
    refund_id      text   NOT NULL,
    operation_id   text   NOT NULL DEFAULT '',
    amount_cents   bigint NOT NULL,
    currency       text   NOT NULL,
    refund_created bigint NOT NULL,
    detail         text   NOT NULL DEFAULT '',
    detected_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (refund_id, kind)
);
CREATE INDEX IF NOT EXISTS refund_drift_order_idx ON refund_drift (tenant_id, order_id);

-- A refund's order is found from its charge.
CREATE INDEX IF NOT EXISTS orders_charge_idx ON orders (charge_id);


-- +goose Down
DROP INDEX orders_charge_idx;
DROP TABLE refund_drift;
DROP TABLE provider_refunds;
DROP TABLE provider_events;
