-- claim_ordered.sql taking only rows of the buckets this relay owns whose
-- aggregate is not held back, reading a bounded number of rows.
--
-- Parameters: those of claim_ordered.sql ($1 int8 how many rows at most,
-- $2 text the relay's id, $3 int8 the lowest id to read, $4 int8 the
-- batch's byte budget, $5 int8 the max message size in bytes, $6 int8 the
-- relay's token), then $7 bytea the owned buckets (a 1,024-bit map; NULL:
-- all), $8 int8[] the aggregate keys held back, $9 int8[] the highest id
-- let through for each, $10 int8 how many live rows from $3 it may read.
--
-- Returns claim_ordered.sql's columns (the claimed row, aggregate_key,
-- snapshot_xmin, snapshot_xmax), then scanned_upto (int8 or NULL): the
-- highest id the claim read and could have taken, so that a claim that
-- filtered out everything it read still moves the floor. One row more than
-- was claimed (only that row when nothing was), its claimed columns NULL.
WITH a AS (SELECT 1 FROM {schema}.relays
            WHERE relay_id = $2 AND token = $6 AND lease_until > now() FOR SHARE),
     -- The filter can pass over any number of rows (every row of an
     -- aggregate in flight, or behind a failed message): the scan is bounded
     -- to the first $10 live rows from the floor, whose last id is what the
     -- claim read up to.
     r AS (SELECT max(id) AS upto FROM (SELECT id FROM {schema}.messages
            WHERE id >= $3 AND dead_at IS NULL ORDER BY id LIMIT $10) x),
     c AS (
       SELECT id,
              (octet_length(payload::text) + octet_length(headers::text)
               + octet_length(topic) + octet_length(event_type)
               + octet_length(aggregate_type) + octet_length(aggregate_id))::int8 AS size
         FROM {schema}.messages
        WHERE id >= $3 AND status IN ('pending', 'failed') AND next_run_at <= now()
          AND dead_at IS NULL AND EXISTS (SELECT 1 FROM a)
          -- The filter is plain SQL, evaluated in the scan: the row's bucket
          -- is owned (get_bit as BucketSet lays the map out), and its
          -- aggregate is not held back past its head. It used to be
          -- migration 7's plpgsql key_allowed (dropped by migration 11),
          -- which hid the filter from the planner so that it kept the
          -- claimable index in id order; the bound on r does that now (the
          -- scan stops at upto whatever the filter's estimate), and the
          -- bucket test is written <> 0, which the planner takes as letting
          -- almost every row through. A plpgsql call per row read cost a
          -- claim of a quarter of the buckets about 2.5 ms of its 7.5
          -- (a_filtered_claim_reads_the_claimable_index_in_id_order pins the
          -- plan; docs/performance.md has the figures).
          AND id <= (SELECT upto FROM r)
          AND ($7::bytea IS NULL
               OR get_bit($7::bytea, ({schema}.aggregate_key(aggregate_type, aggregate_id) & 1023)::int) <> 0)
          AND coalesce(id <= ($9::int8[])[array_position($8::int8[],
                               {schema}.aggregate_key(aggregate_type, aggregate_id))], true)
        ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED),
     w AS (
       SELECT id, size, row_number() OVER (ORDER BY id) AS n,
              sum(CASE WHEN size <= $5::int8 THEN size ELSE 0 END)
                OVER (ORDER BY id) AS running
         FROM c),
     b AS (SELECT id, size FROM w WHERE n = 1 OR running <= $4::int8),
     s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap),
     u AS (
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
                 {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key)
-- One row even when nothing is claimed (the claimed columns NULL), with the
-- snapshot and scanned_upto: the claim read every row up to it, so the
-- floor may pass it. Only when the claim took all it could of what it read
-- (neither the limit nor the byte budget cut it short).
SELECT u.*,
       pg_snapshot_xmin(s.snap)::text::int8 AS snapshot_xmin,
       pg_snapshot_xmax(s.snap)::text::int8 AS snapshot_xmax,
       CASE WHEN (SELECT count(*) FROM c) < $1
             AND (SELECT count(*) FROM b) = (SELECT count(*) FROM c)
            THEN (SELECT upto FROM r) END AS scanned_upto
  FROM s LEFT JOIN u ON true
