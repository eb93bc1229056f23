-- Enqueue one message.
--
-- Parameters: $1 uuid event_id, $2 text event_type, $3 int4 event_version,
-- $4 text aggregate_type, $5 text aggregate_id, $6 text topic, $7 jsonb
-- payload, $8 jsonb headers.
--
-- Returns id (int8).
INSERT INTO {schema}.messages
  (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id
