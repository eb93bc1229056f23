WITH h AS (
   SELECT m.id, m.aggregate_type, m.aggregate_id
     FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages
            WHERE id >= :floor AND status IN ('pending', 'failed') AND next_run_at <= now() AND dead_at IS NULL
            ORDER BY id LIMIT 200) w
     JOIN outbox.messages m ON m.id = w.id
    WHERE (SELECT max(p.id) FROM outbox.messages p
            WHERE p.aggregate_type = w.aggregate_type AND p.aggregate_id = w.aggregate_id
              AND p.id < w.id AND p.dead_at IS NULL) IS NULL
      AND m.status IN ('pending', 'failed') AND m.next_run_at <= now() AND m.dead_at IS NULL
    LIMIT 50 FOR UPDATE OF m SKIP LOCKED),
 f AS (
   SELECT x.id, h.id AS head, x.ord FROM h CROSS JOIN LATERAL (
     SELECT y.id, y.ord FROM (
       SELECT y.id, row_number() OVER (ORDER BY y.id) AS ord,
              bool_and(y.status IN ('pending', 'failed') AND y.next_run_at <= now()) OVER (ORDER BY y.id) AS ok
         FROM (SELECT id, status, next_run_at FROM outbox.messages y
                WHERE y.aggregate_type = h.aggregate_type AND y.aggregate_id = h.aggregate_id
                  AND y.id > h.id AND y.dead_at IS NULL
                ORDER BY y.id LIMIT (50 - (SELECT count(*) FROM h))) y) y
      WHERE y.ok) x),
 fsel AS (SELECT id, head, ord FROM f ORDER BY ord, id LIMIT (50 - (SELECT count(*) FROM h))),
 fl AS (SELECT m.id FROM outbox.messages m
         WHERE m.id IN (SELECT id FROM fsel) AND m.status IN ('pending', 'failed') AND m.dead_at IS NULL
         FOR UPDATE SKIP LOCKED),
 fin AS (SELECT id FROM (SELECT fs.id, fs.ord, row_number() OVER (PARTITION BY fs.head ORDER BY fs.ord) AS rn
                           FROM fsel fs JOIN fl USING (id)) z WHERE rn = ord),
 c AS (SELECT id FROM h UNION ALL SELECT id FROM fin),
 s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap, clock_timestamp() AS ts),
 claimed AS (UPDATE outbox.messages m SET status = 'processing', attempts = m.attempts + 1, locked_by = 'c' || :client_id, locked_at = s.ts
  FROM c, s WHERE m.id = c.id
  RETURNING m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id, m.topic, m.payload, m.headers, m.attempts, m.created_at, m.locked_at, pg_snapshot_xmin(s.snap)::text::int8 AS xmin, pg_snapshot_xmax(s.snap)::text::int8 AS xmax)
SELECT 0 AS floor, quote_literal(coalesce(array_agg(id)::text, '{}')) AS ids, count(*) AS got FROM claimed \gset
WITH b AS (SELECT id, aggregate_type, aggregate_id, random() < 0.15 AS bad FROM outbox.messages WHERE id = ANY(:ids::int8[]) AND status = 'processing' AND locked_by = 'c' || :client_id),
 r AS (SELECT id, bad, coalesce(bool_or(bad) OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS after_bad FROM b),
 sent AS (DELETE FROM outbox.messages WHERE id IN (SELECT id FROM r WHERE NOT bad AND NOT after_bad) AND status = 'processing' AND locked_by = 'c' || :client_id RETURNING *),
 moved AS (INSERT INTO outbox.messages_sent (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, sent_at) SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, clock_timestamp() FROM sent RETURNING 1),
 failed AS (UPDATE outbox.messages SET status = 'failed', locked_by = NULL, locked_at = NULL, next_run_at = now() + interval '30 ms', last_error = 'injected' WHERE id IN (SELECT id FROM r WHERE bad AND NOT after_bad) RETURNING 1),
 released AS (UPDATE outbox.messages SET status = 'pending', attempts = greatest(attempts - 1, 0), locked_by = NULL, locked_at = NULL WHERE id IN (SELECT id FROM r WHERE after_bad) RETURNING 1)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM failed), (SELECT count(*) FROM released);
