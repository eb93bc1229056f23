-- Publishes a batch to the sink: one row per message.
--
-- Parameters: $1 int8[] message ids, $2 uuid[] event ids, $3 text[]
-- topics, $4 text[] payloads (JSON text), $5 text the publisher's name,
-- $6 jsonb[] headers, $7 text[] event types, $8 int4[] event versions,
-- $9 text[] aggregate types, $10 text[] aggregate ids, $11 timestamptz[]
-- enqueue times (the messages' created_at; the sink's own created_at is
-- the publish time).
INSERT INTO {schema}.published_events
  (message_id, event_id, topic, payload, publisher, headers,
   event_type, event_version, aggregate_type, aggregate_id, enqueued_at)
SELECT m, e, t, p::jsonb, $5, h, et, ev, at, ai, ea
  FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $6::jsonb[],
              $7::text[], $8::int4[], $9::text[], $10::text[],
              $11::timestamptz[])
    AS u(m, e, t, p, h, et, ev, at, ai, ea)
