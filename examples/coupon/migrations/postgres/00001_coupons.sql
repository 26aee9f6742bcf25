-- +goose Up
CREATE TABLE coupons (
	coupon_id    text PRIMARY KEY,
	tenant_id    text NOT NULL,
	operation_id uuid NOT NULL UNIQUE,
	customer_id  text NOT NULL,
	percent_off  integer NOT NULL CHECK (percent_off BETWEEN 1 AND 100),
	created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX coupons_tenant_customer_idx ON coupons (tenant_id, customer_id);

-- +goose Down
DROP TABLE coupons;
