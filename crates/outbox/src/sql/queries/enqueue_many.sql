-- Enqueue many messages in one round trip.
--
-- Parameters: the eight of enqueue_one.sql as arrays, one element per
-- message: $1 uuid[], $2 text[], $3 int4[], $4 text[], $5 text[],
-- $6 text[], $7 jsonb[], $8 jsonb[].
--
-- Returns id (int8), event_id (uuid) per message.
INSERT INTO {schema}.messages
  (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::text[],
                     $6::text[], $7::jsonb[], $8::jsonb[])
RETURNING id, event_id
