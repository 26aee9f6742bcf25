-- +goose Up
-- The OpenTelemetry trace id of the call or job that wrote the row (32 hex
-- digits), NULL when it was not traced.
ALTER TABLE audit_events ADD COLUMN trace_id TEXT CHECK (trace_id ~ '^[0-9a-f]{32}$');

-- +goose Down
ALTER TABLE audit_events DROP COLUMN trace_id;
