BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
WITH w AS MATERIALIZED (
   SELECT id, aggregate_type, aggregate_id FROM outbox.messages
    WHERE id >= 0 AND status IN ('pending', 'failed') AND next_run_at <= now() AND dead_at IS NULL
    ORDER BY id LIMIT 2000),
 h AS (
   SELECT m.id, m.aggregate_type, m.aggregate_id FROM outbox.messages m
    WHERE m.id IN (SELECT w.id FROM w
                    WHERE (SELECT max(p.id) FROM outbox.messages p
                            WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id
                              AND p.id < w.id AND p.dead_at IS NULL) IS NULL)
      AND m.status IN ('pending', 'failed') AND m.next_run_at <= now() AND m.dead_at IS NULL
    ORDER BY m.id LIMIT 500 FOR UPDATE SKIP LOCKED),
 f AS (
   SELECT x.id, h.id AS head, x.ord FROM h CROSS JOIN LATERAL (
     SELECT y.id, y.ord FROM (
       SELECT y.id, row_number() OVER (ORDER BY y.id) AS ord,
              bool_and(y.status IN ('pending', 'failed') AND y.next_run_at <= now()) OVER (ORDER BY y.id) AS ok
         FROM (SELECT id, status, next_run_at FROM outbox.messages y
                WHERE y.aggregate_type = h.aggregate_type AND y.aggregate_id = h.aggregate_id
                  AND y.id > h.id AND y.dead_at IS NULL
                ORDER BY y.id LIMIT (500 - (SELECT count(*) FROM h))) y) y
      WHERE y.ok) x),
 fsel AS (SELECT id, head, ord FROM f ORDER BY ord, id LIMIT (500 - (SELECT count(*) FROM h))),
 fl AS (SELECT m.id FROM outbox.messages m
         WHERE m.id IN (SELECT id FROM fsel) AND m.status IN ('pending', 'failed') AND m.dead_at IS NULL
         FOR UPDATE SKIP LOCKED),
 fin AS (SELECT id FROM (SELECT fs.id, fs.ord, row_number() OVER (PARTITION BY fs.head ORDER BY fs.ord) AS rn
                           FROM fsel fs JOIN fl USING (id)) z WHERE rn = ord),
 c AS (SELECT id FROM h UNION ALL SELECT id FROM fin),
 s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap),
 claimed AS (UPDATE outbox.messages m SET status = 'processing', attempts = m.attempts + 1, locked_by = 'c' || 1, locked_at = now()
  FROM c, s WHERE m.id = c.id
  RETURNING m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id, m.topic, m.payload, m.headers, m.attempts, m.created_at, m.locked_at, pg_snapshot_xmin(s.snap)::text::int8 AS xmin, pg_snapshot_xmax(s.snap)::text::int8 AS xmax)
SELECT coalesce(min(id), 0) AS floor, quote_literal(coalesce(array_agg(id)::text, '{}')) AS ids, count(*) AS got FROM claimed
; ROLLBACK;
