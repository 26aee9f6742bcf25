-- +goose Up
-- The SQLite twin of postgres/00012_intent_keys.sql: downstream keys from
-- the intent key (an HMAC of tenant, tool, key and fingerprint under the
-- deployment's secret), the operation id's for claims without one, which
-- keep the key they had. SQLite's ALTER TABLE can drop a stored generated
-- column but add only a VIRTUAL one: the key is computed when read, from
-- the same expression, which nothing indexes.
ALTER TABLE idempotency_claims ADD COLUMN intent_key TEXT
    CHECK (intent_key IS NULL OR (length(intent_key) = 32 AND intent_key NOT GLOB '*[^0-9a-f]*'));
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id) || '_' || generation) VIRTUAL;

-- +goose Down
-- Claims made since go back to keys from their operation id: a claim in
-- flight across the downgrade would call its provider with a new key.
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims DROP COLUMN intent_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || operation_id || '_' || generation) VIRTUAL;
