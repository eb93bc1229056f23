-- Inbox: records that an event was processed.
--
-- Parameters: $1 text event_id, $2 text topic.
--
-- Returns the rows inserted, as rows affected: 1 the first time, 0 for a
-- duplicate.
INSERT INTO {schema}.processed_events (event_id, topic) VALUES ($1, $2)
ON CONFLICT (event_id) DO NOTHING
