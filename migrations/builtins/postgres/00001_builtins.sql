-- +goose Up
-- The built-in tools' tables (refund_order, apply_credit, reset_seat,
-- send_password_reset, get_order), recorded in the built-ins' own version
-- table. Until this line existed, idemgate's core migrations 00001 and
-- 00002 created them: on a database migrated then, every statement here
-- finds its table or index and changes nothing (IF NOT EXISTS).

-- Domain: orders and their refunds.
CREATE TABLE IF NOT EXISTS orders (
    tenant_id      text   NOT NULL,
    order_id       text   NOT NULL,
    charge_id      text   NOT NULL,
    amount_cents   bigint NOT NULL CHECK (amount_cents > 0),
    currency       text   NOT NULL,
    refunded_cents bigint NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0 AND refunded_cents <= amount_cents),
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, order_id)
);

CREATE TABLE IF NOT EXISTS refunds (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text   NOT NULL,
    order_id         text   NOT NULL,
    operation_id     uuid   NOT NULL UNIQUE,
    stripe_refund_id text   NOT NULL UNIQUE,
    amount_cents     bigint NOT NULL CHECK (amount_cents > 0),
    currency         text   NOT NULL,
    status           text   NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, order_id)
);

-- Domain: customers and their credit ledger.
CREATE TABLE IF NOT EXISTS customers (
    tenant_id   text NOT NULL,
    customer_id text NOT NULL,
    currency    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, customer_id)
);

CREATE TABLE IF NOT EXISTS ledger_entries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text   NOT NULL,
    customer_id  text   NOT NULL,
    operation_id uuid   NOT NULL UNIQUE,
    amount_cents bigint NOT NULL,
    currency     text   NOT NULL,
    memo         text   NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, customer_id)
);

-- Domain: users, seats and their resets.
CREATE TABLE IF NOT EXISTS users (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    email      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE IF NOT EXISTS seats (
    tenant_id     text    NOT NULL,
    seat_id       text    NOT NULL,
    user_id       text,
    reset_count   integer NOT NULL DEFAULT 0,
    last_reset_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, seat_id)
);

CREATE TABLE IF NOT EXISTS seat_resets (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     text NOT NULL,
    seat_id       text NOT NULL,
    operation_id  uuid NOT NULL UNIQUE,
    previous_user text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, seat_id) REFERENCES seats (tenant_id, seat_id)
);

-- Password-reset tokens, stored only as a hash.
CREATE TABLE IF NOT EXISTS password_reset_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text  NOT NULL,
    user_id      text  NOT NULL,
    operation_id uuid  NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    message_id   text  NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    FOREIGN KEY (tenant_id, user_id) REFERENCES users (tenant_id, user_id)
);

-- A credit's completing transaction sums the customer's ledger: index it
-- (without one, every credit scanned the whole ledger).
CREATE INDEX IF NOT EXISTS ledger_entries_customer_idx ON ledger_entries (tenant_id, customer_id);

-- +goose Down
DROP INDEX ledger_entries_customer_idx;
DROP TABLE password_reset_tokens;
DROP TABLE seat_resets;
DROP TABLE seats;
DROP TABLE users;
DROP TABLE ledger_entries;
DROP TABLE customers;
DROP TABLE refunds;
DROP TABLE orders;
