-- +goose Up
-- The SQLite twin of postgres/00015_intent_incarnations.sql: a claim's
-- incarnation counts the earlier intents of its tenant, tool, key and
-- fingerprint that the key's history remembers, and its downstream key
-- carries it; a history row past its retention stays, marked forgotten,
-- to number the next intent, for a year.
ALTER TABLE idempotency_claims ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0 CHECK (incarnation >= 0);
ALTER TABLE idempotency_tombstones ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idempotency_tombstones ADD COLUMN forgotten_at TEXT;
CREATE INDEX idempotency_tombstones_forgotten_idx ON idempotency_tombstones (retain_until) WHERE forgotten_at IS NOT NULL;
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id)
        || CASE WHEN incarnation > 0 THEN 'r' || incarnation ELSE '' END
        || '_' || generation) VIRTUAL;

-- +goose Down
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key TEXT
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id) || '_' || generation) VIRTUAL;
DROP INDEX idempotency_tombstones_forgotten_idx;
DELETE FROM idempotency_tombstones WHERE forgotten_at IS NOT NULL;
ALTER TABLE idempotency_tombstones DROP COLUMN forgotten_at;
ALTER TABLE idempotency_tombstones DROP COLUMN incarnation;
ALTER TABLE idempotency_claims DROP COLUMN incarnation;
