package pgstore

// All of pgstore's SQL.

// tokenColumns are selected by every token query, in scanToken's order.
const tokenColumns = `id, tenant_id, user_id, scopes, token_hash, created_at, expires_at, revoked_at`

const sqlTokenInsert = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING ` + tokenColumns

const sqlTokenGetByHash = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE token_hash = $1`

// Revoking twice keeps the first revoked_at. An empty $2 means any tenant.
const sqlTokenRevoke = `
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1 AND ($2::text = '' OR tenant_id = $2::text)
RETURNING ` + tokenColumns

const sqlTokenList = `
SELECT ` + tokenColumns + `
FROM api_tokens
WHERE tenant_id = $1
ORDER BY created_at, id`

const sqlOrderGet = `
SELECT tenant_id, order_id, charge_id, amount_cents, refunded_cents, currency, created_at
FROM orders
WHERE tenant_id = $1 AND order_id = $2`

// Seeding inserts what is missing and never changes an existing row: an
// order may already have refunds, a seat resets, a user reset mails, and
// rewriting them under running operations would be unsafe. One affected row
// means created, none means it existed.

const sqlSeedOrder = `
INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id, order_id) DO NOTHING`

const sqlSeedCustomer = `
INSERT INTO customers (tenant_id, customer_id, currency)
VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, customer_id) DO NOTHING`

const sqlSeedSeat = `
INSERT INTO seats (tenant_id, seat_id, user_id)
VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, seat_id) DO NOTHING`

const sqlSeedUser = `
INSERT INTO users (tenant_id, user_id, email)
VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, user_id) DO NOTHING`

// A fixed token value is inserted by hash if absent.
const sqlSeedTokenFixed = `
INSERT INTO api_tokens (id, tenant_id, user_id, scopes, token_hash, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (token_hash) DO NOTHING`
