package sqlitestore

// All of sqlitestore's SQL. Timestamps are TEXT in gatesqlite.TimeFormat;
// scopes are a JSON array; hashes are BLOBs.

// sqlNow is the database's clock in gatesqlite.TimeFormat.
const sqlNow = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// tokenColumns are selected by every token query, in scanToken's order.
const tokenColumns = `id, tenant_id, user_id, scopes, token_hash, created_at, expires_at, revoked_at`

const sqlTokenInsert = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING ` + tokenColumns

const sqlTokenGetByHash = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE token_hash = ?1`

// Revoking twice keeps the first revoked_at. An empty ?2 means any tenant.
const sqlTokenRevoke = `
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ` + sqlNow + `)
WHERE id = ?1 AND (?2 = '' OR tenant_id = ?2)
RETURNING ` + tokenColumns

const sqlTokenList = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE tenant_id = ?1
ORDER BY created_at, id`

const sqlOrderGet = `
SELECT tenant_id, order_id, charge_id, amount_cents, refunded_cents, currency, created_at
FROM orders
WHERE tenant_id = ?1 AND order_id = ?2`

// Seeding inserts what is missing and never changes an existing row: an
// order may already have refunds, a seat resets, a user reset mails, and
// rewriting them under running operations would be unsafe. One affected row
// means created, none means it existed.

const sqlSeedOrder = `
INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (tenant_id, order_id) DO NOTHING`

const sqlSeedCustomer = `
INSERT INTO customers (tenant_id, customer_id, currency)
VALUES (?1, ?2, ?3)
ON CONFLICT (tenant_id, customer_id) DO NOTHING`

const sqlSeedSeat = `
INSERT INTO seats (tenant_id, seat_id, user_id)
VALUES (?1, ?2, ?3)
ON CONFLICT (tenant_id, seat_id) DO NOTHING`

const sqlSeedUser = `
INSERT INTO users (tenant_id, user_id, email)
VALUES (?1, ?2, ?3)
ON CONFLICT (tenant_id, user_id) DO NOTHING`

// A fixed token value is inserted by hash if absent.
const sqlSeedTokenFixed = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (token_hash) DO NOTHING`

const sqlCustomerGet = `SELECT tenant_id, customer_id, currency FROM customers WHERE tenant_id = ?1 AND customer_id = ?2`

const sqlSeatGet = `SELECT seat_id FROM seats WHERE tenant_id = ?1 AND seat_id = ?2`

const sqlUserGet = `SELECT tenant_id, user_id, email FROM users WHERE tenant_id = ?1 AND user_id = ?2`

// SQLite has no data-modifying CTEs, so the domain writes below are two
// statements each, in the caller's transaction (which holds the write lock
// from its BEGIN IMMEDIATE).

// sqlRefundInsert records a Stripe refund; a second record of the same
// refund inserts nothing, and then sqlRefundAddToOrder does not run.
const sqlRefundInsert = `
INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (stripe_refund_id) DO NOTHING`

const sqlRefundAddToOrder = `
UPDATE orders SET refunded_cents = refunded_cents + ?3
WHERE tenant_id = ?1 AND order_id = ?2`

const sqlLedgerInsert = `
INSERT INTO ledger_entries (tenant_id, customer_id, operation_id, amount_cents, currency, memo)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING id`

// The balance after an entry, which the same transaction inserted.
const sqlLedgerBalance = `
SELECT coalesce(sum(amount_cents), 0) FROM ledger_entries WHERE tenant_id = ?1 AND customer_id = ?2`

// sqlSeatResetRecord records the reset with the seat's user before it (no
// row: the seat does not exist); sqlSeatResetFree then frees the seat.
const sqlSeatResetRecord = `
INSERT INTO seat_resets (tenant_id, seat_id, operation_id, previous_user)
SELECT tenant_id, seat_id, ?3, user_id FROM seats WHERE tenant_id = ?1 AND seat_id = ?2
RETURNING coalesce(previous_user, '')`

const sqlSeatResetFree = `
UPDATE seats SET user_id = NULL, reset_count = reset_count + 1, last_reset_at = ` + sqlNow + `
WHERE tenant_id = ?1 AND seat_id = ?2
RETURNING reset_count`

const sqlResetTokenInsert = `
INSERT INTO password_reset_tokens (tenant_id, user_id, operation_id, token_hash, message_id, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (token_hash) DO NOTHING`
