WITH c AS (SELECT id FROM outbox.messages WHERE id >= :floor AND status IN ('pending', 'failed') AND next_run_at <= now() AND dead_at IS NULL ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED),
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
