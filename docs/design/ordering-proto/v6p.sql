WITH c AS (SELECT m.id
     FROM (SELECT id, aggregate_type, aggregate_id FROM outbox.messages
            WHERE id >= :floor AND status IN ('pending', 'failed') AND next_run_at <= now() AND dead_at IS NULL
            ORDER BY id LIMIT 2000) w
     JOIN outbox.messages m ON m.id = w.id
    WHERE hashtextextended(w.aggregate_type || '/' || w.aggregate_id, 0) <> ALL(:blocked::int8[])
      AND m.status IN ('pending', 'failed') AND m.next_run_at <= now() AND m.dead_at IS NULL
    LIMIT 500 FOR UPDATE OF m SKIP LOCKED),
 s AS MATERIALIZED (SELECT pg_current_snapshot() AS snap),
 claimed AS (UPDATE outbox.messages m SET status = 'processing', attempts = m.attempts + 1, locked_by = 'c' || :client_id, locked_at = now()
  FROM c, s WHERE m.id = c.id
  RETURNING m.id, m.event_id, m.event_type, m.event_version, m.aggregate_type, m.aggregate_id, m.topic, m.payload, m.headers, m.attempts, m.created_at, m.locked_at, pg_snapshot_xmin(s.snap)::text::int8 AS xmin, pg_snapshot_xmax(s.snap)::text::int8 AS xmax)
SELECT coalesce(min(id), :floor) AS floor, coalesce(array_agg(id)::text, '{}') AS ids, count(*) AS got FROM claimed \gset
WITH sent AS (DELETE FROM outbox.messages WHERE id = ANY(:ids::int8[]) AND status = 'processing' AND locked_by = 'c' || :client_id RETURNING *) INSERT INTO outbox.messages_sent (id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, sent_at) SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, attempts, next_run_at, locked_by, locked_at, last_error, created_at, now() FROM sent;
