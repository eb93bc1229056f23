-- DRAFT (docs/design/insert-only.md, phase 2): the next batch of lane $1
-- in its window: rows committed after snapshot $2 and visible in snapshot
-- $3, above id $4, in id order. No lock and no write: the settle
-- (settle.sql) records how far the lane got. The window's bounds are
-- parameters (no join), so the id bound is an index condition and the walk
-- starts at $4 (as a join it restarted at the first id: 33,000 msg/s in
-- the prototype); the xid is not bounded here, or the planner takes the
-- xid index and sorts the whole window (11,000 msg/s).
--
-- Parameters: $1 int4 the lane, $2 text lo, $3 text hi (pg_snapshot),
-- $4 int8 the id to read after, $5 int8 how many rows at most, $6 int8 the
-- batch's byte budget, $7 int8 the max message size in bytes.
--
-- Returns the row as claim.sql does (a row over $7 carries no content,
-- only payload_bytes; attempts is 0: a row here was never published),
-- then aggregate_key (int8, as claim_ordered.sql) and held (bool): its
-- aggregate has a row in retries that is not dead, so it goes there
-- behind it, not to the destination.
WITH c AS (
       SELECT m.id,
              (octet_length(m.payload::text) + octet_length(m.headers::text)
               + octet_length(m.topic) + octet_length(m.event_type)
               + octet_length(m.aggregate_type) + octet_length(m.aggregate_id))::int8 AS size
         FROM {schema}.messages m
        WHERE m.id > $4
          AND {schema}.message_lane(m.aggregate_type, m.aggregate_id) = $1
          AND pg_visible_in_snapshot(m.xid, $3::text::pg_snapshot)
          AND NOT pg_visible_in_snapshot(m.xid, $2::text::pg_snapshot)
        ORDER BY m.id LIMIT $5),
     w AS (
       SELECT id, size, row_number() OVER (ORDER BY id) AS n,
              sum(CASE WHEN size <= $7::int8 THEN size ELSE 0 END)
                OVER (ORDER BY id) AS running
         FROM c),
     b AS (SELECT id, size FROM w WHERE n = 1 OR running <= $6::int8)
SELECT m.id, m.event_id,
       CASE WHEN b.size <= $7 THEN m.event_type END AS event_type, m.event_version,
       CASE WHEN b.size <= $7 THEN m.aggregate_type END AS aggregate_type,
       CASE WHEN b.size <= $7 THEN m.aggregate_id END AS aggregate_id,
       CASE WHEN b.size <= $7 THEN m.topic END AS topic,
       CASE WHEN b.size <= $7 THEN m.payload END AS payload,
       CASE WHEN b.size <= $7 THEN m.headers END AS headers,
       0::int4 AS attempts, m.created_at, b.size AS message_bytes,
       CASE WHEN b.size > $7 THEN octet_length(m.payload::text)::int8 END AS payload_bytes,
       {schema}.aggregate_key(m.aggregate_type, m.aggregate_id) AS aggregate_key,
       EXISTS (SELECT 1 FROM {schema}.retries r
                WHERE r.aggregate_type = m.aggregate_type AND r.aggregate_id = m.aggregate_id
                  AND r.dead_at IS NULL) AS held
  FROM b JOIN {schema}.messages m ON m.id = b.id
 ORDER BY m.id
