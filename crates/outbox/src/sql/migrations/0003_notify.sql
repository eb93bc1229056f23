-- Wake relays the moment messages commit.
--
-- A statement-level trigger asks for one notification per INSERT statement,
-- and PostgreSQL folds identical notifications of one transaction into one:
-- a transaction enqueuing 10,000 rows costs a single NOTIFY, delivered at
-- commit and never for a rollback. Relays also poll, so a lost notification
-- only costs latency. The channel is `outbox_<schema>` (cut to 63 bytes).
CREATE FUNCTION {schema}.notify_relay() RETURNS trigger LANGUAGE plpgsql AS $notify$
BEGIN
    PERFORM pg_notify(left('outbox_' || TG_TABLE_SCHEMA, 63), '');
    RETURN NULL;
END
$notify$;

CREATE TRIGGER messages_notify_relay
    AFTER INSERT ON {schema}.messages
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_relay();
