-- Claim a batch with ordering per aggregate on: claim.sql, claiming
-- nothing unless the relay is registered under its token with a live lease.
--
-- Parameters: those of claim.sql ($1 int8 how many rows at most, $2 text
-- the relay's id, $3 int8 the lowest id to read, $4 int8 the batch's byte
-- budget, $5 int8 the max message size in bytes), then $6 int8 the relay's
-- token.
--
-- Returns claim.sql's columns (the claimed row, snapshot_xmin,
-- snapshot_xmax), then the row's aggregate_key (int8).
--
-- The relay's row in relays is held FOR SHARE until the claim commits, so
-- a relay taking its buckets over waits for it (see migration 7).
WITH a AS (SELECT 1 FROM {schema}.relays
            WHERE relay_id = $2 AND token = $6 AND lease_until > now() FOR SHARE),
     c AS (
       SELECT id,
              (octet_length(payload::text) + octet_length(headers::text)
               + octet_length(topic) + octet_length(event_type)
               + octet_length(aggregate_type) + octet_length(aggregate_id))::int8 AS size
         FROM {schema}.messages
        WHERE id >= $3 AND status IN ('pending', 'failed') AND next_run_at <= now()
          AND dead_at IS NULL AND EXISTS (SELECT 1 FROM a)
        ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED),
     w AS (
       SELECT id, size, row_number() OVER (ORDER BY id) AS n,
              sum(CASE WHEN size <= $5::int8 THEN size ELSE 0 END)
                OVER (ORDER BY id) AS running
         FROM c),
     b AS (SELECT id, size FROM w WHERE n = 1 OR running <= $4::int8),
     s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap)
UPDATE {schema}.messages m
   SET status = 'processing', attempts = least(m.attempts, 2147483646) + 1,
       locked_by = $2, locked_at = now()
  FROM b, s WHERE m.id = b.id
RETURNING m.id, m.event_id,
          CASE WHEN b.size <= $5 THEN m.event_type END AS event_type, m.event_version,
          CASE WHEN b.size <= $5 THEN m.aggregate_type END AS aggregate_type,
          CASE WHEN b.size <= $5 THEN m.aggregate_id END AS aggregate_id,
          CASE WHEN b.size <= $5 THEN m.topic END AS topic,
          CASE WHEN b.size <= $5 THEN m.payload END AS payload,
          CASE WHEN b.size <= $5 THEN m.headers END AS headers,
          m.attempts, m.created_at, m.locked_at, b.size AS message_bytes,
          CASE WHEN b.size > $5 THEN octet_length(m.payload::text)::int8 END AS payload_bytes,
          pg_snapshot_xmin(s.snap)::text::int8 AS snapshot_xmin,
          pg_snapshot_xmax(s.snap)::text::int8 AS snapshot_xmax,
          {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key
