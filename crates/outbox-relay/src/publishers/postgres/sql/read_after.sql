-- Up to 1,000 sink rows after an id, in id order: how a consumer of the
-- sink reads it. The envelope columns are NULL on rows published before the sink
-- had them.
--
-- Parameters: $1 int8 the id to read after (exclusive).
--
-- Returns id, event_id, topic, payload, headers, message_id, event_type,
-- event_version, aggregate_type, aggregate_id, enqueued_at, created_at,
-- publisher.
SELECT id, event_id, topic, payload, headers, message_id,
       event_type, event_version, aggregate_type, aggregate_id,
       enqueued_at, created_at, publisher
  FROM {schema}.published_events
 WHERE id > $1 ORDER BY id LIMIT 1000
