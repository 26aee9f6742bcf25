-- +goose Up
-- The ledger's index (ledger_entries_customer_idx) moved to the built-in
-- tools' own migrations (internal/tools/migrations), which create it IF NOT
-- EXISTS; databases migrated before keep the one this version made.
SELECT 1;

-- +goose Down
SELECT 1;
