-- +goose Up
-- A credit's completing transaction sums the customer's ledger: index it
-- (without one, every credit scanned the whole ledger).
CREATE INDEX ledger_entries_customer_idx ON ledger_entries (tenant_id, customer_id);

-- +goose Down
DROP INDEX ledger_entries_customer_idx;
