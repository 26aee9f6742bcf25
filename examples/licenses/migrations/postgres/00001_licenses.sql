-- +goose Up
CREATE TABLE licenses (
	license_id   text PRIMARY KEY,
	tenant_id    text NOT NULL,
	operation_id uuid NOT NULL UNIQUE,
	customer_id  text NOT NULL,
	plan         text NOT NULL,
	seats        integer NOT NULL CHECK (seats BETWEEN 1 AND 10000),
	created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX licenses_tenant_customer_idx ON licenses (tenant_id, customer_id);

CREATE TABLE workspaces (
	workspace_id text PRIMARY KEY,
	tenant_id    text NOT NULL,
	operation_id uuid NOT NULL UNIQUE,
	name         text NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE workspaces;
DROP TABLE licenses;
