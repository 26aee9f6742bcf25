-- +goose Up
-- Postgres drops its NOTIFY trigger at this version (waiting calls poll);
-- SQLite never had one. Kept so that both engines count the same versions.
SELECT 1;

-- +goose Down
SELECT 1;
