-- +goose Up
-- Downstream keys from the intent, not from the random operation id. A
-- new claim's intent_key is 128 bits (32 hex) of an HMAC-SHA256, under the
-- deployment's secret, of its tenant, tool, idempotency key and
-- fingerprint (gate.IntentKeyer), so the same intent re-created after a
-- lost commit (a failover to an asynchronous standby, a restore) gets the
-- same downstream key and the provider deduplicates it. Claims from before
-- this migration have none and keep the key they had (coalesce): a claim
-- in flight across the upgrade calls the provider with the key it used
-- before. See docs/design.md, "Downstream keys".
--
-- Postgres 15 cannot change a generated column's expression (SET
-- EXPRESSION is Postgres 17's): the column is dropped and added again,
-- which rewrites the table under an ACCESS EXCLUSIVE lock (a claims table
-- is bounded by its TTLs: seconds for a million claims).
ALTER TABLE idempotency_claims ADD COLUMN intent_key text
    CONSTRAINT idempotency_claims_intent_key_shape CHECK (intent_key ~ '^[0-9a-f]{32}$');
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key text
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id::text) || '_' || generation::text) STORED;

-- +goose Down
-- Claims made since go back to keys from their operation id: a claim in
-- flight across the downgrade would call its provider with a new key.
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims DROP COLUMN intent_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key text
    GENERATED ALWAYS AS ('idg_' || operation_id::text || '_' || generation::text) STORED;
