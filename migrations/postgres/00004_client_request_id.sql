-- +goose Up
-- The caller's X-Request-Id, kept apart from the request id idemgate mints
-- (a caller must not choose the id that names our log lines and rows).
ALTER TABLE audit_events ADD COLUMN client_request_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE audit_events DROP COLUMN client_request_id;
