DO $m$ BEGIN
-- Least privilege for readers of all_messages, and headers the envelope can
-- carry.
--
-- all_messages used to read messages and messages_sent with its owner's
-- rights, so whoever could SELECT the view saw every payload, whatever was
-- granted on the tables. From PostgreSQL 15 the view checks the caller's
-- own rights on both tables (security_invoker); on older servers only
-- the grants keep it closed (`outbox grants` no longer gives producers the
-- view).
IF current_setting('server_version_num')::int >= 150000 THEN
    ALTER VIEW outbox.all_messages SET (security_invoker = true);
END IF;

-- Headers must be a JSON object of string values whose names do not
-- collide with the envelope's own (CloudEvents attributes, outbox
-- metadata, ce-/ce_ attribute headers). Until now the relay dropped a
-- non-object silently and let a colliding name overwrite, duplicate or be
-- overwritten by the envelope's field. The names are the library's
-- RESERVED_HEADERS and RESERVED_HEADER_PREFIXES; a test keeps both lists
-- equal.
--
-- A CHECK cannot tell an INSERT from the relay's later UPDATEs: a row
-- written before this migration with bad headers would make every claim,
-- settle or reap that touches it fail, and stall the relay. So rows
-- already there are not kept as they are: the constraint exempts dead rows
-- (dead_at set), and the rows still to publish that break the rule are
-- dead-lettered below, each alone, with a reason; an operator fixes their
-- headers and replays them (a replay of an unfixed row is refused by the
-- constraint). The constraint is added NOT VALID first so that the table
-- is locked before the sweep: a producer cannot commit a bad row between
-- the sweep and the validation, which then cannot fail.
-- The rule lives in one function, so the CHECK, the sweep below and
-- `dead replay` (which skips rows still breaking it) apply the same test.
CREATE FUNCTION outbox.headers_valid(headers jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $headers$
    SELECT (jsonb_typeof(headers) = 'object'
           AND NOT headers ?| ARRAY['specversion', 'id', 'source', 'type', 'subject', 'time', 'datacontenttype', 'dataschema', 'data', 'data_base64', 'eventversion', 'aggregatetype', 'outboxid', 'topic', 'outboxheaders', 'event_id', 'message_id', 'event_type', 'event_version', 'aggregate_type', 'aggregate_id', 'created_at', 'headers', 'payload']
           -- silent: an error (keyvalue() of a non-object) is no match; the
           -- jsonb_typeof test above has refused that row already.
           AND NOT jsonb_path_exists(headers,
               '$.keyvalue() ? (@.value.type() != "string" || @.key starts with "ce-" || @.key starts with "ce_")',
               '{}', true))
$headers$;

ALTER TABLE outbox.messages ADD CONSTRAINT messages_headers_valid CHECK (
    dead_at IS NOT NULL OR outbox.headers_valid(headers)
) NOT VALID;

UPDATE outbox.messages
   SET status = 'dead', dead_at = now(), locked_by = NULL, locked_at = NULL,
       dead_reason = 'headers refused by migration 6: they must be a JSON object of string values, '
           'with no name the envelope reserves (CloudEvents attributes, outbox fields, ce-/ce_ prefixes); '
           'fix them, then replay',
       last_error = 'headers refused by migration 6'
 WHERE dead_at IS NULL
   AND NOT outbox.headers_valid(headers);

ALTER TABLE outbox.messages VALIDATE CONSTRAINT messages_headers_valid;
INSERT INTO outbox.schema_migrations(version,name) VALUES (6,'least_privilege_headers');
END $m$;
