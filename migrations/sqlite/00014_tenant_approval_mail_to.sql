-- +goose Up
-- The SQLite twin of postgres/00014_tenant_approval_mail_to.sql:
-- approval_mail_to is the addresses a tenant's approval notices are mailed
-- to, a JSON array of strings (NULL: no notice is mailed).
ALTER TABLE tenant_settings ADD COLUMN approval_mail_to TEXT
    CHECK (approval_mail_to IS NULL OR (json_valid(approval_mail_to) AND json_type(approval_mail_to) = 'array'
        AND json_array_length(approval_mail_to) > 0));

-- +goose Down
ALTER TABLE tenant_settings DROP COLUMN approval_mail_to;
