-- Moves one batch of sent rows older than the cutoff to archived_messages.
--
-- Parameters: $1 timestamptz cutoff (cutoff.sql), $2 int8 batch size.
--
-- Returns the rows moved, as rows affected.
--
-- SKIP LOCKED: two archivers (the relay's and an operator's) split the
-- work instead of queueing behind each other. The outer WHERE repeats the
-- condition so that a row changed meanwhile is re-checked on its new version.
WITH moved AS (
       DELETE FROM {schema}.messages_sent
        WHERE id IN (SELECT id FROM {schema}.messages_sent WHERE sent_at < $1
                      LIMIT $2 FOR UPDATE SKIP LOCKED)
          AND sent_at < $1
       RETURNING id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
                 payload, headers, status, attempts, next_run_at, locked_by, locked_at,
                 last_error, dead_at, dead_reason, created_at, sent_at)
INSERT INTO {schema}.archived_messages
  (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
   payload, headers, status, attempts, next_run_at, locked_by, locked_at,
   last_error, dead_at, dead_reason, created_at, sent_at)
SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic,
       payload, headers, status, attempts, next_run_at, locked_by, locked_at,
       last_error, dead_at, dead_reason, created_at, sent_at
  FROM moved
