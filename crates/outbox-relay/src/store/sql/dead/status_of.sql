-- The status of each of some messages that exist (live tables).
--
-- Parameters: $1 int8[] ids.
--
-- Returns id (int8), status (text) per message found.
SELECT id, status FROM {schema}.all_messages WHERE id = ANY($1)
