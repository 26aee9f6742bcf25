-- +goose Up
-- A tenant's approval thresholds: a call of refund_order or apply_credit
-- whose amount_cents is above its tool's threshold waits for a person's
-- approval. No row: no approval asked (the default).
CREATE TABLE IF NOT EXISTS approval_thresholds (
    tenant_id    text NOT NULL,
    tool         text NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    PRIMARY KEY (tenant_id, tool)
);

-- +goose Down
DROP TABLE approval_thresholds;
