-- +goose Up
-- A tenant's own settings, one row per tenant that has any; a tenant without
-- a row takes the deployment's. reset_link_base is the page its
-- password-reset mails link to (NULL: IDEMGATE_RESET_LINK_BASE's).
CREATE TABLE tenant_settings (
    tenant_id       TEXT PRIMARY KEY,
    reset_link_base TEXT
        CHECK (reset_link_base IS NULL OR reset_link_base GLOB 'http://?*' OR reset_link_base GLOB 'https://?*'),
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z')
) STRICT;

-- +goose Down
DROP TABLE tenant_settings;
