-- DRAFT (docs/design/insert-only.md, phase 2): the hot path's backlog, for
-- the gauges and `outbox stats`: the rows of `messages` their lane has not
-- passed (of topic $1, if not NULL), and the age of the oldest of them. A
-- row is passed once visible in its lane's `lo`, or visible in its `hi` at
-- or below its `last_id`; what the lanes copied into `retries` was passed,
-- and is counted there. One walk of the xid index from the lowest xmin of
-- the lanes' `lo`: anything older is visible in every `lo`.
--
-- Parameters: $1 text the topic, or NULL for all.
--
-- Returns pending (int8), oldest_age_seconds (float8, NULL when none).
WITH p AS (
       SELECT DISTINCT ON (lane) lane, lo, hi, last_id
         FROM {schema}.lane_positions ORDER BY lane, seq DESC),
     f AS (SELECT min(pg_snapshot_xmin(lo)) AS xmin FROM p)
SELECT count(*)::int8 AS pending,
       extract(epoch FROM now() - min(m.created_at))::float8 AS oldest_age_seconds
  FROM {schema}.messages m
  JOIN p ON p.lane = {schema}.message_lane(m.aggregate_type, m.aggregate_id)
 WHERE m.xid >= (SELECT xmin FROM f)
   AND ($1::text IS NULL OR m.topic = $1)
   AND NOT pg_visible_in_snapshot(m.xid, p.lo)
   AND NOT (pg_visible_in_snapshot(m.xid, p.hi) AND m.id <= p.last_id)
