-- The newest replays of dead messages.
--
-- Parameters: $1 int8 limit.
--
-- Returns id (int8), message_id (int8), replayed_at (timestamptz),
-- replayed_by (text), dead_reason (text).
SELECT id, message_id, replayed_at, replayed_by, dead_reason
  FROM {schema}.dead_replays ORDER BY id DESC LIMIT $1
