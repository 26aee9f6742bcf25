-- +goose Up
CREATE TABLE licenses (
	license_id   TEXT PRIMARY KEY,
	tenant_id    TEXT NOT NULL,
	operation_id TEXT NOT NULL UNIQUE,
	customer_id  TEXT NOT NULL,
	plan         TEXT NOT NULL,
	seats        INTEGER NOT NULL CHECK (seats BETWEEN 1 AND 10000),
	created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX licenses_tenant_customer_idx ON licenses (tenant_id, customer_id);

CREATE TABLE workspaces (
	workspace_id TEXT PRIMARY KEY,
	tenant_id    TEXT NOT NULL,
	operation_id TEXT NOT NULL UNIQUE,
	name         TEXT NOT NULL,
	created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- +goose Down
DROP TABLE workspaces;
DROP TABLE licenses;
