-- +goose Up
-- A new intent under a key whose history was forgotten gets new downstream
-- identities. A claim's incarnation counts the earlier intents of the same
-- tenant, tool, key and fingerprint that the key's history remembers; its
-- downstream key carries it ("idg_<intent key>r<incarnation>_<generation>",
-- unchanged for incarnation 0). A history row past its retention no
-- longer refuses its fingerprint (forgotten_at is set, with the forgotten
-- audit row) but stays, compact, to number the next intent, and is deleted
-- a year after its retention ended. See docs/design.md, "Downstream keys".
ALTER TABLE idempotency_claims ADD COLUMN incarnation integer NOT NULL DEFAULT 0
    CONSTRAINT idempotency_claims_incarnation_range CHECK (incarnation >= 0);
ALTER TABLE idempotency_tombstones ADD COLUMN incarnation integer NOT NULL DEFAULT 0;
ALTER TABLE idempotency_tombstones ADD COLUMN forgotten_at timestamptz;
CREATE INDEX idempotency_tombstones_forgotten_idx ON idempotency_tombstones (retain_until) WHERE forgotten_at IS NOT NULL;
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key text
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id::text)
        || CASE WHEN incarnation > 0 THEN 'r' || incarnation::text ELSE '' END
        || '_' || generation::text) STORED;

-- +goose Down
ALTER TABLE idempotency_claims DROP COLUMN downstream_key;
ALTER TABLE idempotency_claims ADD COLUMN downstream_key text
    GENERATED ALWAYS AS ('idg_' || coalesce(intent_key, operation_id::text) || '_' || generation::text) STORED;
DROP INDEX idempotency_tombstones_forgotten_idx;
DELETE FROM idempotency_tombstones WHERE forgotten_at IS NOT NULL;
ALTER TABLE idempotency_tombstones DROP COLUMN forgotten_at;
ALTER TABLE idempotency_tombstones DROP COLUMN incarnation;
ALTER TABLE idempotency_claims DROP COLUMN incarnation;
