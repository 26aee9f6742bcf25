-- +goose Up
-- A tenant's own settings, one row per tenant that has any; a tenant without
-- a row takes the deployment's. reset_link_base is the page its
-- password-reset mails link to (NULL: IDEMGATE_RESET_LINK_BASE's).
CREATE TABLE tenant_settings (
    tenant_id       text PRIMARY KEY,
    reset_link_base text CHECK (reset_link_base ~ '^https?://[^/?#]'),
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tenant_settings;
