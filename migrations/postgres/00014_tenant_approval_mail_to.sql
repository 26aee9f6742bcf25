-- +goose Up
-- approval_mail_to: the addresses a tenant's approval notices are mailed
-- to, one message to all of them per call that waits for a person's
-- approval (NULL: no notice is mailed). See docs/design.md, "Approval".
ALTER TABLE tenant_settings ADD COLUMN approval_mail_to text[]
    CHECK (array_ndims(approval_mail_to) = 1 AND cardinality(approval_mail_to) > 0
        AND array_position(approval_mail_to, NULL) IS NULL);

-- +goose Down
ALTER TABLE tenant_settings DROP COLUMN approval_mail_to;
