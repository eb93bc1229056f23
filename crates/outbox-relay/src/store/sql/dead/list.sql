-- Dead rows in id order. Dead is status = 'dead' or a dead_at: the relay
-- writes both together, but a row written by hand (or before a CHECK
-- refused it) may hold one without the other, and such a row is never
-- claimed again (the claim reads dead_at IS NULL), so an operator must see
-- it here.
--
-- Parameters: $1 text topic (NULL: any), $2 int8 limit.
--
-- Returns a dead-letter row: id, event_id, event_type, event_version,
-- aggregate_type, aggregate_id, topic, payload, headers, status, attempts,
-- next_run_at, last_error, dead_at, dead_reason, created_at.
SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
       payload, headers, status, attempts, next_run_at, last_error,
       dead_at, dead_reason, created_at
  FROM {schema}.messages
 WHERE (status = 'dead' OR dead_at IS NOT NULL)
   AND ($1::text IS NULL OR topic = $1)
 ORDER BY id LIMIT $2
