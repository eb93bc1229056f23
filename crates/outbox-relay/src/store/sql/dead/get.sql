-- One message by id, whatever its status, from every live table (so that
-- "not dead" can be told from "not found"); the hot table's row when the id
-- is in both (a row written with an id the sequence had given out: it goes
-- dead beside the sent one).
--
-- Parameters: $1 int8 id.
--
-- Returns the columns of dead/list.sql, or no row.
SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
       payload, headers, status, attempts, next_run_at, last_error,
       dead_at, dead_reason, created_at
  FROM {schema}.all_messages WHERE id = $1
 ORDER BY status = 'sent' LIMIT 1
