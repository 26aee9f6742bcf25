-- +goose Up
-- Waiting calls no longer LISTEN: each api process polls the database for
-- the claims its calls await, all of them in one query, only while some
-- call waits. The trigger sent a NOTIFY on every terminal transition,
-- whether or not anyone waited, and pg_notify's commit-time lock on the
-- notification queue serialized every notifying commit in the cluster.
DROP TRIGGER idempotency_claims_notify_terminal ON idempotency_claims;
DROP FUNCTION idempotency_claims_notify_terminal();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION idempotency_claims_notify_terminal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('idemgate_claim_terminal', NEW.id::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER idempotency_claims_notify_terminal AFTER UPDATE OF status ON idempotency_claims
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION idempotency_claims_notify_terminal();
