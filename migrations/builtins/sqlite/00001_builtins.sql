-- +goose Up
-- The built-in tools' tables (refund_order, apply_credit, reset_seat,
-- send_password_reset, get_order), recorded in the built-ins' own version
-- table. Until this line existed, idemgate's core migrations 00001 and
-- 00002 created them: on a database migrated then, every statement here
-- finds its table or index and changes nothing (IF NOT EXISTS).

-- Domain: orders and their refunds.
CREATE TABLE IF NOT EXISTS orders (
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL,
    charge_id      TEXT    NOT NULL,
    amount_cents   INTEGER NOT NULL CHECK (amount_cents > 0),
    currency       TEXT    NOT NULL,
    refunded_cents INTEGER NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0 AND refunded_cents <= amount_cents),
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    PRIMARY KEY (tenant_id, order_id)
) STRICT;

CREATE TABLE IF NOT EXISTS refunds (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id        TEXT    NOT NULL,
    order_id         TEXT    NOT NULL,
    operation_id     TEXT    NOT NULL UNIQUE
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    stripe_refund_id TEXT    NOT NULL UNIQUE,
    amount_cents     INTEGER NOT NULL CHECK (amount_cents > 0),
    currency         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, order_id)
) STRICT;

-- Domain: customers and their credit ledger.
CREATE TABLE IF NOT EXISTS customers (
    tenant_id   TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    currency    TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    PRIMARY KEY (tenant_id, customer_id)
) STRICT;

CREATE TABLE IF NOT EXISTS ledger_entries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id    TEXT    NOT NULL,
    customer_id  TEXT    NOT NULL,
    operation_id TEXT    NOT NULL UNIQUE
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    amount_cents INTEGER NOT NULL,
    currency     TEXT    NOT NULL,
    memo         TEXT    NOT NULL DEFAULT '',
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, customer_id)
) STRICT;

-- Domain: users, seats and their resets.
CREATE TABLE IF NOT EXISTS users (
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    email      TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    PRIMARY KEY (tenant_id, user_id)
) STRICT;

CREATE TABLE IF NOT EXISTS seats (
    tenant_id     TEXT    NOT NULL,
    seat_id       TEXT    NOT NULL,
    user_id       TEXT,
    reset_count   INTEGER NOT NULL DEFAULT 0,
    last_reset_at TEXT
        CHECK (last_reset_at IS NULL OR last_reset_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    PRIMARY KEY (tenant_id, seat_id)
) STRICT;

CREATE TABLE IF NOT EXISTS seat_resets (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT NOT NULL,
    seat_id       TEXT NOT NULL,
    operation_id  TEXT NOT NULL UNIQUE
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    previous_user TEXT,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    FOREIGN KEY (tenant_id, seat_id) REFERENCES seats (tenant_id, seat_id)
) STRICT;

-- Password-reset tokens, stored only as a hash.
CREATE TABLE IF NOT EXISTS password_reset_tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    operation_id TEXT NOT NULL
        CHECK (operation_id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    token_hash   BLOB NOT NULL UNIQUE,
    message_id   TEXT NOT NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    expires_at   TEXT NOT NULL
        CHECK (expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    used_at      TEXT
        CHECK (used_at IS NULL OR used_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
    FOREIGN KEY (tenant_id, user_id) REFERENCES users (tenant_id, user_id)
) STRICT;

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
