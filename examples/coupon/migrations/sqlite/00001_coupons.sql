-- +goose Up
CREATE TABLE coupons (
	coupon_id    TEXT PRIMARY KEY,
	tenant_id    TEXT NOT NULL,
	operation_id TEXT NOT NULL UNIQUE,
	customer_id  TEXT NOT NULL,
	percent_off  INTEGER NOT NULL CHECK (percent_off BETWEEN 1 AND 100),
	created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX coupons_tenant_customer_idx ON coupons (tenant_id, customer_id);

-- +goose Down
DROP TABLE coupons;
